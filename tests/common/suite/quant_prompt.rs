//! A prompt's product with a quantized weight in half precision: f16 on tensor cores where
//! the device has them (cuBLAS on CUDA, cooperative matrices on Vulkan), with the norm,
//! SwiGLU, rope and residual a transformer puts around it.

use super::quant::{dequantized_f32, rms_normed, rotate, swiglu_f64};
use super::*;

/// Every format, many rows (partial tiles), each epilogue and their pairs, in f16, bf16 and
/// TF32 precision, against the f64 product within the dense matmul's tolerances.
pub async fn quantized_prompt_halves(dev: &Device) {
    use gpukit::{QuantFormat, QuantMatmulOptions, RopeLayout};
    // 40 rows: past the GEMV of every backend (8 on wgpu and CUDA, 32 on the CPU). n and k
    // multiples of 4 take wgpu's transposed dequantisation where the adapter has cooperative
    // matrices and the kernel misses; 65 does not.
    for (format, (m, n, k)) in [
        (QuantFormat::Q4_1, (40usize, 132usize, 1184usize)),
        (QuantFormat::Q8_0, (9, 65, 160)),
    ] {
        let mut rng = Rng::new(9650 + m as u64);
        let w = rng.vec(n * k, -1.0, 1.0);
        let x = rng.vec(m * k, -1.0, 1.0);
        let bytes = oracle::quantize(&w, format);
        let wq = dev.quantized(&bytes, format, n, k).unwrap();
        let deq32 = dequantized_f32(&bytes, format);
        let want = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
        for precision in [Precision::F16, Precision::Bf16, Precision::Tf32] {
            let options = QuantMatmulOptions {
                precision,
                ..Default::default()
            };
            let got = dev.tensor(&x, &[m, k]).unwrap();
            let got = got.matmul_quant_with(&wq, options).unwrap();
            let want = match precision {
                Precision::Bf16 => oracle::as_bf16_tolerance(want.clone()),
                _ => oracle::as_f16_tolerance(want.clone()),
            };
            check(
                &format!("{format:?} matmul_quant [{m}, {k}] x [{n}, {k}]^T in {precision:?}"),
                &|i| format!("{i}"),
                &got.read().await.unwrap(),
                &want,
            );
        }
    }
    // Each epilogue in f16: 70 rows (a partial tile of every tile height), 11 rope rows of 12
    // a product row (132 columns: a partial tile of every width), k of 6 quant blocks.
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        let (m, heads, dim, k) = (70usize, 11usize, 12usize, 192usize);
        let n = heads * dim;
        let mut rng = Rng::new(9670 + fi as u64);
        let w = rng.vec(n * k, -1.0, 1.0);
        let x = rng.vec(m * k, -1.0, 1.0);
        let x2 = rng.vec(m * 2 * k, -3.0, 3.0);
        let mut r = rng.vec(m * n, -2.0, 2.0);
        r[5] = f32::NAN;
        r[m * n - 1] = f32::INFINITY;
        let nw = rng.vec(k, 0.5, 1.5);
        let angles = rng.vec(m * heads * dim / 2, -3.2, 3.2);
        let cos: Vec<f32> = angles.iter().map(|a| a.cos()).collect();
        let sin: Vec<f32> = angles.iter().map(|a| a.sin()).collect();
        let bytes = oracle::quantize(&w, format);
        let wq = dev.quantized(&bytes, format, n, k).unwrap();
        let deq32 = dequantized_f32(&bytes, format);
        let (tx, tx2) = (
            dev.tensor(&x, &[m, k]).unwrap(),
            dev.tensor(&x2, &[m, 2 * k]).unwrap(),
        );
        let (tr, tn) = (
            dev.tensor(&r, &[m, n]).unwrap(),
            dev.tensor(&nw, &[k]).unwrap(),
        );
        let (tc, ts) = (
            dev.tensor(&cos, &[m * heads, dim / 2]).unwrap(),
            dev.tensor(&sin, &[m * heads, dim / 2]).unwrap(),
        );
        let xn = rms_normed(&x, &nw, 1e-5);
        let gated = swiglu_f64(&x2, k);
        let product = |input: &[f32]| {
            let p = oracle::matmul_with(input, &deq32, (m, k, n), (false, true), None, None);
            oracle::as_f16_tolerance(p)
        };
        // (norm, swiglu, rope layout, residual)
        for (normed, swiglu, rope, with_residual) in [
            (false, false, None, false),
            (true, false, None, false),
            (true, false, None, true),
            (false, true, None, true),
            (true, false, Some(RopeLayout::Interleaved), false),
            (false, false, Some(RopeLayout::Interleaved), false),
            (true, false, Some(RopeLayout::Interleaved), true),
            (true, false, Some(RopeLayout::HalfSplit), false),
        ] {
            let options = QuantMatmulOptions {
                precision: Precision::F16,
                rms_norm: normed.then_some((&tn, 1e-5)),
                swiglu,
                rope: rope.map(|layout| (&tc, &ts, layout)),
                residual: with_residual.then_some(&tr),
            };
            let input = if swiglu { &tx2 } else { &tx };
            let got = input.matmul_quant_with(&wq, options).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let mut want = product(match (normed, swiglu) {
                (true, _) => &xn,
                (_, true) => &gated,
                _ => &x,
            });
            if let Some(layout) = rope {
                want = rotate(&want, (&cos, &sin), dim, layout);
            }
            if with_residual {
                for (w, &r) in want.iter_mut().zip(&r) {
                    w.0 += r as f64;
                    w.1.atol += 1e-5;
                }
            }
            let ctx = format!(
                "{format:?} [{m}, {k}] x [{n}, {k}]^T in f16: norm {normed}, swiglu {swiglu}, \
                 rope {rope:?}, residual {with_residual}"
            );
            check(&ctx, &|i| format!("{i}"), &got.read().await.unwrap(), &want);
        }
    }
}
