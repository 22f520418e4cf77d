//! Per-op profiling on every backend: [`Device::profiler`] turns it on, each op then records
//! its time, and [`Profiler::summary`] reports count, mean, min, max and a rate (GB/s for
//! memory-bound ops, GFLOP/s for products) per op.
//!
//! How each backend times an op:
//! - CUDA: events recorded on the stream before and after the op (GPU time, no waiting);
//! - wgpu natively: the op is submitted and waited for, timed on the host (so each time
//!   includes one submit; the ops no longer share a compute pass while profiling);
//! - wgpu in the browser: the time to record the op (nothing can wait there);
//! - CPU: host time (its ops run when called).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::backend::control::{TimerStart, Timing};
use crate::backend::BackendImpl;
use crate::device::Device;
use crate::error::Result;

/// The work an op does: its rate in profiles, and where a hybrid device routes it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Work {
    /// A memory-bound op over `elements` elements, reading and writing `bytes`.
    Memory { elements: usize, bytes: f64 },
    /// A product: floating-point operations.
    Flops(f64),
}

impl Work {
    /// `n` f32 elements read and written `passes` times in all (an add of n: 3 passes).
    pub(crate) fn elements(n: usize, passes: usize) -> Work {
        Work::Memory {
            elements: n,
            bytes: 4.0 * n as f64 * passes as f64,
        }
    }

    /// The class and size a [`DispatchPolicy`](crate::DispatchPolicy) compares with its
    /// crossovers: elements for memory-bound ops, the side of the square matmul of the same
    /// flops for products.
    pub(crate) fn route(self) -> (crate::policy::OpClass, usize) {
        use crate::policy::OpClass;
        match self {
            Work::Memory { elements, .. } => (OpClass::Elementwise, elements),
            // 2 s^3 = flops.
            Work::Flops(f) => (OpClass::Matmul, (f / 2.0).cbrt().round() as usize),
        }
    }
}

struct Sample {
    op: &'static str,
    work: Work,
    timing: Timing,
}

/// A device's profiling state.
#[derive(Default)]
pub(crate) struct State {
    on: AtomicBool,
    samples: Mutex<Vec<Sample>>,
}

impl State {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Sample>> {
        self.samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The backend for one op, timing it while profiling is on (ends when dropped).
pub(crate) struct OpScope<'a> {
    device: &'a Device,
    op: &'static str,
    work: Work,
    start: Option<TimerStart>,
}

impl std::ops::Deref for OpScope<'_> {
    type Target = BackendImpl;

    fn deref(&self) -> &BackendImpl {
        self.device.backend()
    }
}

impl<'a> OpScope<'a> {
    pub(crate) fn new(device: &'a Device, op: &'static str, work: Work) -> OpScope<'a> {
        let start = if device.profile_state().on.load(Ordering::Relaxed) {
            device.backend().start_timer()
        } else {
            None
        };
        OpScope {
            device,
            op,
            work,
            start,
        }
    }
}

impl Drop for OpScope<'_> {
    fn drop(&mut self) {
        let Some(start) = self.start.take() else {
            return;
        };
        let Some(timing) = self.device.backend().stop_timer(start) else {
            return;
        };
        self.device.profile_state().lock().push(Sample {
            op: self.op,
            work: self.work,
            timing,
        });
    }
}

/// One op's statistics.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OpProfile {
    /// The op.
    pub op: &'static str,
    /// How many times it ran.
    pub count: usize,
    /// Mean time in microseconds.
    pub mean_us: f64,
    /// Fastest run, in microseconds.
    pub min_us: f64,
    /// Slowest run, in microseconds.
    pub max_us: f64,
    /// Total time in microseconds.
    pub total_us: f64,
    /// The mean rate: GB/s (bytes read and written) or GFLOP/s.
    pub rate: f64,
    /// `"GB/s"` or `"GFLOP/s"`.
    pub rate_unit: &'static str,
}

/// Collects per-op timings of a device while it lives; see the module docs.
///
/// ```no_run
/// # fn demo() -> gpukit::Result<()> {
/// let device = gpukit::Device::new_blocking()?;
/// let profiler = device.profiler();
/// let x = device.tensor(&vec![1.0; 1 << 20], &[1 << 20])?;
/// let _y = x.relu()?.softmax()?.read_blocking()?;
/// println!("{}", profiler.report()?);
/// # Ok(()) }
/// ```
pub struct Profiler {
    device: Device,
}

impl Profiler {
    pub(crate) fn start(device: &Device) -> Profiler {
        let st = device.profile_state();
        st.lock().clear();
        st.on.store(true, Ordering::Relaxed);
        Profiler {
            device: device.clone(),
        }
    }

    /// Per-op statistics of everything run since the profiler started (or was reset), ops in
    /// order of total time, largest first. Waits for the device's work to finish.
    pub fn summary(&self) -> Result<Vec<OpProfile>> {
        // Natively, wait for the device's work (nothing is pending on the CPU backend, where
        // this returns at once).
        #[cfg(native)]
        crate::future::block_on(self.device.synchronize())?;
        let samples = self.device.profile_state().lock();
        // Per op: the times, and the bytes and flops of all its runs.
        let mut by_op: BTreeMap<&'static str, (Vec<f64>, f64, f64)> = BTreeMap::new();
        for s in samples.iter() {
            let Some(secs) = s.timing.seconds() else {
                continue;
            };
            let entry = by_op.entry(s.op).or_insert((Vec::new(), 0.0, 0.0));
            entry.0.push(secs);
            match s.work {
                Work::Memory { bytes, .. } => entry.1 += bytes,
                Work::Flops(f) => entry.2 += f,
            }
        }
        let mut out: Vec<OpProfile> = by_op
            .into_iter()
            .map(|(op, (times, bytes, flops))| {
                let total: f64 = times.iter().sum();
                // An op is rated by flops when it reports any (products), else by bytes.
                let (amount, unit) = if flops > 0.0 {
                    (flops, "GFLOP/s")
                } else {
                    (bytes, "GB/s")
                };
                OpProfile {
                    op,
                    count: times.len(),
                    mean_us: total / times.len() as f64 * 1e6,
                    min_us: times.iter().copied().fold(f64::INFINITY, f64::min) * 1e6,
                    max_us: times.iter().copied().fold(0.0, f64::max) * 1e6,
                    total_us: total * 1e6,
                    rate: if total > 0.0 {
                        amount / total / 1e9
                    } else {
                        0.0
                    },
                    rate_unit: unit,
                }
            })
            .collect();
        crate::small_sort::sort_small_by(&mut out, |a, b| a.total_us > b.total_us);
        Ok(out)
    }

    /// The summary as a text table.
    pub fn report(&self) -> Result<String> {
        use std::fmt::Write;
        let rows = self.summary()?;
        let mut s = format!(
            "{:<14} {:>7} {:>11} {:>11} {:>11} {:>12} {:>10}\n",
            "op", "count", "mean us", "min us", "max us", "total us", "rate"
        );
        for r in rows {
            let _ = writeln!(
                s,
                "{:<14} {:>7} {:>11.1} {:>11.1} {:>11.1} {:>12.1} {:>10.1} {}",
                r.op, r.count, r.mean_us, r.min_us, r.max_us, r.total_us, r.rate, r.rate_unit
            );
        }
        Ok(s)
    }

    /// Forgets the samples so far.
    pub fn reset(&self) {
        self.device.profile_state().lock().clear();
    }
}

impl Drop for Profiler {
    fn drop(&mut self) {
        self.device
            .profile_state()
            .on
            .store(false, Ordering::Relaxed);
    }
}
