//! Quantized weights: matmul_quant, dequantize and row gathers.

use super::*;

/// Quantized matmul (Q8_0, Q4_0, Q4_1) against dequantise-then-multiply in f64, GEMV and
/// several rows, k up to 4096; dequantize(); bad inputs.
pub async fn quantized(dev: &Device) {
    use gpukit::QuantFormat;
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        for (ci, (m, n, k)) in [
            (1usize, 7usize, 32usize),
            (3, 65, 96),
            (1, 33, 4096),
            (5, 1, 64),
            // 37 blocks: rows of words that are not a multiple of the 32 lanes.
            (2, 9, 1184),
            // 130 blocks: CUDA's GEMV takes 128 a round.
            (2, 3, 4160),
            // Rows of x longer than CUDA's GEMV stages in shared memory (12288 values).
            (2, 5, 12320),
            // Many rows of one quant block and of 37 (CUDA's GEMV: one warp a row, two).
            (1, 8500, 32),
            (1, 4300, 1184),
            // More rows than a GEMV takes (wgpu and CUDA dequantise, then multiply).
            (9, 7, 32),
            (37, 65, 160),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = 9600 + fi as u64 * 10 + ci as u64;
            let mut rng = Rng::new(seed);
            let w = rng.vec(n * k, -1.0, 1.0);
            let x = rng.vec(m * k, -1.0, 1.0);
            let bytes = oracle::quantize(&w, format);
            let wq = dev.quantized(&bytes, format, n, k).unwrap();
            assert_eq!(wq.shape(), [n, k]);
            let deq = oracle::dequantize(&bytes, format);
            let got = dev.tensor(&x, &[m, k]).unwrap().matmul_quant(&wq).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let got = got.read().await.unwrap();
            let deq32: Vec<f32> = deq.iter().map(|&v| v as f32).collect();
            let want = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
            check(
                &format!("{format:?} matmul_quant [{m}, {k}] x [{n}, {k}]^T seed {seed}"),
                &|i| format!("{i}"),
                &got,
                &want,
            );
            let d = wq.dequantize().unwrap();
            assert_eq!(d.shape(), &[n, k]);
            let tol = Tol {
                atol: 1e-7,
                rtol: 1e-6,
            };
            let want: Vec<(f64, Tol)> = deq.iter().map(|&v| (v, tol)).collect();
            check(
                &format!("{format:?} dequantize [{n}, {k}]"),
                &|i| format!("{i}"),
                &d.read().await.unwrap(),
                &want,
            );
        }
    }
    // NaN and infinities in x reach the outputs of their rows as in the f64 reference.
    for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
        let (m, n, k) = (3usize, 5usize, 64usize);
        let mut rng = Rng::new(9700);
        let w = rng.vec(n * k, -1.0, 1.0);
        let mut x = rng.vec(m * k, -1.0, 1.0);
        x[3] = f32::NAN;
        x[k + 40] = f32::INFINITY;
        x[2 * k + 7] = f32::NEG_INFINITY;
        let bytes = oracle::quantize(&w, format);
        let wq = dev.quantized(&bytes, format, n, k).unwrap();
        let deq32 = dequantized_f32(&bytes, format);
        let got = dev.tensor(&x, &[m, k]).unwrap().matmul_quant(&wq).unwrap();
        let want = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
        assert!(want.iter().all(|(v, _)| !v.is_finite()));
        check(
            &format!("{format:?} matmul_quant with NaN and infinities"),
            &|i| format!("{i}"),
            &got.read().await.unwrap(),
            &want,
        );
    }
    let bytes = oracle::quantize(&[0.5; 64], QuantFormat::Q8_0);
    assert!(matches!(
        dev.quantized(&bytes, QuantFormat::Q8_0, 1, 48).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        dev.quantized(&bytes[1..], QuantFormat::Q8_0, 2, 32)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let wq = dev.quantized(&bytes, QuantFormat::Q8_0, 2, 32).unwrap();
    assert!(matches!(
        dev.tensor(&[1.0; 31], &[31])
            .unwrap()
            .matmul_quant(&wq)
            .unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// Rows of `x` (of `nw.len()` values) RMS-normalised in f64 with weight `nw`, rounded to f32:
/// what the fused norm's product reads.
pub(super) fn rms_normed(x: &[f32], nw: &[f32], eps: f64) -> Vec<f32> {
    let k = nw.len();
    x.chunks(k)
        .flat_map(|row| {
            let ms = row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / k as f64;
            let s = 1.0 / (ms + eps).sqrt();
            row.iter()
                .zip(nw)
                .map(move |(&v, &w)| (v as f64 * s * w as f64) as f32)
        })
        .collect()
}

/// silu(gate) * up of each row of `x2` (`k` gate values, then `k` up values) in f64, rounded
/// to f32: what a SwiGLU product reads.
pub(super) fn swiglu_f64(x2: &[f32], k: usize) -> Vec<f32> {
    x2.chunks(2 * k)
        .flat_map(|row| {
            let (gate, up) = row.split_at(k);
            gate.iter().zip(up).map(|(&g, &u)| {
                let (g, u) = (g as f64, u as f64);
                (g / (1.0 + (-g).exp()) * u) as f32
            })
        })
        .collect()
}

/// GGUF blocks dequantised in f64, rounded to f32 (the weights the kernels multiply by).
pub(super) fn dequantized_f32(bytes: &[u8], format: gpukit::QuantFormat) -> Vec<f32> {
    oracle::dequantize(bytes, format)
        .iter()
        .map(|&v| v as f32)
        .collect()
}

/// `residual + rms_norm(x) x w^T` in one kernel (matmul_quant_add, matmul_quant_with), every
/// format, GEMV and prompt row counts, against the f64 norm and product plus the residual;
/// SwiGLU inputs; NaN and infinities in the residual; an f16 residual; a residual or norm
/// weight of the wrong shape, a bad eps, or SwiGLU with a norm, is refused.
pub async fn quantized_residual(dev: &Device) {
    // The f64 product plus the residual (if any), with room for the add's rounding.
    fn plus_residual(product: &[(f64, Tol)], r: Option<&[f32]>) -> Vec<(f64, Tol)> {
        let tol = |t: Tol| Tol {
            atol: t.atol + 1e-5,
            rtol: t.rtol + 1e-5,
        };
        let r = |i: usize| r.map_or(0.0, |r| r[i] as f64);
        product
            .iter()
            .enumerate()
            .map(|(i, &(v, t))| (v + r(i), tol(t)))
            .collect()
    }
    use gpukit::QuantFormat;
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        for (ci, (m, n, k)) in [
            (1usize, 7usize, 32usize),
            (1, 577, 1184),
            (2, 9, 4160),
            (4, 4100, 64),
            (37, 65, 160),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = 9800 + fi as u64 * 10 + ci as u64;
            let mut rng = Rng::new(seed);
            let w = rng.vec(n * k, -1.0, 1.0);
            let x = rng.vec(m * k, -1.0, 1.0);
            let mut r = rng.vec(m * n, -2.0, 2.0);
            r[0] = f32::NAN;
            if m * n > 2 {
                r[m * n - 1] = f32::INFINITY;
                r[m * n / 2] = f32::NEG_INFINITY;
            }
            let bytes = oracle::quantize(&w, format);
            let wq = dev.quantized(&bytes, format, n, k).unwrap();
            let deq32 = dequantized_f32(&bytes, format);
            let residual = dev.tensor(&r, &[m, n]).unwrap();
            let got = dev
                .tensor(&x, &[m, k])
                .unwrap()
                .matmul_quant_add(&wq, &residual)
                .unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let product = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
            let want = plus_residual(&product, Some(&r));
            let ctx = format!("{format:?} matmul_quant_add [{m}, {k}] x [{n}, {k}]^T seed {seed}");
            check(&ctx, &|i| format!("{i}"), &got.read().await.unwrap(), &want);
            // An f16 residual is converted: the same sums as its f32 rounding.
            let r16 = residual.cast(gpukit::DType::F16).unwrap();
            let r_back = r16.cast(gpukit::DType::F32).unwrap().read().await.unwrap();
            let got = dev
                .tensor(&x, &[m, k])
                .unwrap()
                .matmul_quant_add(&wq, &r16)
                .unwrap();
            let want = plus_residual(&product, Some(&r_back));
            check(
                &format!("{ctx}, f16 residual"),
                &|i| format!("{i}"),
                &got.read().await.unwrap(),
                &want,
            );
            // RMS-normalised rows first (eps 1e-5, a weight per column), with and without the
            // residual: against the f64 norm, rounded to f32, through the same product.
            let nw = rng.vec(k, 0.5, 1.5);
            let xn = rms_normed(&x, &nw, 1e-5);
            let norm = dev.tensor(&nw, &[k]).unwrap();
            let product = oracle::matmul_with(&xn, &deq32, (m, k, n), (false, true), None, None);
            for with_residual in [false, true] {
                let options = gpukit::QuantMatmulOptions {
                    rms_norm: Some((&norm, 1e-5)),
                    residual: with_residual.then_some(&residual),
                    swiglu: false,
                    rope: None,
                    ..Default::default()
                };
                let got = dev
                    .tensor(&x, &[m, k])
                    .unwrap()
                    .matmul_quant_with(&wq, options)
                    .unwrap();
                let want = plus_residual(&product, with_residual.then_some(&r[..]));
                let ctx = format!("{ctx}, rms-normalised x, residual {with_residual}");
                check(&ctx, &|i| format!("{i}"), &got.read().await.unwrap(), &want);
            }
            // SwiGLU halves: x2 is [m, 2k] (gate, up); the product reads silu(gate) * up.
            let x2 = rng.vec(m * 2 * k, -3.0, 3.0);
            let gated = swiglu_f64(&x2, k);
            let product = oracle::matmul_with(&gated, &deq32, (m, k, n), (false, true), None, None);
            let options = gpukit::QuantMatmulOptions {
                swiglu: true,
                residual: Some(&residual),
                ..Default::default()
            };
            let got = dev
                .tensor(&x2, &[m, 2 * k])
                .unwrap()
                .matmul_quant_with(&wq, options)
                .unwrap();
            let want = plus_residual(&product, Some(&r));
            check(
                &format!("{ctx}, swiglu x"),
                &|i| format!("{i}"),
                &got.read().await.unwrap(),
                &want,
            );
        }
    }
    let bytes = oracle::quantize(&[0.5; 64], QuantFormat::Q8_0);
    let wq = dev.quantized(&bytes, QuantFormat::Q8_0, 2, 32).unwrap();
    let x = dev.tensor(&[1.0; 32], &[1, 32]).unwrap();
    for bad in [&[2usize][..], &[1, 3], &[2, 2]] {
        let r = dev.tensor(&vec![0.0; bad.iter().product()], bad).unwrap();
        let e = x.matmul_quant_add(&wq, &r);
        assert!(
            matches!(e, Err(Error::ShapeMismatch { .. })),
            "residual {bad:?}: {e:?}"
        );
    }
    let short = dev.tensor(&[1.0; 31], &[31]).unwrap();
    let options = gpukit::QuantMatmulOptions {
        rms_norm: Some((&short, 1e-5)),
        ..Default::default()
    };
    let e = x.matmul_quant_with(&wq, options);
    assert!(
        matches!(e, Err(Error::ShapeMismatch { .. })),
        "norm weight of 31: {e:?}"
    );
    let ones = dev.tensor(&[1.0; 32], &[32]).unwrap();
    for eps in [f32::NAN, -1.0, f32::INFINITY] {
        let options = gpukit::QuantMatmulOptions {
            rms_norm: Some((&ones, eps)),
            ..Default::default()
        };
        let e = x.matmul_quant_with(&wq, options);
        assert!(
            matches!(e, Err(Error::InvalidArgument { .. })),
            "eps {eps}: {e:?}"
        );
    }
    // SwiGLU takes 2 * cols values a row, and not with a norm.
    let swiglu = gpukit::QuantMatmulOptions {
        swiglu: true,
        ..Default::default()
    };
    let e = x.matmul_quant_with(&wq, swiglu);
    assert!(
        matches!(e, Err(Error::ShapeMismatch { .. })),
        "swiglu of 32: {e:?}"
    );
    let x64 = dev.tensor(&[1.0; 64], &[1, 64]).unwrap();
    assert_eq!(x64.matmul_quant_with(&wq, swiglu).unwrap().shape(), &[1, 2]);
    let both = gpukit::QuantMatmulOptions {
        rms_norm: Some((&ones, 1e-5)),
        ..swiglu
    };
    let e = x64.matmul_quant_with(&wq, both);
    assert!(
        matches!(e, Err(Error::InvalidArgument { .. })),
        "swiglu with a norm: {e:?}"
    );
}

/// The f64 rotation of the product's rows of `dim` values by table row, the tolerance
/// carried through it (each output mixes two sums).
pub(super) fn rotate(
    p: &[(f64, Tol)],
    (cos, sin): (&[f32], &[f32]),
    dim: usize,
    layout: gpukit::RopeLayout,
) -> Vec<(f64, Tol)> {
    let mut out = p.to_vec();
    for (row, chunk) in p.chunks(dim).enumerate() {
        for j in 0..dim / 2 {
            let (i0, i1) = match layout {
                gpukit::RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                gpukit::RopeLayout::HalfSplit => (j, j + dim / 2),
            };
            let t = row * dim / 2 + j;
            let (c, s) = (cos[t] as f64, sin[t] as f64);
            let ((x0, t0), (x1, t1)) = (chunk[i0], chunk[i1]);
            let err = (c.abs() + s.abs())
                * (t0.atol.max(t1.atol) + t0.rtol.max(t1.rtol) * x0.abs().max(x1.abs()));
            let tol = Tol {
                atol: err + 1e-5,
                rtol: 1e-5,
            };
            out[row * dim + i0] = (x0 * c - x1 * s, tol);
            out[row * dim + i1] = (x0 * s + x1 * c, tol);
        }
    }
    out
}

/// `residual + rope(rms_norm(x) x w^T)` (matmul_quant_with's `rope`): a LLaMA's fused
/// query, key and value projection with its rotation, every format, GEMV and prompt row
/// counts, both layouts, with and without the norm and a residual, against the f64 product
/// rotated in f64; tables of the wrong shape or rows that do not tile the product are refused.
pub async fn quantized_rope(dev: &Device) {
    use gpukit::{QuantFormat, RopeLayout};
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        // (rows of x, rope rows a product row, dim, k): SmolLM2's 15 heads of 64, odd head
        // counts, a dim of 2, and a prompt of 11 rows (the kernels apart).
        for (ci, (m, heads, dim, k)) in [
            (1usize, 15usize, 64usize, 576usize),
            (1, 3, 2, 32),
            (3, 5, 6, 96),
            (11, 3, 16, 64),
        ]
        .into_iter()
        .enumerate()
        {
            let n = heads * dim;
            let seed = 9900 + fi as u64 * 10 + ci as u64;
            let mut rng = Rng::new(seed);
            let w = rng.vec(n * k, -1.0, 1.0);
            let x = rng.vec(m * k, -1.0, 1.0);
            let r = rng.vec(m * n, -2.0, 2.0);
            let rows = m * heads;
            let angles = rng.vec(rows * dim / 2, -3.2, 3.2);
            let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
            let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
            let bytes = oracle::quantize(&w, format);
            let wq = dev.quantized(&bytes, format, n, k).unwrap();
            let deq32 = dequantized_f32(&bytes, format);
            let nw = rng.vec(k, 0.5, 1.5);
            let xn = rms_normed(&x, &nw, 1e-5);
            let (tx, tr) = (
                dev.tensor(&x, &[m, k]).unwrap(),
                dev.tensor(&r, &[m, n]).unwrap(),
            );
            let norm = dev.tensor(&nw, &[k]).unwrap();
            let (tc, ts) = (
                dev.tensor(&cos, &[rows, dim / 2]).unwrap(),
                dev.tensor(&sin, &[rows, dim / 2]).unwrap(),
            );
            for layout in [RopeLayout::Interleaved, RopeLayout::HalfSplit] {
                for (normed, with_residual) in [(true, false), (false, false), (true, true)] {
                    let options = gpukit::QuantMatmulOptions {
                        rms_norm: normed.then_some((&norm, 1e-5)),
                        residual: with_residual.then_some(&tr),
                        rope: Some((&tc, &ts, layout)),
                        ..Default::default()
                    };
                    let got = tx.matmul_quant_with(&wq, options).unwrap();
                    assert_eq!(got.shape(), &[m, n]);
                    let input = if normed { &xn } else { &x };
                    let product =
                        oracle::matmul_with(input, &deq32, (m, k, n), (false, true), None, None);
                    let mut want = rotate(&product, (&cos, &sin), dim, layout);
                    if with_residual {
                        for (w, &r) in want.iter_mut().zip(&r) {
                            w.0 += r as f64;
                        }
                    }
                    let ctx = format!(
                        "{format:?} [{m}, {k}] x [{n}, {k}]^T rope {layout:?} dim {dim}, \
                         norm {normed}, residual {with_residual}"
                    );
                    check(&ctx, &|i| format!("{i}"), &got.read().await.unwrap(), &want);
                }
            }
        }
    }
    let bytes = oracle::quantize(&[0.5; 12 * 32], QuantFormat::Q8_0);
    let wq = dev.quantized(&bytes, QuantFormat::Q8_0, 12, 32).unwrap();
    let x = dev.tensor(&[1.0; 64], &[2, 32]).unwrap();
    // Rows of 8 do not tile 12 columns; 3 or 6 table rows where 6 or 4 are needed; a dim
    // of 0.
    for (rows, half) in [(3usize, 4usize), (3, 2), (6, 3), (0, 0)] {
        let t = dev.tensor(&vec![0.5; rows * half], &[rows, half]).unwrap();
        let options = gpukit::QuantMatmulOptions {
            rope: Some((&t, &t, RopeLayout::Interleaved)),
            ..Default::default()
        };
        let e = x.matmul_quant_with(&wq, options);
        assert!(
            matches!(
                e,
                Err(Error::ShapeMismatch { .. } | Error::InvalidArgument { .. })
            ),
            "tables [{rows}, {half}]: {e:?}"
        );
    }
    let good = dev.tensor(&[0.5; 12], &[6, 2]).unwrap();
    let flat = dev.tensor(&[0.5; 12], &[12]).unwrap();
    let options = gpukit::QuantMatmulOptions {
        rope: Some((&good, &flat, RopeLayout::Interleaved)),
        ..Default::default()
    };
    let e = x.matmul_quant_with(&wq, options);
    assert!(
        matches!(e, Err(Error::ShapeMismatch { .. })),
        "sin of another shape: {e:?}"
    );
    let options = gpukit::QuantMatmulOptions {
        rope: Some((&good, &good, RopeLayout::Interleaved)),
        ..Default::default()
    };
    assert_eq!(x.matmul_quant_with(&wq, options).unwrap().shape(), &[2, 12]);
}

/// Rows of a quantized table gathered by device ids (`QuantTensor::embedding_ids`, an LLM's
/// tied embeddings): every format, u32 ids of two axes and i32 ids, rows that are not a
/// multiple of the 32 lanes, against the f64 dequantisation; then in a compiled graph that
/// takes new ids each run; integer ids only.
pub async fn quantized_rows(dev: &Device) {
    use gpukit::QuantFormat;
    use std::rc::Rc;
    let (n, k) = (41usize, 1184usize);
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        let seed = 9750 + fi as u64;
        let w = Rng::new(seed).vec(n * k, -2.0, 2.0);
        let bytes = oracle::quantize(&w, format);
        let deq = oracle::dequantize(&bytes, format);
        let wq = Rc::new(dev.quantized(&bytes, format, n, k).unwrap());
        let tol = Tol {
            atol: 1e-7,
            rtol: 1e-6,
        };
        let rows_of = |ids: &[usize]| -> Vec<(f64, Tol)> {
            ids.iter()
                .flat_map(|&i| deq[i * k..(i + 1) * k].iter().map(|&v| (v, tol)))
                .collect()
        };
        let ids = [40u32, 0, 7, 7, 19, 33];
        let t = dev.tensor_of(&ids, &[2, 3]).unwrap();
        let got = wq.embedding_ids(&t).unwrap();
        assert_eq!(got.shape(), &[2, 3, k]);
        let want = rows_of(&ids.map(|i| i as usize));
        let ctx = format!("{format:?} rows of [{n}, {k}] seed {seed}");
        check(&ctx, &|i| format!("{i}"), &got.read().await.unwrap(), &want);
        let signed = dev.tensor_of(&[3i32, 39], &[2]).unwrap();
        let got = wq.embedding_ids(&signed).unwrap().read().await.unwrap();
        check(
            &format!("{ctx}, i32 ids"),
            &|i| format!("{i}"),
            &got,
            &rows_of(&[3, 39]),
        );
        let floats = dev.tensor(&[1.0, 2.0], &[2]).unwrap();
        assert!(wq.embedding_ids(&floats).is_err(), "{format:?} f32 ids");

        let mut batch = dev.batch();
        let iv = batch.upload_of(&[1u32, 2], &[2]).unwrap();
        let rows = batch.embedding_quant(iv, wq.clone()).unwrap();
        batch.output(rows).unwrap();
        let fv = batch.upload(&[1.0], &[1]).unwrap();
        assert!(batch.embedding_quant(fv, wq.clone()).is_err());
        let mut graph = batch.compile().unwrap();
        for new in [[5u32, 40], [0, 0]] {
            graph.set_input(iv, &new).unwrap();
            let result = graph.run(&[]).await.unwrap();
            let got = result.get(rows).unwrap();
            let want = rows_of(&new.map(|i| i as usize));
            check(
                &format!("{ctx}, graph ids {new:?}"),
                &|i| format!("{i}"),
                got,
                &want,
            );
        }
    }
}
