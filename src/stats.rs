//! What devices report about themselves, the same on every backend: memory pool statistics
//! and the matmul autotuner's records.

use serde::{Deserialize, Serialize};

use crate::ops::MatmulTile;

/// Memory statistics of a device's buffer pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Bytes held by live tensors and in-flight temporaries.
    pub live_bytes: u64,
    /// Bytes kept in the pool for reuse.
    pub pooled_bytes: u64,
    /// Peak of `live_bytes`.
    pub peak_live_bytes: u64,
    /// Buffers created on the device.
    pub allocations: u64,
    /// Buffer requests served from the pool.
    pub reuses: u64,
    /// Dispatches whose bind group came from the cache instead of being created.
    pub bind_group_hits: u64,
}

impl MemoryStats {
    /// The share of buffer requests the pool served without allocating (0 when none was made).
    pub fn hit_rate(&self) -> f64 {
        let requests = self.allocations + self.reuses;
        if requests == 0 {
            0.0
        } else {
            self.reuses as f64 / requests as f64
        }
    }
}

/// What the autotuner measured for one size class on one adapter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuneRecord {
    /// The size class, e.g. `f32 m:513-1024 n:1025-2048 k:>2048`.
    pub class: String,
    /// The sizes timed: `[m, n, k]`.
    pub shape: [u64; 3],
    /// The fastest tile.
    pub best: MatmulTile,
    /// Each tile timed, with microseconds per matmul.
    pub timings_us: Vec<(MatmulTile, f64)>,
}

impl TuneRecord {
    /// The speed of the best tile, in TFLOP/s.
    pub fn best_tflops(&self) -> f64 {
        let [m, n, k] = self.shape.map(|v| v as f64);
        let us = self
            .timings_us
            .iter()
            .find(|(t, _)| *t == self.best)
            .map_or(f64::NAN, |(_, us)| *us);
        2.0 * m * n * k / us / 1e6
    }
}
