//! The GPU-or-CPU policy for software adapters (llvmpipe/lavapipe, SwiftShader, WARP).
//!
//! A software adapter runs "GPU" work on the same CPU cores as gpukit's CPU backend, through
//! a driver's upload, dispatch and read-back path, so it is often slower at every size; on
//! some machines it wins for large work (SwiftShader in a browser uses every core, the wasm CPU
//! backend one). Instead of a fixed threshold, automatic selection measures both on first use:
//! a read round trip, the cost of one more op, upload and read-back throughput, add throughput
//! and matmul throughput. From these it predicts, for each op class and size, the time of one
//! op with its inputs uploaded and its result read back, and finds the smallest size from which
//! the adapter is faster (`None`: never, up to the largest size considered).
//!
//! The measurements are kept per adapter and CPU: natively in `dispatch-policy.json` in the
//! cache directory (see `GPUKIT_CACHE_DIR`), in the browser in memory for the page. When the
//! CPU wins at every size of every class, `Device::new` runs on the CPU backend and says why in
//! `info().selection`; otherwise it runs a hybrid of both. Either way `info().policy` holds the
//! measurements and crossovers, and each op runs on the side its class and size call for
//! (see `Device::hybrid`). An explicit choice (`with_backend`, `GPUKIT_BACKEND`,
//! `Device::gpu`) never consults the policy.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use serde::{Deserialize, Serialize};
use web_time::Instant;

use crate::error::Result;
use crate::{Device, DeviceInfo};

/// What one side (the adapter or the CPU backend) measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    /// Upload 1024 floats and read them back: the fixed cost of any round trip, in µs.
    pub round_trip_us: f64,
    /// What one more small op adds to a chain, in µs.
    pub op_us: f64,
    /// Host-to-device copy throughput, GB/s.
    pub upload_gbps: f64,
    /// Device-to-host read throughput, GB/s.
    pub read_gbps: f64,
    /// Elementwise add on resident tensors, elements per second / 1e9.
    pub add_gelems: f64,
    /// Square f32 matmul on resident tensors, GFLOP/s.
    pub matmul_gflops: f64,
}

/// Op classes the policy predicts: elementwise-like ops scale with elements, products with
/// flops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpClass {
    /// Elementwise, reductions, softmax, norms, copies: time grows with the element count.
    Elementwise,
    /// Matmul, conv2d, attention: time grows with the flop count (size = square side).
    Matmul,
}

impl Costs {
    /// Predicted seconds for one op of `class` at `size` (elements, or the side of a square
    /// matmul), with its inputs uploaded and its result read back.
    pub fn predict(&self, class: OpClass, size: usize) -> f64 {
        let s = size as f64;
        let (bytes_in, bytes_out, work) = match class {
            OpClass::Elementwise => (8.0 * s, 4.0 * s, s / (self.add_gelems * 1e9)),
            OpClass::Matmul => (
                8.0 * s * s,
                4.0 * s * s,
                2.0 * s * s * s / (self.matmul_gflops * 1e9),
            ),
        };
        (self.round_trip_us + self.op_us) * 1e-6
            + bytes_in / (self.upload_gbps * 1e9)
            + work
            + bytes_out / (self.read_gbps * 1e9)
    }
}

/// The sizes the crossovers are looked for at.
const ELEMENTWISE_SIZES: [usize; 9] = [
    1 << 10,
    1 << 12,
    1 << 14,
    1 << 16,
    1 << 18,
    1 << 20,
    1 << 22,
    1 << 24,
    1 << 26,
];
const MATMUL_SIZES: [usize; 9] = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096];

/// The measured policy for one software adapter on this CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DispatchPolicy {
    /// The adapter measured.
    pub adapter: String,
    /// Its costs.
    pub adapter_costs: Costs,
    /// The CPU backend's costs.
    pub cpu_costs: Costs,
    /// Elements from which the adapter runs elementwise ops faster (`None`: never, up to 2^26).
    pub elementwise_gpu_from: Option<usize>,
    /// Square matmul side from which the adapter is faster (`None`: never, up to 4096).
    pub matmul_gpu_from: Option<usize>,
    /// `"cpu"` when the CPU won at every size of both classes, else `"adapter"`.
    pub choice: String,
}

