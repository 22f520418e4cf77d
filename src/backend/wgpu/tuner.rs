//! The matmul autotuner: on the first matmul of a size class on an adapter, time every tile
//! configuration of shaders/matmul.wgsl that the adapter's limits allow and remember the
//! fastest, in memory for the process and, natively, on disk, so a later process tunes
//! nothing.
//!
//! Size classes split m, n and k at 64, 512, 1024 and 2048 (1024 and 2048 want different
//! tiles on an H200). The timing runs the call's own sizes,
//! capped at 4096 per side (512 on software adapters, whose runs are slow), on scratch
//! buffers: a warm-up dispatch, then enough back-to-back dispatches in one submit to last a
//! few milliseconds, best of three. Natively the first call waits for this (tens of
//! milliseconds on a discrete GPU, about a second on lavapipe); in the browser nothing may
//! block, so the call uses the default tile and the tuning runs at the next `read` or
//! `synchronize` (or [`crate::Device::autotune`]).
//!
//! `GPUKIT_AUTOTUNE=0` turns tuning off (the default tile everywhere); `GPUKIT_CACHE_DIR`
//! moves the cache file (default `$XDG_CACHE_HOME/gpukit`, else `~/.cache/gpukit`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytemuck::{Pod, Zeroable};
use web_time::{Duration, Instant};

use super::pipelines::{Arith, Kernel, Layout};
use super::{lock, Shared};
use crate::error::{Error, Result};
use crate::ops::MatmulTile;

/// The side length past which tuning runs on a capped size.
const CAP: u64 = 4096;
const CAP_SOFTWARE: u64 = 512;
/// How long one timed submit should last.
const TARGET: Duration = Duration::from_millis(4);
const MAX_REPS: u64 = 64;

pub(crate) use crate::stats::TuneRecord;

/// Every adapter's records, by adapter key, then by class.
type Records = HashMap<String, HashMap<String, TuneRecord>>;

fn store() -> &'static Mutex<Records> {
    static STORE: OnceLock<Mutex<Records>> = OnceLock::new();
    STORE.get_or_init(|| Mutex::new(disk::load()))
}

/// Names an adapter, its driver and the matmul template: a changed kernel is tuned afresh.
pub(crate) fn adapter_key(info: &crate::info::DeviceInfo) -> String {
    // A hash that is the same in every build and Rust version, so the cache file outlives
    // upgrades of the compiler. How the modules are created (runtime checks off natively)
    // changes the timings as much as the source does.
    let hash = crate::cache::stable_hash(&[
        super::pipelines::Shader::Matmul.source(),
        super::pipelines::Shader::MatmulCoop.source(),
        "modules without runtime checks",
    ]);
    format!(
        "{:?} {} ({}) matmul.wgsl {:016x}",
        info.backend, info.adapter, info.driver, hash
    )
}

/// The size class of a matmul: the name of each dimension's range.
fn class(m: u64, n: u64, k: u64, arith: Arith) -> String {
    let range = |v: u64| match v {
        0..=64 => "1-64",
        65..=512 => "65-512",
        513..=1024 => "513-1024",
        1025..=2048 => "1025-2048",
        _ => ">2048",
    };
    let kind = match arith {
        Arith::F32 => "f32",
        Arith::F16 => "f16",
        Arith::F16Rounded => "f16r",
        Arith::F16Coop => "f16c",
        Arith::F16CoopHalves => "f16h",
    };
    format!("{kind} m:{} n:{} k:{}", range(m), range(n), range(k))
}

/// Whether tuning is on (natively `GPUKIT_AUTOTUNE=0` turns it off).
fn enabled() -> bool {
    #[cfg(native)]
    {
        !matches!(
            std::env::var("GPUKIT_AUTOTUNE").as_deref(),
            Ok("0" | "off" | "false")
        )
    }
    #[cfg(web)]
    {
        true
    }
}

/// A matmul waiting to be tuned (browser only).
#[derive(Clone, PartialEq)]
pub(crate) struct Pending {
    class: String,
    shape: [u64; 3],
    arith: Arith,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    a_stride: u32,
    b_stride: u32,
    _pad: [u32; 3],
}

impl Shared {
    /// Whether a tile fits this device's workgroup limits.
    pub(super) fn tile_fits(&self, tile: MatmulTile, arith: Arith) -> bool {
        let threads = arith.threads(tile);
        let (x, y) = if matches!(arith, Arith::F16Coop | Arith::F16CoopHalves) {
            (threads, 1)
        } else {
            (16, 16)
        };
        arith.has_tile(tile)
            && arith.workgroup_bytes(tile) <= self.limits.max_compute_workgroup_storage_size
            && self.limits.max_compute_invocations_per_workgroup >= threads
            && self.limits.max_compute_workgroup_size_x >= x
            && self.limits.max_compute_workgroup_size_y >= y
    }

