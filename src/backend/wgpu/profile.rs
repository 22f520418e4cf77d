//! Timing of replayed graphs, dispatch by dispatch (native, `GPUKIT_PROFILE_REPLAY=1` on a
//! device with timestamps inside passes): a timestamp after every dispatch of a replay gives
//! each dispatch's share of the GPU's time (its own work, its barrier and its launch), summed
//! per kernel. Every [`REPORT_EVERY`] replays the totals are logged at `info` level beside the
//! wall time of the replays and the host's time encoding them, which tells a GPU-bound graph
//! from a host-bound one. Off, it costs a branch per replay.

use std::collections::HashMap;
use std::time::Duration;

use super::pipelines::Kernel;

/// Replays per report.
const REPORT_EVERY: u32 = 100;

/// Whether the environment asks for replay profiles.
pub(crate) fn wanted() -> bool {
    std::env::var("GPUKIT_PROFILE_REPLAY").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// The query set and buffers of the profiled replays, and what they measured so far.
pub(crate) struct Profiler {
    queries: Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer, u32)>,
    period_ns: f64,
    /// Per kernel: total nanoseconds and dispatches.
    kernels: HashMap<Kernel, (f64, u64)>,
    runs: u32,
    gpu_ns: f64,
    wall: Duration,
    encode: Duration,
}

impl Profiler {
    pub(crate) fn new(period_ns: f32) -> Profiler {
        Profiler {
            queries: None,
            period_ns: f64::from(period_ns),
            kernels: HashMap::new(),
            runs: 0,
            gpu_ns: 0.0,
            wall: Duration::ZERO,
            encode: Duration::ZERO,
        }
    }

    /// A query set of at least `count` timestamps with its resolve and read-back buffers.
    pub(crate) fn queries(
        &mut self,
        device: &wgpu::Device,
        count: u32,
    ) -> Option<(wgpu::QuerySet, wgpu::Buffer, wgpu::Buffer)> {
        if self.queries.as_ref().is_none_or(|q| q.3 < count) {
            let bytes = u64::from(count) * 8;
            let set = device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("gpukit replay profile"),
                ty: wgpu::QueryType::Timestamp,
                count,
            });
            let resolve = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit replay profile resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let read = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("gpukit replay profile read"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.queries = Some((set, resolve, read, count));
        }
        let (set, resolve, read, _) = self.queries.as_ref()?;
        Some((set.clone(), resolve.clone(), read.clone()))
    }

    /// Adds one replay: `stamps[0]` before its first dispatch and `stamps[i + 1]` after
    /// `kernels[i]`.
    pub(crate) fn add(
        &mut self,
        kernels: &[Kernel],
        stamps: &[u64],
        wall: Duration,
        encode: Duration,
    ) {
        for (i, k) in kernels.iter().enumerate() {
            let (Some(a), Some(b)) = (stamps.get(i), stamps.get(i + 1)) else {
                break;
            };
            let ns = b.saturating_sub(*a) as f64 * self.period_ns;
            let e = self.kernels.entry(*k).or_default();
            e.0 += ns;
            e.1 += 1;
        }
        if let (Some(first), Some(last)) = (stamps.first(), stamps.get(kernels.len())) {
            self.gpu_ns += last.saturating_sub(*first) as f64 * self.period_ns;
        }
        self.wall += wall;
        self.encode += encode;
        self.runs += 1;
        if self.runs >= REPORT_EVERY {
            self.report();
        }
    }

    fn report(&mut self) {
        let runs = f64::from(self.runs.max(1));
        let mut rows: Vec<_> = self.kernels.drain().collect();
        rows.sort_by(|a, b| b.1 .0.total_cmp(&a.1 .0));
        let mut text = format!(
            "replay profile over {} runs: wall {:.1} us, GPU first to last dispatch {:.1} us, \
             host encoding {:.1} us a run",
            self.runs,
            self.wall.as_secs_f64() * 1e6 / runs,
            self.gpu_ns / 1e3 / runs,
            self.encode.as_secs_f64() * 1e6 / runs,
        );
        for (k, (ns, n)) in rows {
            text.push_str(&format!(
                "\n  {:>9.1} us a run  {:>5.1} x  {:>7.2} us each  {k:?}",
                ns / 1e3 / runs,
                n as f64 / runs,
                ns / 1e3 / n.max(1) as f64,
            ));
        }
        log::info!("{text}");
        self.runs = 0;
        self.gpu_ns = 0.0;
        self.wall = Duration::ZERO;
        self.encode = Duration::ZERO;
    }
}