impl DispatchPolicy {
    fn from_costs(adapter: String, gpu: Costs, cpu: Costs) -> DispatchPolicy {
        let from = |class, sizes: &[usize]| {
            sizes
                .iter()
                .copied()
                .find(|&s| gpu.predict(class, s) < cpu.predict(class, s))
        };
        let elementwise_gpu_from = from(OpClass::Elementwise, &ELEMENTWISE_SIZES);
        let matmul_gpu_from = from(OpClass::Matmul, &MATMUL_SIZES);
        let choice = if elementwise_gpu_from.is_none() && matmul_gpu_from.is_none() {
            "cpu"
        } else {
            "adapter"
        };
        DispatchPolicy {
            adapter,
            adapter_costs: gpu,
            cpu_costs: cpu,
            elementwise_gpu_from,
            matmul_gpu_from,
            choice: choice.into(),
        }
    }

    /// A policy with crossovers you choose instead of measured ones (for [`Device::hybrid`]):
    /// ops of a class from `elementwise_from` elements / `matmul_from` square side up run on
    /// the adapter (`None`: never). The costs are left at zero.
    ///
    /// [`Device::hybrid`]: crate::Device::hybrid
    pub fn fixed(
        adapter: impl Into<String>,
        elementwise_from: Option<usize>,
        matmul_from: Option<usize>,
    ) -> DispatchPolicy {
        let zero = Costs {
            round_trip_us: 0.0,
            op_us: 0.0,
            upload_gbps: 0.0,
            read_gbps: 0.0,
            add_gelems: 0.0,
            matmul_gflops: 0.0,
        };
        let cpu = elementwise_from.is_none() && matmul_from.is_none();
        DispatchPolicy {
            adapter: adapter.into(),
            adapter_costs: zero,
            cpu_costs: zero,
            elementwise_gpu_from: elementwise_from,
            matmul_gpu_from: matmul_from,
            choice: if cpu { "cpu" } else { "adapter" }.into(),
        }
    }

    /// Whether the CPU backend was faster at every size considered.
    pub fn prefers_cpu(&self) -> bool {
        self.choice == "cpu"
    }

    /// One line for logs and `info().selection`.
    pub fn summary(&self) -> String {
        let from = |v: Option<usize>, what: &str| match v {
            Some(s) => format!("adapter from {s} {what}"),
            None => "CPU at every size".into(),
        };
        format!(
            "measured policy for {}: elementwise {}, matmul {}",
            self.adapter,
            from(self.elementwise_gpu_from, "elements"),
            from(self.matmul_gpu_from, "square")
        )
    }
}

/// Policies measured so far, by adapter-and-CPU key (loaded from disk natively).
type Store = HashMap<String, DispatchPolicy>;

#[cfg(native)]
const FILE: &str = "dispatch-policy.json";

fn store() -> &'static Mutex<Store> {
    static STORE: OnceLock<Mutex<Store>> = OnceLock::new();
    STORE.get_or_init(|| {
        #[cfg(native)]
        if let Some(p) = crate::cache::path(FILE) {
            return Mutex::new(crate::cache::load_from(&p));
        }
        Mutex::new(Store::new())
    })
}

/// Names the adapter, the CPU and the build: an unoptimised (debug) build's CPU kernels are
/// 10-50x slower than a release build's while the driver is the same, so each build measures
/// for itself.
fn key(adapter: &DeviceInfo, cpu: &DeviceInfo) -> String {
    let build = if cfg!(debug_assertions) {
        "debug build"
    } else {
        "release build"
    };
    format!(
        "{} | {} {} | gpukit {} {build}",
        crate::backend::wgpu::tuner::adapter_key(adapter),
        cpu.adapter,
        cpu.driver,
        env!("CARGO_PKG_VERSION")
    )
}

