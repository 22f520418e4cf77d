//! Products of a few rows by a weight stored `[n, k]` (`linear`, `matmul` with `transpose_b`):
//! the shape of a transformer at batch 1. gemm packs both operands on every call, which at
//! 1-32 rows costs more than the product; here each output is a dot product of two contiguous
//! rows, computed in register tiles of 4 rows by 4 weight rows with 16 lanes each, so the
//! weight streams through once per call and nothing is packed. AVX-512 (intrinsics,
//! `matmul_rows_avx512.rs`) and AVX2 (with FMA) are chosen at run time; elsewhere (wasm
//! SIMD128, other CPUs) the same tiles run as plain multiplies and adds, which LLVM vectorises.

use super::par;

/// Rows up to which this path beats gemm (measured on AVX-512 and AVX2 machines).
pub(super) const MAX_ROWS: usize = 32;
/// The shortest rows it takes: each output ends in a sum across lanes, which below this
/// costs more than gemm's packing.
pub(super) const MIN_K: usize = 128;

const LANES: usize = 16;
/// Rows of `a` per tile.
const TR: usize = 4;
/// Weight rows per tile.
const TW: usize = 4;
/// Weight rows per thread task.
const TASK: usize = 32;

/// `acc[l] = fma(x[l], y[l], acc[l])` over 16 lanes (one AVX-512 register, two AVX2 ones).
#[inline(always)]
fn lanes(acc: &mut [f32; LANES], x: &[f32], y: &[f32], fma: impl Fn(f32, f32, f32) -> f32) {
    let (x, y): (&[f32; LANES], &[f32; LANES]) = match (x.try_into(), y.try_into()) {
        (Ok(x), Ok(y)) => (x, y),
        _ => return,
    };
    for l in 0..LANES {
        acc[l] = fma(x[l], y[l], acc[l]);
    }
}

/// The sum of 16 lanes as a tree of four vector adds (a running sum would be 15 dependent
/// scalar adds, which at short rows cost more than the products).
#[inline(always)]
fn sum_lanes(mut v: [f32; LANES]) -> f32 {
    let mut width = LANES / 2;
    while width > 0 {
        for l in 0..width {
            v[l] += v[l + width];
        }
        width /= 2;
    }
    v[0]
}

