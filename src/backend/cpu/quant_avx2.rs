//! The few-row quantized product in AVX2 + FMA intrinsics: `quant_avx512.rs`'s scheme at eight
//! lanes, for the x86-64 CPUs without AVX-512 (`quant_rows::product` checks at run time). A Q4
//! block's 16 bytes widen eight at a time; a mask and a shift give each half's even and odd
//! elements, which `x` holds apart (`split_even_odd`), so no lane is shuffled.

use std::arch::x86_64::*;

use super::quant_rows::{Row, MAX_ROWS};
use super::CpuStorage;
use crate::ops::quant::{QuantParts, BLOCK};
use crate::QuantFormat;

/// Block `b` of a row as four vectors of 8 weights, in `x`'s layout for the format: for Q4 the
/// even elements of the block's two halves, then the odd ones; for Q8_0 the 32 in order.
///
/// # Safety
/// AVX2 and FMA must be present; `b` is below the row's block count.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn weights(row: &Row<'_>, format: QuantFormat, b: usize) -> [__m256; 4] {
    let d = _mm256_set1_ps(row.scales[b]);
    match format {
        QuantFormat::Q8_0 => {
            let at = &row.words[b * 8..b * 8 + 8];
            let mut w = [_mm256_setzero_ps(); 4];
            for (j, w) in w.iter_mut().enumerate() {
                let quad = &at[2 * j..2 * j + 2];
                // SAFETY: `quad` holds 8 bytes; unaligned loads are allowed.
                let bytes = unsafe { _mm_loadl_epi64(quad.as_ptr().cast()) };
                *w = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), d);
            }
            w
        }
        QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
            let at = &row.words[b * 4..b * 4 + 4];
            let mn = _mm256_set1_ps(row.min(format, b));
            let mask = _mm256_set1_epi32(15);
            // SAFETY: `at` holds 16 bytes; unaligned loads are allowed.
            let (lo, hi) = unsafe {
                (
                    _mm_loadl_epi64(at.as_ptr().cast()),
                    _mm_loadl_epi64(at[2..].as_ptr().cast()),
                )
            };
            let (v0, v1) = (_mm256_cvtepu8_epi32(lo), _mm256_cvtepu8_epi32(hi));
            let weigh = |q: __m256i| _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), d, mn);
            [
                weigh(_mm256_and_si256(v0, mask)),
                weigh(_mm256_and_si256(v1, mask)),
                weigh(_mm256_srli_epi32::<4>(v0)),
                weigh(_mm256_srli_epi32::<4>(v1)),
            ]
        }
    }
}

/// Eight floats of `x` from `at`.
///
/// # Safety
/// AVX must be present.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn load8(x: &[f32], at: usize) -> __m256 {
    let s = &x[at..at + 8];
    // SAFETY: `s` holds 8 floats; unaligned loads are allowed.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// The sum of a vector's eight lanes.
///
/// # Safety
/// AVX must be present.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn sum8(v: __m256) -> f32 {
    let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let h = _mm_add_ps(q, _mm_movehl_ps(q, q));
    _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps::<1>(h, h)))
}

/// `out[t * m + i] = x_i . w_(j0 + t)` for the weight rows that `out` covers. `x` is laid out
/// for the format: `split_even_odd` for Q4, as given for Q8_0.
///
/// # Safety
/// AVX2 and FMA must be present. `x` holds `m * w.cols` values, `m <= MAX_ROWS`, and
/// `j0 + out.len() / m <= w.rows`.
#[target_feature(enable = "avx2,fma")]
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
        // SAFETY: AVX2 and FMA are present (this function's contract); every block index is
        // below `blocks` and every x offset below `m * k`.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 4]; MAX_ROWS];
            if m == 1 {
                let a = &mut acc[0];
                for b in 0..blocks {
                    let wv = weights(&row, w.format, b);
                    for (j, wj) in wv.into_iter().enumerate() {
                        a[j] = _mm256_fmadd_ps(wj, load8(x, b * BLOCK + 8 * j), a[j]);
                    }
                }
            } else {
                for b in 0..blocks {
                    let wv = weights(&row, w.format, b);
                    for (i, a) in acc.iter_mut().enumerate().take(m) {
                        let at = i * k + b * BLOCK;
                        for (j, wj) in wv.into_iter().enumerate() {
                            a[j] = _mm256_fmadd_ps(wj, load8(x, at + 8 * j), a[j]);
                        }
                    }
                }
            }
            for (d, [a0, a1, a2, a3]) in dst.iter_mut().zip(acc) {
                *d = sum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            }
        }
    }
}