    /// The tile for a matmul of these sizes: the remembered winner of its class, else
    /// (natively) the winner of a tuning run now, else the default.
    pub(super) fn matmul_tile(
        self: &Arc<Self>,
        m: u64,
        n: u64,
        k: u64,
        arith: Arith,
    ) -> MatmulTile {
        let class = class(m, n, k, arith);
        if let Some(r) = lock(store())
            .get(&self.adapter_key)
            .and_then(|c| c.get(&class))
        {
            return r.best;
        }
        if !enabled() || m * n * k == 0 {
            return MatmulTile::DEFAULT;
        }
        let job = Pending {
            class,
            shape: [m, n, k],
            arith,
        };
        #[cfg(native)]
        {
            match crate::future::block_on(self.tune(&job)) {
                Ok(r) => r.best,
                Err(e) => {
                    log::warn!("gpukit: matmul autotuning failed ({e}); using the default tile");
                    MatmulTile::DEFAULT
                }
            }
        }
        #[cfg(web)]
        {
            let mut pending = lock(&self.pending_tunes);
            if !pending.contains(&job) {
                pending.push(job);
            }
            MatmulTile::DEFAULT
        }
    }

    /// The record of the class of these sizes, tuning it now if it has none.
    pub(super) async fn tune_class(
        self: &Arc<Self>,
        [m, n, k]: [u64; 3],
        arith: Arith,
    ) -> Result<TuneRecord> {
        let class = class(m, n, k, arith);
        if let Some(r) = lock(store())
            .get(&self.adapter_key)
            .and_then(|c| c.get(&class))
        {
            return Ok(r.clone());
        }
        let job = Pending {
            class,
            shape: [m, n, k],
            arith,
        };
        lock(&self.pending_tunes).retain(|p| *p != job);
        self.tune(&job).await
    }

    /// Tunes what waits to be tuned (the browser's deferred first uses).
    pub(super) async fn tune_pending(self: &Arc<Self>) -> Result<()> {
        loop {
            let job = lock(&self.pending_tunes).pop();
            let Some(job) = job else {
                return Ok(());
            };
            self.tune(&job).await?;
        }
    }

    /// This adapter's records.
    pub(super) fn tune_records(&self) -> Vec<TuneRecord> {
        let mut v: Vec<TuneRecord> = lock(store())
            .get(&self.adapter_key)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default();
        crate::small_sort::sort_small_by(&mut v, |a, b| a.class < b.class);
        v
    }

    /// Times every candidate tile on `job`'s sizes and records the fastest.
    async fn tune(self: &Arc<Self>, job: &Pending) -> Result<TuneRecord> {
        let cap = if self.software { CAP_SOFTWARE } else { CAP };
        let [m, n, k] = job.shape.map(|v| v.clamp(1, cap));
        let scratch = {
            let mut st = self.state();
            // Straight from the pool: a batch being encoded must neither count nor reuse them.
            let mut take = |elems: u64| self.alloc_fresh(&mut st, elems * 4);
            [take(m * k)?, take(k * n)?, take(m * n)?]
        };
        let params = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("gpukit autotune parameters"),
            size: std::mem::size_of::<Params>() as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let p = Params {
            m: m as u32,
            n: n as u32,
            k: k as u32,
            a_stride: 0,
            b_stride: 0,
            _pad: [0; 3],
        };
        self.queue.write_buffer(&params, 0, bytemuck::bytes_of(&p));
        let mut timings = Vec::new();
        let mut failure = None;
        for &tile in job.arith.candidates() {
            if !self.tile_fits(tile, job.arith) {
                continue;
            }
            match self
                .time_tile(tile, job.arith, [m, n, k], &params, &scratch)
                .await
            {
                Ok(us) => timings.push((tile, us)),
                Err(e) => {
                    log::warn!("gpukit: matmul tile {tile} failed while tuning: {e}");
                    failure = Some(e);
                }
            }
        }
        {
            let mut st = self.state();
            let pending = st.recorder.pending();
            for b in scratch {
                st.pool.retire(b, pending);
            }
        }
        let Some(&(best, _)) = timings.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
            return Err(failure.unwrap_or(Error::Backend {
                backend: self.backend,
                detail: "no matmul tile fits this adapter's limits".into(),
            }));
        };
        let record = TuneRecord {
            class: job.class.clone(),
            shape: [m, n, k],
            best,
            timings_us: timings,
        };
        log::info!(
            "gpukit: matmul tile for {} on {}: {best}",
            record.class,
            self.adapter_key
        );
        let mut all = lock(store());
        all.entry(self.adapter_key.clone())
            .or_default()
            .insert(record.class.clone(), record.clone());
        disk::save(&all);
        Ok(record)
    }

    /// Microseconds per dispatch of one tile, best of three timed submits.
    async fn time_tile(
        &self,
        tile: MatmulTile,
        arith: Arith,
        [m, n, k]: [u64; 3],
        params: &wgpu::Buffer,
        [a, b, out]: &[wgpu::Buffer; 3],
    ) -> Result<f64> {
        let kernel = Kernel::Matmul {
            tile,
            arith,
            transpose_a: false,
            transpose_b: false,
            bias: false,
            activation: None,
            // The f16-storage kernel reads vec4s always (its callers check k and n).
            vectors: matches!(arith, Arith::F16Coop | Arith::F16CoopHalves)
                && k % 4 == 0
                && n % 4 == 0,
            // A half weight's kernel differs in B's loads only: its tile is timed in f32.
            weight: crate::DType::F32,
        };
        let (pipeline, layout) = {
            let mut st = self.state();
            let layout = st
                .pipelines
                .bind_group_layout(&self.device, Layout::ThreeInputs)
                .clone();
            let pipeline = st
                .pipelines
                .get(&self.device, kernel, || {
                    lock(&self.error).take().map(|e| e.to_string())
                })?
                .clone();
            (pipeline, layout)
        };
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("gpukit autotune"),
            layout: &layout,
            entries: &[params, a, b, a, out]
                .iter()
                .enumerate()
                .map(|(i, buf)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: buf.as_entire_binding(),
                })
                .collect::<Vec<_>>(),
        });
        let grid = [
            n.div_ceil(u64::from(tile.tile_n())) as u32,
            m.div_ceil(u64::from(tile.tile_m())) as u32,
        ];
        let (pipeline, bind_group) = (&pipeline, &bind_group);
        let run = |reps: u64| async move {
            let mut encoder = self
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor::default());
            {
                let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, bind_group, &[]);
                for _ in 0..reps {
                    pass.dispatch_workgroups(grid[0], grid[1], 1);
                }
            }
            let start = Instant::now();
            self.queue.submit([encoder.finish()]);
            self.idle().await?;
            self.check()?;
            Ok::<Duration, Error>(start.elapsed())
        };
        run(1).await?;
        let once = run(1).await?;
        let reps = (TARGET.as_secs_f64() / once.as_secs_f64().max(1e-6)).clamp(1.0, MAX_REPS as f64)
            as u64;
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t = run(reps).await?;
            best = best.min(t.as_secs_f64() * 1e6 / reps as f64);
        }
        Ok(best)
    }
}

