//! `gpukit bench`: the benchmark workloads on the chosen device, each the median of several
//! timed runs after warm-up, GPU work timed to completion (a read back or `synchronize`). On
//! wgpu devices the raw-wgpu floor runs beside gpukit in the same process, on the same adapter,
//! and the table shows the ratio. Rows come from one file per op family, under typed ids.

mod attention;
mod conv;
mod elementwise;
mod fused;
mod matmul;
mod quant;
pub(crate) mod report;
mod softmax;

use std::time::Instant;

use gpukit::{Backend, Device};
use serde::Serialize;

use crate::baseline::RawWgpu;

type CliResult = Result<(), String>;

/// A workload's id in tables and JSON (serialised as its name, `W1` ... `D3g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum Id {
    W1,
    W2,
    W3,
    W4,
    W5,
    W5b,
    W5g,
    W6,
    D1,
    D2,
    D2t,
    D2h,
    D2s,
    D2b,
    G1,
    Q1,
    Q2,
    Q3,
    C1,
    A1,
    A2,
    A3,
    A4,
    D3,
    D3b,
    D3g,
}

impl Id {
    /// The name, as tables, JSON and the peer name workloads.
    pub(crate) fn as_str(self) -> &'static str {
        use Id::*;
        match self {
            W1 => "W1",
            W2 => "W2",
            W3 => "W3",
            W4 => "W4",
            W5 => "W5",
            W5b => "W5b",
            W5g => "W5g",
            W6 => "W6",
            D1 => "D1",
            D2 => "D2",
            D2t => "D2t",
            D2h => "D2h",
            D2s => "D2s",
            D2b => "D2b",
            G1 => "G1",
            Q1 => "Q1",
            Q2 => "Q2",
            Q3 => "Q3",
            C1 => "C1",
            A1 => "A1",
            A2 => "A2",
            A3 => "A3",
            A4 => "A4",
            D3 => "D3",
            D3b => "D3b",
            D3g => "D3g",
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Row {
    pub(crate) id: Id,
    pub(crate) workload: String,
    /// gpukit's median, in `unit`; `None` when the workload cannot run yet.
    pub(crate) value: Option<f64>,
    pub(crate) unit: &'static str,
    /// The same workload on the raw floor (raw wgpu on wgpu devices, raw cudarc on CUDA), in
    /// `unit`.
    pub(crate) raw: Option<f64>,
    /// gpukit / raw for times, raw / gpukit for throughputs: above 1 means gpukit is slower.
    pub(crate) slowdown_vs_raw: Option<f64>,
    /// The same workload on the peer (`--peer`), in `unit`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peer: Option<f64>,
    pub(crate) runs: usize,
    pub(crate) note: String,
}

impl Row {
    /// A row of gpukit's figure alone (no raw floor or peer beside it).
    pub(crate) fn new(
        id: Id,
        workload: String,
        value: f64,
        unit: &'static str,
        runs: usize,
        note: impl Into<String>,
    ) -> Row {
        Row {
            id,
            workload,
            value: Some(value),
            unit,
            raw: None,
            slowdown_vs_raw: None,
            peer: None,
            runs,
            note: note.into(),
        }
    }
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs `f` `warm` times untimed, then `runs` times timed; returns seconds per run.
pub(crate) fn time(
    warm: usize,
    runs: usize,
    mut f: impl FnMut() -> gpukit::Result<()>,
) -> Result<Vec<f64>, String> {
    for _ in 0..warm {
        f().map_err(|e| e.to_string())?;
    }
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t0 = Instant::now();
        f().map_err(|e| e.to_string())?;
        out.push(t0.elapsed().as_secs_f64());
    }
    Ok(out)
}

/// Random data in [-2, 2), never zeros (the same generator as the CPU benchmark).
pub(crate) fn data(n: usize, seed: u64) -> Vec<f32> {
    gpukit::bench_cpu::data(n, seed)
}

pub(crate) struct Options {
    pub(crate) json: bool,
    pub(crate) profile: bool,
    pub(crate) quick: bool,
    pub(crate) backend: Option<Backend>,
    pub(crate) peer: Option<String>,
    /// `--only A,Q1`: run the families with a row whose id starts with one of these, and
    /// report only those rows (all when empty).
    pub(crate) only: Vec<String>,
    /// `--decode-keys N`: A3's KV length, 1 to 262,144 (4096 unless given; 512 with --quick).
    pub(crate) decode_keys: Option<usize>,
}

impl Options {
    /// Whether a row id is wanted.
    fn wants(&self, id: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|p| id.starts_with(p.as_str()))
    }

    /// Whether any of a family's row ids is wanted.
    fn wants_any(&self, ids: &[Id]) -> bool {
        ids.iter().any(|id| self.wants(id.as_str()))
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        json: false,
        profile: false,
        quick: false,
        backend: None,
        peer: None,
        only: Vec::new(),
        decode_keys: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--profile" => o.profile = true,
            "--peer" => {
                let name = it.next().ok_or("--peer needs a name (trueno)")?;
                if name != "trueno" {
                    return Err(format!("unknown peer {name:?} (known: trueno)"));
                }
                o.peer = Some(name.clone());
            }
            "--only" => {
                let ids = it.next().ok_or("--only needs row ids, as in --only A,Q1")?;
                o.only = ids
                    .split(',')
                    .filter(|x| !x.is_empty())
                    .map(str::to_string)
                    .collect();
            }
            "--decode-keys" => {
                let n = it
                    .next()
                    .ok_or("--decode-keys needs a KV length, as in --decode-keys 16384")?;
                // A bound so that the caches' host data (8 heads x N x 128 values each) stays
                // allocatable: 262,144 keys make 1 GiB a cache tensor.
                let n: usize =
                    n.parse()
                        .ok()
                        .filter(|n| (1..=1 << 18).contains(n))
                        .ok_or(format!(
                            "--decode-keys takes a count from 1 to 262144, not {n:?}"
                        ))?;
                o.decode_keys = Some(n);
            }
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                o.backend = Some(name.parse().map_err(|e: gpukit::Error| e.to_string())?);
            }
            other => return Err(format!("unknown bench option {other:?}")),
        }
    }
    Ok(o)
}

