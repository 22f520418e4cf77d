//! `matmul_rows`'s block in AVX2 + FMA intrinsics, for x86-64 CPUs without AVX-512: tiles of 4
//! rows by 2 weight rows, eight 8-lane accumulators held in registers, and the weight rows
//! prefetched ahead as the AVX-512 block does. The portable body's 4 x 4 tiles of 16 lanes
//! need 32 accumulator registers where AVX2 has 16, and without prefetching a sentence at
//! batch 1 waited on memory: it ran at a third of the AVX-512 block's speed (BENCHMARKS.md).

use std::arch::x86_64::*;

/// Rows of `a` per tile.
const TR: usize = 4;
/// Weight rows per tile.
const TW: usize = 2;

/// The sum of 8 lanes.
///
/// # Safety
/// AVX2 must be present.
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn sum8(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
}

/// See `matmul_rows::block`: `out[j * m + i] = a_i . w_j` for `m` rows of `a` and the weight
/// rows `j0..j0 + out.len() / m`.
///
/// # Safety
/// AVX2 and FMA must be present; every row read (`m` rows of `a` at stride `ars`, the weight
/// rows at stride `wrs`, each `k` long) lies inside its slice.
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block(
    a: &[f32],
    ars: usize,
    m: usize,
    w: &[f32],
    wrs: usize,
    j0: usize,
    k: usize,
    out: &mut [f32],
) {
    let nb = out.len() / m.max(1);
    let kv = k - k % 8;
    let row = |r: usize| -> *const f32 { a[r * ars..r * ars + k].as_ptr() };
    let wrow = |r: usize| -> *const f32 { w[r * wrs..r * wrs + k].as_ptr() };
    // The first row tile of each pair of weight rows asks for the rows of a pair further on,
    // as many rows ahead as the AVX-512 block looks (about a thousand cycles of work).
    let ahead = TW * (16 / m.div_ceil(TR)).max(1);
    let mut j = 0;
    while j < nb {
        let tw = TW.min(nb - j);
        let ws: [*const f32; TW] = std::array::from_fn(|t| wrow(j0 + j + t.min(tw - 1)));
        let next = j + ahead;
        let soon: [*const f32; TW] =
            std::array::from_fn(|t| wrow(j0 + (next + t).min(nb.saturating_sub(1))));
        let mut i = 0;
        while i < m {
            let tr = TR.min(m - i);
            let xs: [*const f32; TR] = std::array::from_fn(|r| row(i + r.min(tr - 1)));
            let mut acc = [[_mm256_setzero_ps(); TW]; TR];
            let fetch = i == 0 && next < nb;
            let mut c = 0;
            while c < kv {
                // SAFETY: c + 8 <= kv <= k, inside every row (this function's contract).
                unsafe {
                    if fetch && c % 16 == 0 {
                        for p in soon {
                            _mm_prefetch::<_MM_HINT_T0>(p.add(c) as *const i8);
                        }
                    }
                    let wv = ws.map(|p| _mm256_loadu_ps(p.add(c)));
                    for (acc, x) in acc.iter_mut().zip(xs) {
                        let xv = _mm256_loadu_ps(x.add(c));
                        for (a, wv) in acc.iter_mut().zip(wv) {
                            *a = _mm256_fmadd_ps(xv, wv, *a);
                        }
                    }
                }
                c += 8;
            }
            for r in 0..tr {
                for t in 0..tw {
                    // SAFETY: AVX2 is present (this function's target feature).
                    let mut s = unsafe { sum8(acc[r][t]) };
                    for e in kv..k {
                        // SAFETY: e < k, inside both rows.
                        s = unsafe { (*xs[r].add(e)).mul_add(*ws[t].add(e), s) };
                    }
                    out[(j + t) * m + i + r] = s;
                }
            }
            i += TR;
        }
        j += TW;
    }
}
