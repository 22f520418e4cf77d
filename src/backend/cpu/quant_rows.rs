//! Quantized products at a few rows (a language model's decode step): each block of 32
//! weights is unpacked and scaled once, in registers, and multiplied into every row of `x`,
//! so the weight streams from memory once in its quantized form and is never written out
//! as f32. Intrinsics kernels are chosen at run time on x86-64 (AVX-512, `quant_avx512.rs`;
//! AVX2 with FMA, `quant_avx2.rs`) and at build time in wasm (SIMD128, `quant_simd128.rs`);
//! elsewhere the same code runs as plain multiplies and adds, which LLVM vectorises.

use super::{par, CpuStorage};
use crate::ops::quant::{QuantParts, BLOCK};
use crate::QuantFormat;

/// Rows of `x` up to which this path beats dequantising into a buffer and calling sgemm.
pub(super) const MAX_ROWS: usize = 8;
/// Weight rows per thread task.
const TASK: usize = 64;

/// `x` (rows of `k`) with each block of 32 reordered to its 16 even elements, then its 16 odd
/// ones: the order of a Q4 block's low and high nibbles, which the intrinsics kernels read
/// apart rather than shuffle back into order.
#[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
pub(super) fn split_even_odd(x: &[f32]) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for block in x.chunks_exact(BLOCK) {
        out.extend(block.iter().step_by(2));
        out.extend(block.iter().skip(1).step_by(2));
    }
    out
}

/// One weight row's blocks: its quant words, scales and (Q4_1) mins.
pub(super) struct Row<'a> {
    pub words: &'a [u32],
    pub scales: &'a [f32],
    pub mins: Option<&'a [f32]>,
}

impl<'a> Row<'a> {
    /// Weight row `r` of `w`.
    #[inline(always)]
    pub(super) fn of(w: &QuantParts<'a, CpuStorage>, r: usize) -> Row<'a> {
        let blocks = w.cols / BLOCK;
        let wpb = w.format.words_per_block();
        let words: &[u32] = bytemuck::cast_slice(&w.words.0);
        Row {
            words: &words[r * blocks * wpb..(r + 1) * blocks * wpb],
            scales: &w.scales.0[r * blocks..(r + 1) * blocks],
            mins: w.mins.map(|mi| &mi.0[r * blocks..(r + 1) * blocks]),
        }
    }

    /// Block `b`'s min: Q4_1's stored one, Q4_0's `-8 d`, Q8_0's 0.
    #[inline(always)]
    pub(super) fn min(&self, format: QuantFormat, b: usize) -> f32 {
        match (self.mins, format) {
            (Some(m), _) => m[b],
            (None, QuantFormat::Q4_0) => -8.0 * self.scales[b],
            (None, _) => 0.0,
        }
    }
}

/// The 32 weights of block `b` of a row, as f32: `scale * q + min`.
/// `fma(a, b, c)` is `a * b + c`: fused where the caller was compiled with FMA (a plain
/// `mul_add` elsewhere would call libm's software fma).
#[inline(always)]
pub(super) fn block(
    format: QuantFormat,
    words: &[u32],
    scale: f32,
    min: f32,
    out: &mut [f32; BLOCK],
    fma: impl Fn(f32, f32, f32) -> f32,
) {
    match format {
        QuantFormat::Q8_0 => {
            let w: &[u32; 8] = match words.try_into() {
                Ok(w) => w,
                Err(_) => return,
            };
            for e in 0..BLOCK {
                let q = (w[e / 4] >> (8 * (e % 4))) as u8 as i8;
                out[e] = scale * q as f32;
            }
        }
        QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
            let w: &[u32; 4] = match words.try_into() {
                Ok(w) => w,
                Err(_) => return,
            };
            for e in 0..BLOCK {
                let q = (w[e / 8] >> (4 * (e % 8))) & 15;
                out[e] = fma(scale, q as f32, min);
            }
        }
    }
}