/// The on-disk cache (native only; the browser keeps records in memory).
mod disk {
    use super::Records;

    #[cfg(native)]
    const FILE: &str = "matmul-tuning.json";

    /// The records saved by earlier processes; nothing when there is no readable file.
    pub(super) fn load() -> Records {
        #[cfg(native)]
        if let Some(p) = crate::cache::path(FILE) {
            return load_from(&p);
        }
        Records::new()
    }

    #[cfg(native)]
    pub(super) fn load_from(p: &std::path::Path) -> Records {
        crate::cache::load_from(p)
    }

    /// Writes the records (best effort: a read-only home only costs a re-tune).
    pub(super) fn save(records: &Records) {
        #[cfg(native)]
        crate::cache::save(FILE, records);
        #[cfg(web)]
        let _ = records;
    }

    #[cfg(native)]
    #[cfg(test)]
    pub(super) fn save_to(p: &std::path::Path, records: &Records) -> std::io::Result<()> {
        crate::cache::save_to(p, records)
    }
}

#[cfg(all(test, native))]
mod tests {
    use super::*;

    #[test]
    fn classes_split_each_side() {
        assert_eq!(class(1, 64, 65, Arith::F32), "f32 m:1-64 n:1-64 k:65-512");
        assert_eq!(
            class(4096, 2048, 513, Arith::F16),
            "f16 m:>2048 n:1025-2048 k:513-1024"
        );
        assert_eq!(
            class(1024, 1025, 2049, Arith::F32),
            "f32 m:513-1024 n:1025-2048 k:>2048"
        );
        assert_ne!(
            class(7, 7, 7, Arith::F32),
            class(7, 7, 7, Arith::F16Rounded)
        );
    }

    #[test]
    fn records_round_trip_through_the_cache_file() {
        let mut all = Records::new();
        let r = TuneRecord {
            class: class(100, 100, 100, Arith::F32),
            shape: [100, 100, 100],
            best: MatmulTile::new(8, 4, 16),
            timings_us: vec![
                (MatmulTile::DEFAULT, 12.5),
                (MatmulTile::new(8, 4, 16), 10.0),
            ],
        };
        all.entry("adapter".into())
            .or_default()
            .insert(r.class.clone(), r.clone());
        let dir = std::env::temp_dir().join(format!("gpukit-tune-{}", std::process::id()));
        let file = dir.join("sub").join("matmul-tuning.json");
        assert!(disk::load_from(&file).is_empty(), "no file: no records");
        disk::save_to(&file, &all).unwrap();
        let back = disk::load_from(&file);
        assert_eq!(back["adapter"][&r.class], r);
        std::fs::write(&file, "{ not json").unwrap();
        assert!(
            disk::load_from(&file).is_empty(),
            "a broken file is ignored"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert!((r.best_tflops() - 2e6 / 10.0 / 1e6).abs() < 1e-12);
    }
}