/// `out[j * m + i] = a_i . w_j` for `m` rows of `a` (row stride `ars`) and the weight rows
/// `j0..j0 + out.len() / m` of `w` (row stride `wrs`), each `k` long; `out` is the transposed
/// block, written whole. Tiles of 4 rows by 4 weight rows keep sixteen 16-lane accumulators in
/// registers; a tile at the edge repeats its last row and stores only the real ones.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn block(
    a: &[f32],
    ars: usize,
    m: usize,
    w: &[f32],
    wrs: usize,
    j0: usize,
    k: usize,
    out: &mut [f32],
    fma: impl Fn(f32, f32, f32) -> f32 + Copy,
) {
    let nb = out.len() / m;
    let kv = k - k % LANES;
    // The caller checked that every row lies inside its slice.
    fn row(s: &[f32], r: usize, rs: usize, k: usize) -> &[f32] {
        s.get(r * rs..r * rs + k).unwrap_or(&[])
    }
    fn chunks(s: &[f32], kv: usize) -> std::slice::ChunksExact<'_, f32> {
        s[..kv.min(s.len())].chunks_exact(LANES)
    }
    let mut j = 0;
    while j < nb {
        let tw = TW.min(nb - j);
        let ws: [&[f32]; TW] = std::array::from_fn(|t| row(w, j0 + j + t.min(tw - 1), wrs, k));
        let mut i = 0;
        while i < m {
            let tr = TR.min(m - i);
            let xs: [&[f32]; TR] = std::array::from_fn(|r| row(a, i + r.min(tr - 1), ars, k));
            let mut acc = [[[0.0f32; LANES]; TW]; TR];
            for (((x0, x1), (x2, x3)), ((w0, w1), (w2, w3))) in chunks(xs[0], kv)
                .zip(chunks(xs[1], kv))
                .zip(chunks(xs[2], kv).zip(chunks(xs[3], kv)))
                .zip(
                    chunks(ws[0], kv)
                        .zip(chunks(ws[1], kv))
                        .zip(chunks(ws[2], kv).zip(chunks(ws[3], kv))),
                )
            {
                for (acc, x) in acc.iter_mut().zip([x0, x1, x2, x3]) {
                    let [c0, c1, c2, c3] = acc;
                    lanes(c0, x, w0, fma);
                    lanes(c1, x, w1, fma);
                    lanes(c2, x, w2, fma);
                    lanes(c3, x, w3, fma);
                }
            }
            for r in 0..tr {
                for t in 0..tw {
                    let mut s = sum_lanes(acc[r][t]);
                    for (x, y) in xs[r][kv..].iter().zip(&ws[t][kv..]) {
                        s = fma(*x, *y, s);
                    }
                    out[(j + t) * m + i + r] = s;
                }
            }
            i += TR;
        }
        j += TW;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block_avx2(
    a: &[f32],
    ars: usize,
    m: usize,
    w: &[f32],
    wrs: usize,
    j0: usize,
    k: usize,
    out: &mut [f32],
) {
    block(a, ars, m, w, wrs, j0, k, out, f32::mul_add)
}

#[allow(clippy::too_many_arguments)]
fn block_plain(
    a: &[f32],
    ars: usize,
    m: usize,
    w: &[f32],
    wrs: usize,
    j0: usize,
    k: usize,
    out: &mut [f32],
) {
    block(a, ars, m, w, wrs, j0, k, out, |x, y, z| x * y + z)
}

type Block = fn(&[f32], usize, usize, &[f32], usize, usize, usize, &mut [f32]);

/// The widest block kernel this CPU runs.
fn kernel() -> Block {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static CHOSEN: OnceLock<Block> = OnceLock::new();
        *CHOSEN.get_or_init(|| {
            if is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F; the caller checked every row lies inside its
                // slice.
                |a, ars, m, w, wrs, j0, k, out| unsafe {
                    super::matmul_rows_avx512::block(a, ars, m, w, wrs, j0, k, out)
                }
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: as above.
                |a, ars, m, w, wrs, j0, k, out| unsafe { block_avx2(a, ars, m, w, wrs, j0, k, out) }
            } else {
                block_plain
            }
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        block_plain
    }
}

/// `c[i * ldc + j] (+)= a_i . w_j` for `m` rows of `a` and `n` rows of `w`, all `k` long and
/// contiguous (row strides `ars`, `wrs`); `accumulate` adds to `c` (the bias already there).
/// The caller has checked every row lies inside its slice.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    w: &[f32],
    wrs: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    let run = kernel();
    tiles(m, n, c, ldc, accumulate, |j0, out| {
        run(a, ars, m, w, wrs, j0, k, out)
    });
}

/// Whether [`product_half`] runs on this CPU: it needs AVX-512F (x86-64).
pub(super) fn takes_half_weights() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// [`product`] with the weight's elements f16 (`bf16` false) or bf16 bits, widened as they are
/// loaded, so the weight streams at half the bytes. The caller has checked
/// [`takes_half_weights`].
#[allow(clippy::too_many_arguments)]
pub(super) fn product_half(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    w: &[u16],
    wrs: usize,
    bf16: bool,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    #[cfg(target_arch = "x86_64")]
    if takes_half_weights() {
        use super::matmul_rows_avx512::{block, Bf16, F16};
        tiles(m, n, c, ldc, accumulate, |j0, out| {
            // SAFETY: the CPU has AVX-512F; the caller checked every row lies inside its
            // slice. F16 and Bf16 are transparent over u16.
            unsafe {
                if bf16 {
                    let w: &[Bf16] = std::slice::from_raw_parts(w.as_ptr().cast(), w.len());
                    block(a, ars, m, w, wrs, j0, k, out)
                } else {
                    let w: &[F16] = std::slice::from_raw_parts(w.as_ptr().cast(), w.len());
                    block(a, ars, m, w, wrs, j0, k, out)
                }
            }
        });
        return;
    }
    // Elsewhere (never chosen: `takes_half_weights` is false), widen and multiply.
    let widen = |h: u16| {
        if bf16 {
            f32::from_bits(u32::from(h) << 16)
        } else {
            half::f16::from_bits(h).to_f32()
        }
    };
    let wf: Vec<f32> = w.iter().map(|&h| widen(h)).collect();
    product(m, n, k, a, ars, &wf, wrs, c, ldc, accumulate);
}

