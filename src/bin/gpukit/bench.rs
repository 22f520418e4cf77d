//! `gpukit bench`: the workloads of PERFORMANCE.md on the chosen device, each the median of
//! several timed runs after warm-up, GPU work timed to completion (a read back or
//! `synchronize`). On wgpu devices the raw-wgpu floor runs beside gpukit in the same process,
//! on the same adapter, and the table shows the ratio.

use std::time::Instant;

use gpukit::{Backend, Device, MatmulOptions, Precision, Tensor};
use serde::Serialize;

use crate::baseline::RawWgpu;

type CliResult = Result<(), String>;

#[derive(Serialize)]
pub(crate) struct Row {
    pub(crate) id: &'static str,
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
        id: &'static str,
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
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        json: false,
        profile: false,
        quick: false,
        backend: None,
        peer: None,
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
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                o.backend = Some(name.parse().map_err(|e: gpukit::Error| e.to_string())?);
            }
            other => return Err(format!("unknown bench option {other:?}")),
        }
    }
    Ok(o)
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
    // Large sizes shrink 16x with --quick (for software adapters and CI smoke runs).
    let div = if o.quick { 16 } else { 1 };
    let runs = if o.quick { 5 } else { 20 };
    let m = (1 << 20) / div;
    let mut rows = Vec::new();
    let round_trip = |id, workload: String, times: Vec<f64>, note: &str| {
        let runs = times.len();
        Row::new(id, workload, median(times) * 1e6, "us", runs, note)
    };

    let (a, b) = (data(m, 1), data(m, 2));
    let t = time(2, runs, || {
        let x = device.tensor(&a, &[m])?;
        let y = device.tensor(&b, &[m])?;
        x.add(&y)?.read_blocking().map(drop)
    })?;
    rows.push(round_trip("W1", format!("vec_add {m} round trip"), t, ""));

    let t = time(2, runs, || {
        device.tensor(&a, &[m])?.relu()?.read_blocking().map(drop)
    })?;
    rows.push(round_trip("W2", format!("relu {m} round trip"), t, ""));

    let t = time(2, runs, || {
        device
            .tensor(&a, &[m])?
            .softmax()?
            .read_blocking()
            .map(drop)
    })?;
    rows.push(round_trip(
        "W3",
        format!("softmax of one {m}-element row, round trip"),
        t,
        "",
    ));

    let mm = 1024 / if o.quick { 4 } else { 1 };
    let (ma, mb) = (data(mm * mm, 8), data(mm * mm, 9));
    let t = time(2, runs, || {
        let x = device.tensor(&ma, &[mm, mm])?;
        let y = device.tensor(&mb, &[mm, mm])?;
        x.matmul(&y)?.read_blocking().map(drop)
    })?;
    let mut w4 = round_trip("W4", format!("matmul {mm}x{mm} round trip"), t, "");
    w4.note = format!(
        "{:.3} TFLOP/s including transfers",
        2.0 * (mm as f64).powi(3) / (w4.value.unwrap_or(f64::NAN) * 1e-6) / 1e12
    );
    rows.push(w4);

    let t = time(2, runs, || {
        let x = device.tensor(&a, &[m])?;
        let y = x.relu()?.scale(2.0)?;
        y.add(&y)?.sigmoid()?.read_blocking().map(drop)
    })?;
    rows.push(round_trip(
        "W5",
        format!("upload {m}, relu, scale, add, sigmoid, read"),
        t,
        "ops recorded into one pass, one submit",
    ));

    // W5 through the batch API: the chain becomes one fused kernel; then the same batch
    // compiled and replayed with new data each run. The target compares with W2 (upload, one
    // op, read back).
    let w2 = rows.iter().find(|r| r.id == "W2").and_then(|r| r.value);
    let vs_w2 = |v: Option<f64>| match (v, w2) {
        (Some(v), Some(w)) => format!("{:.2}x W2 (upload + one op + read)", v / w),
        _ => String::new(),
    };
    let w5_batch =
        |device: &Device| -> gpukit::Result<(gpukit::Batch, gpukit::Value, gpukit::Value)> {
            let mut b = device.batch();
            let x = b.upload(&a, &[m])?;
            let y = b.relu(x)?;
            let y = b.scale(y, 2.0)?;
            let y = b.add(y, y)?;
            let y = b.sigmoid(y)?;
            b.output(y)?;
            Ok((b, x, y))
        };
    let t = time(2, runs, || {
        let (w5b, _, _) = w5_batch(&device)?;
        w5b.run_blocking().map(drop)
    })?;
    let mut row = round_trip("W5b", format!("W5 as one batch ({m})"), t, "");
    row.note = format!("one fused kernel, one submit; {}", vs_w2(row.value));
    rows.push(row);
    let (w5b, x5, _) = w5_batch(&device).map_err(|e| e.to_string())?;
    let mut graph = w5b.compile().map_err(|e| e.to_string())?;
    let t = time(2, runs, || graph.run_blocking(&[(x5, &a[..])]).map(drop))?;
    let mut row = round_trip(
        "W5g",
        format!("W5 as a compiled graph, new data each run ({m})"),
        t,
        "",
    );
    row.note = format!("replay: write input, dispatch, read; {}", vs_w2(row.value));
    rows.push(row);
    drop(graph);

    let (a6, b6) = (data(1024, 3), data(1024, 4));
    let w6_runs = if o.quick { 50 } else { 500 };
    let t = time(20, w6_runs, || {
        let x = device.tensor(&a6, &[1024])?;
        let y = device.tensor(&b6, &[1024])?;
        x.add(&y)?.read_blocking().map(drop)
    })?;
    let mut w6 = round_trip("W6", "vec_add 1024 round trip (latency)".into(), t, "");
    if let Some(r) = &raw {
        let raw_t = median(r.w6(&a6, &b6, w6_runs)?) * 1e6;
        w6.raw = Some(raw_t);
        w6.slowdown_vs_raw = w6.value.map(|v| v / raw_t);
    }
    #[cfg(cuda)]
    if let Some(r) = &raw_cuda {
        let raw_t = median(r.w6(&a6, &b6, w6_runs)?) * 1e6;
        w6.raw = Some(raw_t);
        w6.slowdown_vs_raw = w6.value.map(|v| v / raw_t);
    }
    rows.push(w6);

    if o.peer.is_some() {
        let inputs = crate::peer::Inputs {
            a: &a,
            b: &b,
            ma: &ma,
            mb: &mb,
            mm,
            a6: &a6,
            b6: &b6,
            runs,
            w6_runs,
        };
        let (peer, w1) = crate::peer::trueno(&inputs)?;
        // The peer must have computed the sum: compare with gpukit's.
        let ours = device
            .tensor(&a, &[m])
            .and_then(|x| x.add(&device.tensor(&b, &[m])?))
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
            for r in rows.iter_mut().filter(|r| ids.contains(&r.id)) {
                r.peer = Some(us);
            }
        }
        // The peer comparison is about the W workloads: the device-resident ones follow
        // only without --peer.
        return crate::bench_report::report(&o, &device, &rows);
    }

    let n1 = (64 << 20) / div;
    let reps = 10;
    let (h1, g1) = (data(n1, 5), data(n1, 6));
    let (x1, y1) = (
        device.tensor(&h1, &[n1]).map_err(|e| e.to_string())?,
        device.tensor(&g1, &[n1]).map_err(|e| e.to_string())?,
    );
    let t = time(1, 5, || {
        for _ in 0..reps {
            drop(x1.add(&y1)?);
        }
        device.synchronize_blocking()
    })?;
    let gbs = |secs: f64| 12.0 * n1 as f64 / (secs / reps as f64) / 1e9;
    let mut d1 = Row::new(
        "D1",
        format!("add on device-resident {n1}-element tensors"),
        gbs(median(t.clone())),
        "GB/s",
        t.len(),
        format!("{reps} adds then synchronize; bytes read + written"),
    );
    if let Some(r) = &raw {
        match r.d1(n1, reps, 5) {
            Ok(rt) => {
                let raw_gbs = 12.0 * n1 as f64 / median(rt) / 1e9;
                d1.raw = Some(raw_gbs);
                d1.slowdown_vs_raw = d1.value.map(|v| raw_gbs / v);
            }
            Err(e) => d1.note = format!("{}; raw baseline: {e}", d1.note),
        }
    }
    #[cfg(cuda)]
    if let Some(r) = &raw_cuda {
        let raw_gbs = 12.0 * n1 as f64 / median(r.d1(&h1, &g1, reps, 5)?) / 1e9;
        d1.raw = Some(raw_gbs);
        d1.slowdown_vs_raw = d1.value.map(|v| raw_gbs / v);
    }
    if let Some(p) = &device.info().cuda {
        d1.note = format!(
            "{}; {:.0}% of the {:.0} GB/s theoretical peak",
            d1.note,
            100.0 * d1.value.unwrap_or(0.0) * 1e9 / p.peak_bandwidth(),
            p.peak_bandwidth() / 1e9
        );
    }
    rows.push(d1);
    drop((h1, g1));
    drop((x1, y1));

    // CUDA adds its tensor-core precisions.
    let precisions: &[Precision] = if device.info().backend == Backend::Cuda {
        &[
            Precision::F32,
            Precision::Tf32,
            Precision::F16,
            Precision::Bf16,
        ]
    } else {
        &[Precision::F32, Precision::F16]
    };
    for size in [1024usize, 4096] {
        let size = size / if o.quick { 8 } else { 1 };
        let (hx, hy) = (data(size * size, 10), data(size * size, 11));
        let x = device
            .tensor(&hx, &[size, size])
            .map_err(|e| e.to_string())?;
        let y = device
            .tensor(&hy, &[size, size])
            .map_err(|e| e.to_string())?;
        let reps = if size >= 4096 { 3 } else { 10 };
        let mut f32_tflops = None;
        for &precision in precisions {
            let options = MatmulOptions {
                precision,
                ..MatmulOptions::default()
            };
            // The first call tunes the size class (outside the timing).
            let t = time(1, 5, || {
                for _ in 0..reps {
                    drop(x.matmul_with(&y, options)?);
                }
                device.synchronize_blocking()
            })?;
            let flops = 2.0 * (size as f64).powi(3);
            let tflops = flops / (median(t.clone()) / reps as f64) / 1e12;
            let tile = device
                .tune_matmul_blocking(size, size, size, precision)
                .map_err(|e| e.to_string())?
                .map_or_else(
                    || ["-", "cuBLAS"][usize::from(device.info().backend == Backend::Cuda)].into(),
                    |r| r.best.to_string(),
                );
            let (id, what, note) = match (precision, f32_tflops) {
                (Precision::Tf32 | Precision::Bf16, Some(f)) => (
                    if precision == Precision::Tf32 {
                        "D2t"
                    } else {
                        "D2b"
                    },
                    if precision == Precision::Tf32 {
                        "tf32-precision matmul"
                    } else {
                        "bf16-precision matmul"
                    },
                    format!("{:.2}x the f32 figure; cuBLAS tensor cores", tflops / f),
                ),
                (Precision::F16, Some(f)) => (
                    "D2h",
                    "f16-precision matmul",
                    format!(
                        "{:.2}x the f32 figure; {}; tile {tile}",
                        tflops / f,
                        if device.info().features.cooperative_matrix {
                            "cooperative matrices"
                        } else if device.info().features.shader_f16 {
                            "shader-f16"
                        } else {
                            "no shader-f16: f32 arithmetic on rounded inputs"
                        }
                    ),
                ),
                _ => (
                    "D2",
                    "matmul",
                    format!("{reps} matmuls then synchronize; tile {tile}"),
                ),
            };
            if precision == Precision::F32 {
                f32_tflops = Some(tflops);
            }
            #[allow(unused_mut)]
            let mut raw_tflops = None;
            #[cfg(cuda)]
            if let (Some(r), Precision::F32) = (&raw_cuda, precision) {
                raw_tflops = Some(flops / median(r.sgemm(&hx, &hy, size, reps, 5)?) / 1e12);
            }
            rows.push(Row {
                id,
                workload: format!("{what} {size}x{size} device-resident"),
                value: Some(tflops),
                unit: "TFLOP/s",
                raw: raw_tflops,
                slowdown_vs_raw: raw_tflops.map(|r| r / tflops),
                peer: None,
                runs: t.len(),
                note,
            });
        }
    }

    rows.extend(crate::bench_gemv::rows(&device, o.quick, runs)?);

    // conv2d: a ResNet-style 3x3 layer, 64 -> 64 channels on 56 x 56, batch 8 (1/8 the pixels
    // with --quick).
    let (cn, side) = if o.quick { (1, 28) } else { (8, 56) };
    let cx = device
        .tensor(&data(cn * 64 * side * side, 15), &[cn, 64, side, side])
        .map_err(|e| e.to_string())?;
    let cw = device
        .tensor(&data(64 * 64 * 9, 16), &[64, 64, 3, 3])
        .map_err(|e| e.to_string())?;
    let copts = gpukit::Conv2dOptions {
        padding: [1, 1],
        ..Default::default()
    };
    let t = time(1, 5, || {
        drop(cx.conv2d(&cw, None, copts)?);
        device.synchronize_blocking()
    })?;
    let flops = 2.0 * (cn * 64 * side * side * 64 * 9) as f64;
    rows.push(Row::new(
        "C1",
        format!("conv2d 3x3, [{cn}, 64, {side}, {side}] -> 64 channels"),
        flops / median(t.clone()) / 1e12,
        "TFLOP/s",
        t.len(),
        "implicit GEMM, device-resident",
    ));

    // A1: the shape (16 heads of 64) at three lengths; A2: LLaMA-7B's heads (32 of 128).
    let shapes = [
        ("A1", 16, 64, 1024usize),
        ("A1", 16, 64, 2048),
        ("A1", 16, 64, 4096),
        ("A2", 32, 128, 2048),
    ];
    for (id, heads, hd, seq) in shapes {
        let seq = seq / if o.quick { 32 } else { 1 };
        let len = heads * seq * hd;
        let q = device
            .tensor(&data(len, 12), &[1, heads, seq, hd])
            .map_err(|e| e.to_string())?;
        let k = device
            .tensor(&data(len, 13), &[1, heads, seq, hd])
            .map_err(|e| e.to_string())?;
        let v = device
            .tensor(&data(len, 14), &[1, heads, seq, hd])
            .map_err(|e| e.to_string())?;
        let options = gpukit::AttentionOptions {
            causal: true,
            ..Default::default()
        };
        device.synchronize_blocking().map_err(|e| e.to_string())?;
        device.reset_peak_memory();
        let before = device.memory_stats().live_bytes;
        let t = time(1, 5, || {
            drop(q.attention(&k, &v, options)?);
            device.synchronize_blocking()
        })?;
        let peak = device.memory_stats().peak_live_bytes.saturating_sub(before);
        rows.push(Row::new(
            id,
            format!("causal attention, {heads} heads x {seq} x {hd}, batch 1"),
            median(t.clone()) * 1e6,
            "us",
            t.len(),
            format!(
                "peak extra memory {:.1} MiB (inputs {:.1} MiB; a stored score matrix would be {:.0} MiB)",
                peak as f64 / 1048576.0,
                3.0 * len as f64 * 4.0 / 1048576.0,
                (heads * seq * seq * 4) as f64 / 1048576.0
            ),
        ));
    }

    let x3 = device
        .tensor(&data(4096, 7), &[4096])
        .map_err(|e| e.to_string())?;
    let bias = device.scalar(0.5).map_err(|e| e.to_string())?;
    let t = time(3, runs, || {
        let mut t: Tensor = x3.clone();
        for i in 0..100 {
            t = match i % 4 {
                0 => t.relu()?,
                1 => t.scale(0.5)?,
                2 => t.add(&bias)?,
                _ => t.tanh()?,
            };
        }
        t.read_blocking().map(drop)
    })?;
    rows.push(Row::new(
        "D3",
        "100 chained elementwise ops on 4096 elements, one read".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "total time including the one read back, divided by 100",
    ));

    // D3 recorded as a batch (fused into one kernel) and as a replayed graph.
    let x3h = data(4096, 7);
    let d3_batch = || -> gpukit::Result<(gpukit::Batch, gpukit::Value)> {
        let mut b = device.batch();
        let x = b.upload(&x3h, &[4096])?;
        let c = b.upload(&[0.5], &[])?;
        let mut t = x;
        for i in 0..100 {
            t = match i % 4 {
                0 => b.relu(t)?,
                1 => b.scale(t, 0.5)?,
                2 => b.add(t, c)?,
                _ => b.tanh(t)?,
            };
        }
        b.output(t)?;
        Ok((b, x))
    };
    let t = time(3, runs, || {
        let (b, _) = d3_batch()?;
        b.run_blocking().map(drop)
    })?;
    rows.push(Row::new(
        "D3b",
        "D3 as one batch (fused), one read".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "recording, planning, one fused kernel and the read back, divided by 100",
    ));
    let (b, x3v) = d3_batch().map_err(|e| e.to_string())?;
    let mut graph = b.compile().map_err(|e| e.to_string())?;
    let t = time(3, runs, || graph.run_blocking(&[(x3v, &x3h[..])]).map(drop))?;
    rows.push(Row::new(
        "D3g",
        "D3 as a compiled graph, new data each run".into(),
        median(t.clone()) * 1e6 / 100.0,
        "us/op",
        t.len(),
        "input write, replay and the read back, divided by 100",
    ));
    drop(graph);

    if let Some(p) = &profiler {
        if o.json {
            let summary = p.summary().map_err(|e| e.to_string())?;
            eprintln!(
                "{}",
                serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?
            );
        }
    }
    crate::bench_report::report(&o, &device, &rows)?;
    if let (Some(p), false) = (&profiler, o.json) {
        println!(
            "\nper-op profile of the whole run ({}):",
            device.info().backend
        );
        print!("{}", p.report().map_err(|e| e.to_string())?);
    }
    Ok(())
}