/// The policy for `adapter` (a software adapter's device): remembered, or measured now.
pub(crate) async fn for_adapter(adapter: &Device) -> Result<DispatchPolicy> {
    let cpu = Device::cpu_quiet();
    let k = key(adapter.info(), cpu.info());
    if let Some(p) = lock(store()).get(&k) {
        return Ok(p.clone());
    }
    let gpu_costs = measure(adapter).await?;
    let cpu_costs = measure(&cpu).await?;
    let policy = DispatchPolicy::from_costs(adapter.info().adapter.clone(), gpu_costs, cpu_costs);
    // Devices opened at once may each have measured; the first result stored wins, so every
    // device of the process follows one policy.
    let mut s = lock(store());
    let kept = s.entry(k).or_insert(policy).clone();
    #[cfg(native)]
    crate::cache::save(FILE, &*s);
    Ok(kept)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The best of three timings (after one untimed run) of an async block, in seconds.
macro_rules! best_of_three {
    ($body:expr) => {{
        $body;
        let mut best = f64::INFINITY;
        for _ in 0..3 {
            let t0 = Instant::now();
            $body;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        best
    }};
}

/// Measures one device with the public tensor API (sizes kept small: software adapters are
/// slow, and this runs inside the first `Device::new`).
async fn measure(d: &Device) -> Result<Costs> {
    const SMALL: usize = 1024;
    const BIG: usize = 1 << 18;
    const CHAIN: usize = 16;
    const SIDE: usize = 128;
    let small = crate::bench_cpu::data(SMALL, 11);
    let big = crate::bench_cpu::data(BIG, 12);
    let square = crate::bench_cpu::data(SIDE * SIDE, 13);

    let round_trip = best_of_three!(d.tensor(&small, &[SMALL])?.read().await?);
    let chain = best_of_three!({
        let mut x = d.tensor(&small, &[SMALL])?;
        for _ in 0..CHAIN {
            x = x.add(&x)?;
        }
        x.read().await?
    });
    let upload = best_of_three!({
        drop(d.tensor(&big, &[BIG])?);
        d.synchronize().await?
    });
    let resident = d.tensor(&big, &[BIG])?;
    let read = best_of_three!(resident.read().await?);
    let add = best_of_three!({
        drop(resident.add(&resident)?);
        d.synchronize().await?
    });
    let m = d.tensor(&square, &[SIDE, SIDE])?;
    let matmul = best_of_three!({
        drop(m.matmul(&m)?);
        d.synchronize().await?
    });

    let positive = |v: f64| v.max(1e-9);
    let op = positive((chain - round_trip) / CHAIN as f64);
    let bytes = 4.0 * BIG as f64;
    Ok(Costs {
        round_trip_us: round_trip * 1e6,
        op_us: op * 1e6,
        upload_gbps: bytes / positive(upload) / 1e9,
        read_gbps: bytes / positive(read - round_trip) / 1e9,
        add_gelems: BIG as f64 / positive(add - op) / 1e9,
        matmul_gflops: 2.0 * (SIDE as f64).powi(3) / positive(matmul - op) / 1e9,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn costs(round_trip_us: f64, gbps: f64, add_gelems: f64, matmul_gflops: f64) -> Costs {
        Costs {
            round_trip_us,
            op_us: round_trip_us / 10.0,
            upload_gbps: gbps,
            read_gbps: gbps,
            add_gelems,
            matmul_gflops,
        }
    }

    #[test]
    fn a_slower_adapter_never_wins() {
        let gpu = costs(200.0, 2.0, 0.5, 5.0);
        let cpu = costs(1.0, 10.0, 2.0, 50.0);
        let p = DispatchPolicy::from_costs("slow".into(), gpu, cpu);
        assert_eq!((p.elementwise_gpu_from, p.matmul_gpu_from), (None, None));
        assert!(p.prefers_cpu());
        assert!(p.summary().contains("CPU at every size"), "{}", p.summary());
    }

    #[test]
    fn a_high_latency_high_throughput_adapter_wins_from_a_crossover() {
        // 1 ms per round trip but 10x the matmul throughput: the CPU wins small products.
        let gpu = costs(1000.0, 10.0, 2.0, 500.0);
        let cpu = costs(1.0, 10.0, 2.0, 50.0);
        let p = DispatchPolicy::from_costs("wide".into(), gpu, cpu);
        let from = p.matmul_gpu_from.expect("the adapter wins large products");
        assert!(from > 16 && from < 4096, "crossover at {from}");
        assert!(
            gpu.predict(OpClass::Matmul, from) < cpu.predict(OpClass::Matmul, from)
                && gpu.predict(OpClass::Matmul, from / 2) >= cpu.predict(OpClass::Matmul, from / 2)
        );
        // Equal elementwise throughput: the latency decides, so the CPU always wins those.
        assert_eq!(p.elementwise_gpu_from, None);
        assert!(!p.prefers_cpu());
    }
}