/// What every family's rows share: the device, its raw floors and the run counts.
pub(crate) struct Ctx {
    pub(crate) device: Device,
    pub(crate) raw: Option<RawWgpu>,
    #[cfg(cuda)]
    pub(crate) raw_cuda: Option<crate::baseline_cuda::RawCuda>,
    pub(crate) quick: bool,
    /// Timed runs of the round-trip workloads.
    pub(crate) runs: usize,
    /// Large sizes shrink by this with --quick (for software adapters and CI smoke runs).
    pub(crate) div: usize,
    /// A3's KV length when `--decode-keys` gives one.
    pub(crate) decode_keys: Option<usize>,
}

impl Ctx {
    /// A row of a round trip's median microseconds.
    pub(crate) fn round_trip(id: Id, workload: String, times: Vec<f64>, note: &str) -> Row {
        let runs = times.len();
        Row::new(id, workload, median(times) * 1e6, "us", runs, note)
    }
}

pub fn run(args: &[String]) -> CliResult {
    let o = parse(args)?;
    let device = match o.backend {
        Some(b) => Device::with_backend_blocking(b),
        None => Device::new_blocking(),
    }
    .map_err(|e| e.to_string())?;
    let raw = if device.info().backend.is_wgpu() {
        match RawWgpu::new(device.info().backend, &device.info().adapter) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("raw wgpu baseline unavailable: {e}");
                None
            }
        }
    } else {
        None
    };
    #[cfg(cuda)]
    let raw_cuda = match &device.info().cuda {
        Some(p) => match crate::baseline_cuda::RawCuda::new(p.ordinal) {
            Ok(r) => Some(r),
            Err(e) => {
                eprintln!("raw CUDA baseline unavailable: {e}");
                None
            }
        },
        None => None,
    };
    let profiler = o.profile.then(|| device.profiler());
    let cx = Ctx {
        device,
        raw,
        #[cfg(cuda)]
        raw_cuda,
        quick: o.quick,
        runs: if o.quick { 5 } else { 20 },
        div: if o.quick { 16 } else { 1 },
        decode_keys: o.decode_keys,
    };

    // The round trips, W1-W6, in their order.
    let w = elementwise::Inputs::new(&cx);
    let mm = matmul::RoundTrip::new(&cx);
    let mut rows = Vec::new();
    if o.peer.is_some()
        || o.wants_any(&[
            Id::W1,
            Id::W2,
            Id::W3,
            Id::W4,
            Id::W5,
            Id::W5b,
            Id::W5g,
            Id::W6,
        ])
    {
        rows = elementwise::round_trips(&cx, &w)?;
        rows.push(softmax::round_trip(&cx, &w)?);
        rows.push(mm.row(&cx)?);
        rows.extend(fused::round_trips(&cx, &w, &rows)?);
        rows.push(elementwise::latency(&cx, &w)?);
    }

    if o.peer.is_some() {
        let inputs = crate::peer::Inputs {
            a: &w.a,
            b: &w.b,
            ma: &mm.a,
            mb: &mm.b,
            mm: mm.side,
            a6: &w.a6,
            b6: &w.b6,
            runs: cx.runs,
            w6_runs: w.w6_runs,
        };
        let (peer, w1) = crate::peer::trueno(&inputs)?;
        // The peer must have computed the sum: compare with gpukit's.
        let m = w.m;
        let ours = cx
            .device
            .tensor(&w.a, &[m])
            .and_then(|x| x.add(&cx.device.tensor(&w.b, &[m])?))
            .and_then(|y| y.read_blocking())
            .map_err(|e| e.to_string())?;
        if let Some(i) = (0..m).find(|&i| (ours[i] - w1[i]).abs() > 1e-5 * ours[i].abs().max(1.0)) {
            return Err(format!(
                "trueno's W1 result differs at {i}: {} vs {}",
                w1[i], ours[i]
            ));
        }
        for (id, us) in peer {
            // trueno's W5 is its batch API: it also stands beside gpukit's batch (W5b).
            let ids: &[&str] = if id == "W5" { &["W5", "W5b"] } else { &[id] };
            for r in rows.iter_mut().filter(|r| ids.contains(&r.id.as_str())) {
                r.peer = Some(us);
            }
        }
        // The peer comparison is about the W workloads: the device-resident ones follow
        // only without --peer.
        return report::report(&o, &cx.device, &rows);
    }
    drop(w);

    if o.wants("D1") {
        rows.push(elementwise::device_add(&cx)?);
    }
    if o.wants_any(&[Id::D2, Id::D2t, Id::D2h, Id::D2s, Id::D2b]) {
        rows.extend(matmul::device_resident(&cx)?);
    }
    if o.wants("G1") {
        rows.push(matmul::gemv(&cx)?);
    }
    if o.wants_any(&[Id::Q1, Id::Q2, Id::Q3]) {
        rows.extend(quant::rows(&cx)?);
    }
    if o.wants("C1") {
        rows.push(conv::row(&cx)?);
    }
    if o.wants_any(&[Id::A1, Id::A2, Id::A3, Id::A4]) {
        rows.extend(attention::rows(&cx)?);
    }
    if o.wants("D3") {
        rows.push(elementwise::chain(&cx)?);
    }
    if o.wants_any(&[Id::D3b, Id::D3g]) {
        rows.extend(fused::chain(&cx)?);
    }
    rows.retain(|r| o.wants(r.id.as_str()));

    if let Some(p) = &profiler {
        if o.json {
            let summary = p.summary().map_err(|e| e.to_string())?;
            eprintln!(
                "{}",
                serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
            );
        }
    }
    report::report(&o, &cx.device, &rows)?;
    if let (Some(p), false) = (&profiler, o.json) {
        println!(
            "\nper-op profile of the whole run ({}):",
            cx.device.info().backend
        );
        print!("{}", p.report().map_err(|e| e.to_string())?);
    }
    Ok(())
}