/// `out[j * m + i] = x_i . w_j` for the weight rows `j0..j0 + out.len() / m`.
#[inline(always)]
fn rows(
    w: &QuantParts<'_, CpuStorage>,
    x: &[f32],
    m: usize,
    j0: usize,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let k = w.cols;
    let blocks = k / BLOCK;
    let wpb = w.format.words_per_block();
    let mut deq = [0.0f32; BLOCK];
    for (t, dst) in out.chunks_exact_mut(m).enumerate() {
        let row = Row::of(w, j0 + t);
        let mut acc = [[0.0f32; BLOCK]; MAX_ROWS];
        for b in 0..blocks {
            block(
                w.format,
                &row.words[b * wpb..(b + 1) * wpb],
                row.scales[b],
                row.min(w.format, b),
                &mut deq,
                fma,
            );
            for (i, acc) in acc.iter_mut().enumerate().take(m) {
                let xb: &[f32; BLOCK] = match x[i * k + b * BLOCK..][..BLOCK].try_into() {
                    Ok(xb) => xb,
                    Err(_) => return,
                };
                for e in 0..BLOCK {
                    acc[e] = fma(deq[e], xb[e], acc[e]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate().take(m) {
            // A tree of adds across the 32 lanes.
            let mut v = *acc;
            let mut width = BLOCK / 2;
            while width > 0 {
                for l in 0..width {
                    v[l] += v[l + width];
                }
                width /= 2;
            }
            dst[i] = v[0];
        }
    }
}

/// `x[m, k] * w[n, k]^T` for `m <= MAX_ROWS`, as `[m, n]`.
pub(super) fn product(x: &[f32], w: &QuantParts<'_, CpuStorage>, m: usize) -> Vec<f32> {
    let n = w.rows;
    #[cfg(target_arch = "x86_64")]
    let (avx512, avx2) = (
        is_x86_feature_detected!("avx512f") && !super::forced_avx2(),
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
    );
    let mut out_t = vec![0.0f32; n * m];
    // The intrinsics kernels read a Q4 block's even and odd elements apart.
    #[cfg(target_arch = "x86_64")]
    let intrinsics = avx512 || avx2;
    #[cfg(target_arch = "wasm32")]
    let intrinsics = cfg!(target_feature = "simd128");
    #[cfg(any(target_arch = "x86_64", target_arch = "wasm32"))]
    let split = match (intrinsics, w.format) {
        (true, QuantFormat::Q4_0 | QuantFormat::Q4_1) => Some(split_even_odd(&x[..m * w.cols])),
        _ => None,
    };
    par::chunks_mut(&mut out_t, TASK * m, |start, dst| {
        let j0 = start / m;
        #[cfg(target_arch = "x86_64")]
        {
            if avx512 {
                let xs = split.as_deref().unwrap_or(x);
                // SAFETY: the CPU has AVX-512F; `xs` holds m rows of k, m <= MAX_ROWS, and
                // `dst` covers weight rows inside the matrix.
                return unsafe { super::quant_avx512::rows(w, xs, m, j0, dst) };
            }
            if avx2 {
                let xs = split.as_deref().unwrap_or(x);
                // SAFETY: the CPU has AVX2 and FMA; as above.
                return unsafe { super::quant_avx2::rows(w, xs, m, j0, dst) };
            }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        {
            let xs = split.as_deref().unwrap_or(x);
            #[allow(clippy::needless_return)]
            return super::quant_simd128::rows(w, xs, m, j0, dst);
        }
        #[allow(unreachable_code)]
        rows(w, x, m, j0, dst, |a, b, c| a * b + c)
    });
    if m == 1 {
        return out_t;
    }
    let mut out = vec![0.0f32; m * n];
    for (j, col) in out_t.chunks_exact(m).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
    out
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Words, scales and (Q4_1) mins of an `n x 32 blocks` matrix from a seed.
    fn parts(format: QuantFormat, n: usize, blocks: usize, seed: u32) -> [Vec<f32>; 3] {
        let mut s = seed;
        let mut next = move || {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            s
        };
        let words = (0..n * blocks * format.words_per_block())
            .map(|_| f32::from_bits(next()))
            .collect();
        let mut small = || (next() >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
        let scales = (0..n * blocks).map(|_| small() * 0.1).collect();
        let mins = (0..n * blocks).map(|_| small()).collect();
        [words, scales, mins]
    }

    /// The intrinsics kernels this CPU can run give the portable loop's values, whichever of
    /// them the product picks here (AVX2 is checked on AVX-512 machines too).
    #[test]
    fn intrinsics_kernels_match_the_portable_loop() {
        for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
            for (m, blocks) in [(1, 1), (3, 37), (1, 128), (8, 5), (2, 2)] {
                let n = 5;
                let k = blocks * BLOCK;
                let [words, scales, mins] = parts(format, n, blocks, (m * 131 + blocks) as u32);
                let (words, scales, mins) =
                    (CpuStorage(words), CpuStorage(scales), CpuStorage(mins));
                let w = QuantParts {
                    format,
                    rows: n,
                    cols: k,
                    scales: &scales,
                    mins: (format == QuantFormat::Q4_1).then_some(&mins),
                    words: &words,
                };
                let x: Vec<f32> = (0..m * k)
                    .map(|i| ((i * 37 % 101) as f32 - 50.0) / 25.0)
                    .collect();
                let mut want = vec![0.0f32; n * m];
                rows(&w, &x, m, 0, &mut want, |a, b, c| a * b + c);
                let xs = match format {
                    QuantFormat::Q8_0 => x.clone(),
                    _ => split_even_odd(&x),
                };
                let close = |got: &[f32], kernel: &str| {
                    for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                        let tol = 1e-5 * e.abs().max(1.0) * (k as f32).sqrt();
                        assert!(
                            (g - e).abs() <= tol,
                            "{kernel} {format:?} m {m} blocks {blocks} [{j}]: {g} vs {e}"
                        );
                    }
                };
                if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                    let mut got = vec![0.0f32; n * m];
                    // SAFETY: the CPU has AVX2 and FMA; xs holds m rows of k, m <= MAX_ROWS.
                    unsafe { super::super::quant_avx2::rows(&w, &xs, m, 0, &mut got) };
                    close(&got, "avx2");
                }
                if is_x86_feature_detected!("avx512f") {
                    let mut got = vec![0.0f32; n * m];
                    // SAFETY: the CPU has AVX-512F; as above.
                    unsafe { super::super::quant_avx512::rows(&w, &xs, m, 0, &mut got) };
                    close(&got, "avx512");
                }
            }
        }
    }
}
