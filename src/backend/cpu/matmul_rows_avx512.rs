//! `matmul_rows`'s block in AVX-512 intrinsics: the same tiles of 4 rows by 4 weight rows,
//! sixteen accumulators of 16 lanes held in registers explicitly (the portable body left
//! them to LLVM, which spilled), each row's tail past the last 16 summed in scalars.

use std::arch::x86_64::*;

/// See `matmul_rows::block`: `out[j * m + i] = a_i . w_j` for `m` rows of `a` and the weight
/// rows `j0..j0 + out.len() / m`.
///
/// # Safety
/// AVX-512F must be present; every row read (`m` rows of `a` at stride `ars`, the weight rows
/// at stride `wrs`, each `k` long) lies inside its slice.
#[target_feature(enable = "avx512f")]
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
    let kv = k - k % 16;
    let row = |s: &[f32], r: usize, rs: usize| -> *const f32 { s[r * rs..r * rs + k].as_ptr() };
    let mut j = 0;
    while j < nb {
        let tw = 4.min(nb - j);
        let ws: [*const f32; 4] = std::array::from_fn(|t| row(w, j0 + j + t.min(tw - 1), wrs));
        let mut i = 0;
        while i < m {
            let tr = 4.min(m - i);
            let xs: [*const f32; 4] = std::array::from_fn(|r| row(a, i + r.min(tr - 1), ars));
            let mut acc = [[_mm512_setzero_ps(); 4]; 4];
            let mut c = 0;
            while c < kv {
                // SAFETY: c + 16 <= kv <= k, inside every row (this function's contract).
                unsafe {
                    let wv = ws.map(|p| _mm512_loadu_ps(p.add(c)));
                    for (acc, x) in acc.iter_mut().zip(xs) {
                        let xv = _mm512_loadu_ps(x.add(c));
                        for (a, wv) in acc.iter_mut().zip(wv) {
                            *a = _mm512_fmadd_ps(xv, wv, *a);
                        }
                    }
                }
                c += 16;
            }
            for r in 0..tr {
                for t in 0..tw {
                    let mut s = _mm512_reduce_add_ps(acc[r][t]);
                    for e in kv..k {
                        // SAFETY: e < k, inside both rows.
                        s = unsafe { (*xs[r].add(e)).mul_add(*ws[t].add(e), s) };
                    }
                    out[(j + t) * m + i + r] = s;
                }
            }
            i += 4;
        }
        j += 4;
    }
}
