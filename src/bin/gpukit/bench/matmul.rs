//! Matrix product rows: W4 (a 1024 x 1024 round trip), D2 (device-resident products at 1024
//! and 4096 in every precision the backend has, beside cuBLAS on CUDA) and G1 (one token through
//! an f32 linear layer, a GEMV).

use gpukit::{Backend, DType, Device, MatmulOptions, Precision, Tensor};

use super::{data, median, time, Ctx, Id, Row};

/// GEMVs per synchronize in G1 and Q1: each takes microseconds, so one submit and wait (about
/// 80 us on an H100) would otherwise be a large part of the figure.
pub(crate) const GEMV_REPS: usize = 100;

/// Seconds per GEMV: the median of `runs` timed rounds (after 2 untimed) of GEMV_REPS calls
/// of `gemv(i)` and one synchronize.
pub(crate) fn per_gemv(
    device: &Device,
    runs: usize,
    mut gemv: impl FnMut(usize) -> gpukit::Result<Tensor>,
) -> Result<f64, String> {
    let t = time(2, runs, || {
        for i in 0..GEMV_REPS {
            drop(gemv(i)?);
        }
        device.synchronize_blocking()
    })?;
    Ok(median(t) / GEMV_REPS as f64)
}

/// W4's inputs, shared with the peer.
pub(crate) struct RoundTrip {
    pub(crate) side: usize,
    pub(crate) a: Vec<f32>,
    pub(crate) b: Vec<f32>,
}

impl RoundTrip {
    pub(crate) fn new(cx: &Ctx) -> RoundTrip {
        let side = 1024 / if cx.quick { 4 } else { 1 };
        RoundTrip {
            side,
            a: data(side * side, 8),
            b: data(side * side, 9),
        }
    }

    /// W4: upload two matrices, multiply, read.
    pub(crate) fn row(&self, cx: &Ctx) -> Result<Row, String> {
        let (device, mm) = (&cx.device, self.side);
        let t = time(2, cx.runs, || {
            let x = device.tensor(&self.a, &[mm, mm])?;
            let y = device.tensor(&self.b, &[mm, mm])?;
            x.matmul(&y)?.read_blocking().map(drop)
        })?;
        let mut w4 = Ctx::round_trip(Id::W4, format!("matmul {mm}x{mm} round trip"), t, "");
        w4.note = format!(
            "{:.3} TFLOP/s including transfers",
            2.0 * (mm as f64).powi(3) / (w4.value.unwrap_or(f64::NAN) * 1e-6) / 1e12
        );
        Ok(w4)
    }
}

/// D2, D2t, D2h, D2b: products of device-resident square matrices.
pub(crate) fn device_resident(cx: &Ctx) -> Result<Vec<Row>, String> {
    let device = &cx.device;
    let mut rows = Vec::new();
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
        let size = size / if cx.quick { 8 } else { 1 };
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
                        Id::D2t
                    } else {
                        Id::D2b
                    },
                    if precision == Precision::Tf32 {
                        "tf32-precision matmul"
                    } else {
                        "bf16-precision matmul"
                    },
                    format!("{:.2}x the f32 figure; cuBLAS tensor cores", tflops / f),
                ),
                (Precision::F16, Some(f)) => (
                    Id::D2h,
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
                    Id::D2,
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
            if let (Some(r), Precision::F32) = (&cx.raw_cuda, precision) {
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
        // D2s: f16 tensors (half the memory), f16 x f16 -> f16 with f32 accumulation.
        let (x16, y16) = (
            x.cast(DType::F16).map_err(|e| e.to_string())?,
            y.cast(DType::F16).map_err(|e| e.to_string())?,
        );
        let t = time(1, 5, || {
            for _ in 0..reps {
                drop(x16.matmul(&y16)?);
            }
            device.synchronize_blocking()
        })?;
        let flops = 2.0 * (size as f64).powi(3);
        let tflops = flops / (median(t.clone()) / reps as f64) / 1e12;
        rows.push(Row {
            id: Id::D2s,
            workload: format!("f16-storage matmul {size}x{size} device-resident"),
            value: Some(tflops),
            unit: "TFLOP/s",
            raw: None,
            slowdown_vs_raw: None,
            peer: None,
            runs: t.len(),
            note: if device.info().backend == Backend::Cuda {
                "f16 tensors x f16 tensors -> f16 (cuBLAS, f32 accumulation)".into()
            } else if device.info().features.cooperative_matrix {
                "f16 tensors on cooperative matrices, f16 out (f32 accumulation)".into()
            } else {
                "f16 tensors converted to f32 around the product on this backend".into()
            },
        });
    }

    Ok(rows)
}

/// G1: one token through an f32 linear layer.
pub(crate) fn gemv(cx: &Ctx) -> Result<Row, String> {
    let device = &cx.device;
    // G1: one token through an f32 linear layer [4096, 4096] (1024 with --quick). Two weights
    // in turn (128 MiB): more than a GPU's L2 holds, as a model's layers would be.
    let gn = if cx.quick { 1024 } else { 4096 };
    let gw = [19, 21]
        .into_iter()
        .map(|seed| device.tensor(&data(gn * gn, seed), &[gn, gn]))
        .collect::<gpukit::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let gx = device
        .tensor(&data(gn, 20), &[1, gn])
        .map_err(|e| e.to_string())?;
    let per = per_gemv(device, cx.runs, |i| {
        gx.linear(&gw[i % gw.len()], None, None)
    })?;
    Ok(Row::new(
        Id::G1,
        format!("f32 GEMV, one token through a linear [{gn}, {gn}]"),
        per * 1e6,
        "us",
        cx.runs,
        format!("{:.0} GB/s of weights", (gn * gn * 4) as f64 / per / 1e9),
    ))
}
