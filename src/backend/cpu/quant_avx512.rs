//! The few-row quantized product (a language model's decode step) in AVX-512 intrinsics, for
//! the x86-64 CPUs that have it (`quant_rows::product` checks at run time).
//!
//! A Q4 block's 16 bytes widen to 16 lanes at once (`vpmovzxbd`); a mask and a shift give the
//! low and high nibbles, which hold the block's even and odd elements, so `x` is laid out once
//! per call with each block's even elements before its odd ones (`split_even_odd`) and no
//! lane shuffle is needed. Each weight is formed as `d q + min` before its product, as the
//! portable path does, so infinities in `x` meet nonzero weights exactly as in the reference.
//! A Q8_0 block is two widenings of 16 signed bytes. Four independent accumulators (two
//! blocks at a time) keep the FMA units busy at one row of `x`.

use std::arch::x86_64::*;

use super::quant_rows::{Row, MAX_ROWS};
use super::CpuStorage;
use crate::ops::quant::{QuantParts, BLOCK};
use crate::QuantFormat;

/// Block `b` of a Q4 row as f32 weights: (even elements, odd elements).
///
/// # Safety
/// AVX-512F must be present; `b < blocks` of the row (the row holds 4 words a block).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn q4_block(row: &Row<'_>, format: QuantFormat, b: usize) -> (__m512, __m512) {
    let at = &row.words[b * 4..b * 4 + 4];
    // SAFETY: `at` holds 16 bytes; unaligned loads are allowed.
    let bytes = unsafe { _mm_loadu_si128(at.as_ptr().cast()) };
    let v = _mm512_cvtepu8_epi32(bytes);
    let lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(15)));
    let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32::<4>(v));
    let d = _mm512_set1_ps(row.scales[b]);
    let mn = _mm512_set1_ps(row.min(format, b));
    (_mm512_fmadd_ps(lo, d, mn), _mm512_fmadd_ps(hi, d, mn))
}

/// Block `b` of a Q8_0 row as f32 weights: (elements 0..16, 16..32).
///
/// # Safety
/// AVX-512F must be present; `b < blocks` of the row (the row holds 8 words a block).
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn q8_block(row: &Row<'_>, b: usize) -> (__m512, __m512) {
    let at = &row.words[b * 8..b * 8 + 8];
    // SAFETY: `at` holds 32 bytes; unaligned loads are allowed.
    let (b0, b1) = unsafe {
        (
            _mm_loadu_si128(at.as_ptr().cast()),
            _mm_loadu_si128(at[4..].as_ptr().cast()),
        )
    };
    let d = _mm512_set1_ps(row.scales[b]);
    (
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b0)), d),
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b1)), d),
    )
}

/// Block `b` of a row as two vectors of 16 weights, matching `x`'s layout for the format.
///
/// # Safety
/// As for `q4_block` and `q8_block`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn weights(row: &Row<'_>, format: QuantFormat, b: usize) -> (__m512, __m512) {
    // SAFETY: the caller's guarantees are the callee's.
    unsafe {
        match format {
            QuantFormat::Q8_0 => q8_block(row, b),
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => q4_block(row, format, b),
        }
    }
}

/// Sixteen floats of `x` from `at`.
///
/// # Safety
/// AVX-512F must be present.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn load16(x: &[f32], at: usize) -> __m512 {
    let s = &x[at..at + 16];
    // SAFETY: `s` holds 16 floats; unaligned loads are allowed.
    unsafe { _mm512_loadu_ps(s.as_ptr()) }
}

/// `out[t * m + i] = x_i . w_(j0 + t)` for the weight rows that `out` covers. `x` is laid out
/// for the format: `split_even_odd` for Q4, as given for Q8_0.
///
/// # Safety
/// AVX-512F must be present. `x` holds `m * w.cols` values, `m <= MAX_ROWS`, and
/// `j0 + out.len() / m <= w.rows`.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows(
    w: &QuantParts<'_, CpuStorage>,
    x: &[f32],
    m: usize,
    j0: usize,
    out: &mut [f32],
) {
    let k = w.cols;
    let blocks = k / BLOCK;
    for (t, dst) in out.chunks_exact_mut(m).enumerate() {
        let row = Row::of(w, j0 + t);
        // SAFETY: AVX-512F is present (this function's contract); every block index is below
        // `blocks` and every x offset below `m * k`.
        unsafe {
            if m == 1 {
                dst[0] = one_row(&row, w.format, x, blocks);
                continue;
            }
            let mut acc = [_mm512_setzero_ps(); 2 * MAX_ROWS];
            for b in 0..blocks {
                let (w0, w1) = weights(&row, w.format, b);
                for i in 0..m {
                    let at = i * k + b * BLOCK;
                    acc[2 * i] = _mm512_fmadd_ps(w0, load16(x, at), acc[2 * i]);
                    acc[2 * i + 1] = _mm512_fmadd_ps(w1, load16(x, at + 16), acc[2 * i + 1]);
                }
            }
            for (i, d) in dst.iter_mut().enumerate() {
                *d = _mm512_reduce_add_ps(_mm512_add_ps(acc[2 * i], acc[2 * i + 1]));
            }
        }
    }
}

/// One weight row times one row of `x`, two blocks at a time into four accumulators.
///
/// # Safety
/// AVX-512F must be present; `x` holds `blocks * 32` values.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn one_row(row: &Row<'_>, format: QuantFormat, x: &[f32], blocks: usize) -> f32 {
    let (mut a0, mut a1, mut a2, mut a3) = (
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
        _mm512_setzero_ps(),
    );
    let mut b = 0;
    // SAFETY: every block index is below `blocks`, every x offset below `blocks * 32`.
    unsafe {
        while b + 2 <= blocks {
            let (w0, w1) = weights(row, format, b);
            let (w2, w3) = weights(row, format, b + 1);
            let at = b * BLOCK;
            a0 = _mm512_fmadd_ps(w0, load16(x, at), a0);
            a1 = _mm512_fmadd_ps(w1, load16(x, at + 16), a1);
            a2 = _mm512_fmadd_ps(w2, load16(x, at + 32), a2);
            a3 = _mm512_fmadd_ps(w3, load16(x, at + 48), a3);
            b += 2;
        }
        if b < blocks {
            let (w0, w1) = weights(row, format, b);
            let at = b * BLOCK;
            a0 = _mm512_fmadd_ps(w0, load16(x, at), a0);
            a1 = _mm512_fmadd_ps(w1, load16(x, at + 16), a1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)))
    }
}