/// Runs `block(j0, out)` over weight-row tiles split across the threads (`out` the transposed
/// `[rows][m]` block of weight rows from `j0`), then writes (or adds) the transpose into `c`.
fn tiles(
    m: usize,
    n: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    block: impl Fn(usize, &mut [f32]) + Sync,
) {
    let mut t = vec![0.0f32; n * m];
    // One task per thread (each wakes once), in whole weight tiles.
    let per = n.div_ceil(par::threads()).div_ceil(TW) * TW;
    par::chunks_mut(&mut t, per.max(TASK) * m / 4, |start, out| {
        block(start / m, out)
    });
    for (i, row) in c.chunks_mut(ldc).take(m).enumerate() {
        for (j, v) in row[..n].iter_mut().enumerate() {
            let x = t[j * m + i];
            *v = if accumulate { *v + x } else { x };
        }
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// Half-precision weights read as stored give exactly the product of the widened weights
    /// (the same fused multiply-adds in the same order), f16 and bf16, at edge tiles and tails.
    #[test]
    fn half_weights_match_widened_ones() {
        if !takes_half_weights() {
            return;
        }
        for (m, n, k) in [(1, 3, 128), (5, 9, 131), (13, 6, 384), (32, 17, 200)] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 40.0)
                .collect();
            for bf16 in [false, true] {
                let bits: Vec<u16> = (0..n * k)
                    .map(|i| {
                        let v = ((i * 17 % 89) as f32 - 44.0) / 30.0;
                        if bf16 {
                            half::bf16::from_f32(v).to_bits()
                        } else {
                            half::f16::from_f32(v).to_bits()
                        }
                    })
                    .collect();
                let wide: Vec<f32> = bits
                    .iter()
                    .map(|&h| {
                        if bf16 {
                            half::bf16::from_bits(h).to_f32()
                        } else {
                            half::f16::from_bits(h).to_f32()
                        }
                    })
                    .collect();
                let (mut got, mut want) = (vec![0.5f32; m * n], vec![0.5f32; m * n]);
                product_half(m, n, k, &a, k, &bits, k, bf16, &mut got, n, true);
                product(m, n, k, &a, k, &wide, k, &mut want, n, true);
                assert_eq!(got, want, "m {m} n {n} k {k} bf16 {bf16}");
            }
        }
    }

    /// The AVX-512 intrinsics block gives the portable block's values at edge tiles (rows and
    /// weight rows not multiples of 4) and row tails (k not a multiple of 16), with strided rows.
    #[test]
    fn avx512_block_matches_the_portable_one() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        for (m, nb, k) in [
            (1, 1, 128),
            (3, 5, 131),
            (4, 4, 144),
            (7, 9, 200),
            (13, 6, 384),
        ] {
            let (ars, wrs) = (k + 3, k + 5);
            let a: Vec<f32> = (0..m * ars)
                .map(|i| ((i * 31 % 97) as f32 - 48.0) / 40.0)
                .collect();
            let w: Vec<f32> = (0..(nb + 2) * wrs)
                .map(|i| ((i * 17 % 89) as f32 - 44.0) / 30.0)
                .collect();
            let mut want = vec![0.0f32; nb * m];
            block_plain(&a, ars, m, &w, wrs, 2, k, &mut want);
            let mut got = vec![0.0f32; nb * m];
            // SAFETY: the CPU has AVX-512F; every row lies inside its slice.
            unsafe { super::super::matmul_rows_avx512::block(&a, ars, m, &w, wrs, 2, k, &mut got) };
            for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - e).abs() <= 1e-4 * e.abs().max(1.0),
                    "m {m} nb {nb} k {k} [{j}]: {g} vs {e}"
                );
            }
        }
    }
}
