//! The few-row quantized product in wasm's SIMD128 intrinsics (the browser's CPU backend), the
//! same scheme as `quant_avx512.rs` at four lanes: each 4 bytes of a Q4 block widen to four
//! 32-bit lanes, a mask and a shift give two elements apart (even and odd), and `x` comes
//! reordered once per call by `split_even_odd` so no lane is shuffled. A Q8_0 block's bytes
//! widen with their sign. Weights are formed as `d q + min` before their product, as on every
//! other path. SIMD128 has no fused multiply-add: a multiply and an add, as the portable code.

use std::arch::wasm32::*;

use super::quant_rows::{Row, MAX_ROWS};
use super::CpuStorage;
use crate::ops::quant::{QuantParts, BLOCK};
use crate::QuantFormat;

/// Four floats of `x` from `at`.
#[inline(always)]
fn load4(x: &[f32], at: usize) -> v128 {
    let s = &x[at..at + 4];
    // SAFETY: `s` holds 16 bytes; wasm loads need no alignment.
    unsafe { v128_load(s.as_ptr().cast()) }
}

/// Block `b` of a weight row as eight vectors of 4 weights, in `x`'s layout for the format:
/// for Q4, vectors 0-3 hold the even elements (4 each) and 4-7 the odd ones; for Q8_0, the 32
/// elements in order.
#[inline(always)]
fn weights(format: QuantFormat, words: &[u32], d: f32, mn: f32) -> [v128; 8] {
    let (d, mn) = (f32x4_splat(d), f32x4_splat(mn));
    let mut w = [f32x4_splat(0.0); 8];
    match format {
        QuantFormat::Q8_0 => {
            for half in 0..2 {
                let s = &words[half * 4..half * 4 + 4];
                // SAFETY: `s` holds 16 bytes.
                let bytes = unsafe { v128_load(s.as_ptr().cast()) };
                let (lo, hi) = (
                    i16x8_extend_low_i8x16(bytes),
                    i16x8_extend_high_i8x16(bytes),
                );
                let quads = [
                    i32x4_extend_low_i16x8(lo),
                    i32x4_extend_high_i16x8(lo),
                    i32x4_extend_low_i16x8(hi),
                    i32x4_extend_high_i16x8(hi),
                ];
                for (j, q) in quads.into_iter().enumerate() {
                    w[half * 4 + j] = f32x4_mul(f32x4_convert_i32x4(q), d);
                }
            }
        }
        QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
            let s = &words[..4];
            // SAFETY: `s` holds 16 bytes.
            let bytes = unsafe { v128_load(s.as_ptr().cast()) };
            let (lo, hi) = (
                u16x8_extend_low_u8x16(bytes),
                u16x8_extend_high_u8x16(bytes),
            );
            let quads = [
                u32x4_extend_low_u16x8(lo),
                u32x4_extend_high_u16x8(lo),
                u32x4_extend_low_u16x8(hi),
                u32x4_extend_high_u16x8(hi),
            ];
            let mask = u32x4_splat(15);
            for (g, q) in quads.into_iter().enumerate() {
                let even = f32x4_convert_u32x4(v128_and(q, mask));
                let odd = f32x4_convert_u32x4(u32x4_shr(q, 4));
                w[g] = f32x4_add(f32x4_mul(even, d), mn);
                w[4 + g] = f32x4_add(f32x4_mul(odd, d), mn);
            }
        }
    }
    w
}

/// `out[t * m + i] = x_i . w_(j0 + t)` for the weight rows that `out` covers. `x` is laid out
/// for the format: `split_even_odd` for Q4, as given for Q8_0; it holds `m * w.cols` values,
/// `m <= MAX_ROWS`.
pub(super) fn rows(
    w: &QuantParts<'_, CpuStorage>,
    x: &[f32],
    m: usize,
    j0: usize,
    out: &mut [f32],
) {
    let k = w.cols;
    let blocks = k / BLOCK;
    let wpb = w.format.words_per_block();
    for (t, dst) in out.chunks_exact_mut(m).enumerate() {
        let row = Row::of(w, j0 + t);
        let mut acc = [[f32x4_splat(0.0); 4]; MAX_ROWS];
        for b in 0..blocks {
            let mn = row.min(w.format, b);
            let wv = weights(
                w.format,
                &row.words[b * wpb..(b + 1) * wpb],
                row.scales[b],
                mn,
            );
            for (i, acc) in acc.iter_mut().enumerate().take(m) {
                let at = i * k + b * BLOCK;
                for (j, wj) in wv.iter().enumerate() {
                    let a = &mut acc[j % 4];
                    *a = f32x4_add(*a, f32x4_mul(*wj, load4(x, at + 4 * j)));
                }
            }
        }
        for (i, d) in dst.iter_mut().enumerate() {
            let [a0, a1, a2, a3] = acc[i];
            let v = f32x4_add(f32x4_add(a0, a1), f32x4_add(a2, a3));
            *d = (f32x4_extract_lane::<0>(v) + f32x4_extract_lane::<1>(v))
                + (f32x4_extract_lane::<2>(v) + f32x4_extract_lane::<3>(v));
        }
    }
}
