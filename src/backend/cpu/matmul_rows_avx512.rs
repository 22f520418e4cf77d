//! `matmul_rows`'s block in AVX-512 intrinsics: the same tiles of 4 rows by 4 weight rows,
//! sixteen accumulators of 16 lanes held in registers explicitly (the portable body left
//! them to LLVM, which spilled), each row's tail past the last 16 summed in scalars. Weights
//! may be f32, or f16 or bf16 bits (widened 16 at a time as they are loaded: half the bytes
//! streamed).

use std::arch::x86_64::*;

/// A weight element the block reads: f32, [`F16`] or [`Bf16`].
pub(super) trait Weight: Copy {
    /// 0 f32, 1 f16, 2 bf16.
    const KIND: u8;
    /// The element as f32.
    fn value(self) -> f32;
}

impl Weight for f32 {
    const KIND: u8 = 0;
    fn value(self) -> f32 {
        self
    }
}

/// The bits of an f16 weight.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct F16(pub u16);

impl Weight for F16 {
    const KIND: u8 = 1;
    fn value(self) -> f32 {
        half::f16::from_bits(self.0).to_f32()
    }
}

/// The bits of a bf16 weight.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub(super) struct Bf16(pub u16);

impl Weight for Bf16 {
    const KIND: u8 = 2;
    fn value(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// 16 weights from `p` as f32 lanes.
///
/// # Safety
/// AVX-512F must be present and 16 elements readable at `p`.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn load16<W: Weight>(p: *const W) -> __m512 {
    // SAFETY: the caller's contract; f16 and bf16 elements are 2 bytes, f32 ones 4.
    unsafe {
        match W::KIND {
            0 => _mm512_loadu_ps(p as *const f32),
            1 => _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)),
            _ => _mm512_castsi512_ps(_mm512_slli_epi32(
                _mm512_cvtepu16_epi32(_mm256_loadu_si256(p as *const __m256i)),
                16,
            )),
        }
    }
}

/// The lane sums of sixteen accumulators at once, `out[4 r + t]` the sum of `acc[r][t]`: pairs
/// interleaved and added within 128-bit lanes, then groups of four, then across the lanes (45
/// instructions where sixteen separate reductions take about 130).
///
/// # Safety
/// AVX-512F must be present.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn sum16(acc: &[[__m512; 4]; 4]) -> [f32; 16] {
    // Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3] of a pair.
    let pair =
        |a: __m512, b: __m512| _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    // Within each 128-bit lane: the lane's sum of each of four vectors, in order.
    let four = |v: &[__m512; 4]| {
        let (ab, cd) = (pair(v[0], v[1]), pair(v[2], v[3]));
        _mm512_add_ps(
            _mm512_shuffle_ps::<0b01_00_01_00>(ab, cd),
            _mm512_shuffle_ps::<0b11_10_11_10>(ab, cd),
        )
    };
    // Across the four 128-bit lanes of two such vectors: lanes (0 + 1, 2 + 3) of each.
    let halves = |x: __m512, y: __m512| {
        _mm512_add_ps(
            _mm512_shuffle_f32x4::<0b10_00_10_00>(x, y),
            _mm512_shuffle_f32x4::<0b11_01_11_01>(x, y),
        )
    };
    let q = [four(&acc[0]), four(&acc[1]), four(&acc[2]), four(&acc[3])];
    let sums = halves(halves(q[0], q[1]), halves(q[2], q[3]));
    let mut out = [0.0f32; 16];
    // SAFETY: 16 f32 lanes into 16 f32s.
    unsafe { _mm512_storeu_ps(out.as_mut_ptr(), sums) };
    out
}

/// See `matmul_rows::block`: `out[j * m + i] = a_i . w_j` for `m` rows of `a` and the weight
/// rows `j0..j0 + out.len() / m`.
///
/// # Safety
/// AVX-512F must be present; every row read (`m` rows of `a` at stride `ars`, the weight rows
/// at stride `wrs`, each `k` long) lies inside its slice.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn block<W: Weight>(
    a: &[f32],
    ars: usize,
    m: usize,
    w: &[W],
    wrs: usize,
    j0: usize,
    k: usize,
    out: &mut [f32],
) {
    let nb = out.len() / m.max(1);
    let kv = k - k % 16;
    let row = |r: usize| -> *const f32 { a[r * ars..r * ars + k].as_ptr() };
    let wrow = |r: usize| -> *const W { w[r * wrs..r * wrs + k].as_ptr() };
    // The weight rows come from memory once (a model's weights outgrow the caches), so the
    // first row tile of each group of four asks for the rows of a group further on, about a
    // thousand cycles of work ahead: the row tiles of a group take about 200 cycles each.
    let ahead = 4 * (8 / m.div_ceil(4)).max(1);
    let mut j = 0;
    while j < nb {
        let tw = 4.min(nb - j);
        let ws: [*const W; 4] = std::array::from_fn(|t| wrow(j0 + j + t.min(tw - 1)));
        let next = j + ahead;
        let soon: [*const W; 4] =
            std::array::from_fn(|t| wrow(j0 + (next + t).min(nb.saturating_sub(1))));
        let mut i = 0;
        while i < m {
            let tr = 4.min(m - i);
            let xs: [*const f32; 4] = std::array::from_fn(|r| row(i + r.min(tr - 1)));
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            let fetch = i == 0 && next < nb;
            let mut c = 0;
            while c < kv {
                // SAFETY: c + 16 <= kv <= k, inside every row (this function's contract).
                unsafe {
                    if fetch {
                        for p in soon {
                            _mm_prefetch::<_MM_HINT_T0>(p.add(c) as *const i8);
                        }
                    }
                    let wv = ws.map(|p| load16(p.add(c)));
                    for (acc, x) in acc.iter_mut().zip(xs) {
                        let xv = _mm512_loadu_ps(x.add(c));
                        for (a, wv) in acc.iter_mut().zip(wv) {
                            *a = _mm512_fmadd_ps(xv, wv, *a);
                        }
                    }
                }
                c += 16;
            }
            // SAFETY: AVX-512F is present (this function's target feature).
            let sums = unsafe { sum16(&acc) };
            for r in 0..tr {
                for t in 0..tw {
                    let mut s = sums[4 * r + t];
                    for e in kv..k {
                        // SAFETY: e < k, inside both rows.
                        s = unsafe { (*xs[r].add(e)).mul_add((*ws[t].add(e)).value(), s) };
                    }
                    out[(j + t) * m + i + r] = s;
                }
            }
            i += 4;
        }
        j += 4;
    }
}
