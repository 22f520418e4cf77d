//! Products of a few rows by a weight stored `[n, k]` (`linear`, `matmul` with `transpose_b`):
//! the shape of a transformer at batch 1. gemm packs both operands on every call, which at
//! 1-32 rows costs more than the product; here each output is a dot product of two contiguous
//! rows, computed in register tiles of 4 rows by 4 weight rows with 16 lanes each, so the
//! weight streams through once per call and nothing is packed. AVX-512 and AVX2 + FMA
//! (intrinsics, `matmul_rows_avx512.rs` and `matmul_rows_avx2.rs`, the latter in tiles of 4
//! rows by 2 weight rows of 8 lanes) are chosen at run time; elsewhere (wasm SIMD128, other
//! CPUs) the same tiles run as plain multiplies and adds, which LLVM vectorises.

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
            if is_x86_feature_detected!("avx512f") && !super::forced_avx2() {
                // SAFETY: the CPU has AVX-512F; the caller checked every row lies inside its
                // slice.
                |a, ars, m, w, wrs, j0, k, out| unsafe {
                    super::matmul_rows_avx512::block(a, ars, m, w, wrs, j0, k, out)
                }
            } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                // SAFETY: as above.
                |a, ars, m, w, wrs, j0, k, out| unsafe {
                    super::matmul_rows_avx2::block(a, ars, m, w, wrs, j0, k, out)
                }
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

/// [`product`] with the weight's elements f16 (`bf16` false) or bf16 bits, widened as they are
/// read, so the weight stays half-precision in memory and streams at half the bytes. With
/// AVX-512 the block widens 16 elements a load; elsewhere (AVX2, wasm SIMD128, other CPUs)
/// [`WIDEN_ROWS`] weight rows at a time are widened into a small f32 scratch that the f32
/// block then reads, the widening paid once for all `m` rows.
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
    if is_x86_feature_detected!("avx512f") && !super::forced_avx2() {
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
    product_half_widening(m, n, k, a, ars, w, wrs, bf16, c, ldc, accumulate)
}

/// Weight rows widened at a time by [`product_half_widening`]: 16 rows of a 1536-long row
/// are 96 KB of f32, within a core's L2 beside the rows of `a`.
const WIDEN_ROWS: usize = 16;

/// [`product_half`] without AVX-512: each task widens [`WIDEN_ROWS`] of its weight rows into
/// an f32 scratch and runs the widest f32 block over them.
#[allow(clippy::too_many_arguments)]
fn product_half_widening(
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
    if m == 0 {
        return;
    }
    // Natively, the tasks of [`tiles`] over the widest block. In wasm (one thread) a loop of
    // its own (the transposed store repeats `tiles`' on purpose): sharing `tiles` and the
    // plain block with the f32 `product` changed how LLVM compiled that one, one sentence
    // 6-25% slower in Node (BENCHMARKS.md).
    #[cfg(target_arch = "x86_64")]
    {
        let run = kernel();
        tiles(m, n, c, ldc, accumulate, |j0, out| {
            widened_rows(m, k, w, wrs, bf16, j0, out, |w, out| {
                run(a, ars, m, w, k, 0, k, out)
            })
        });
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let mut t = vec![0.0f32; n * m];
        widened_rows(m, k, w, wrs, bf16, 0, &mut t, |w, out| {
            block(a, ars, m, w, k, 0, k, out, |x, y, z| x * y + z)
        });
        for (i, row) in c.chunks_mut(ldc).take(m).enumerate() {
            for (j, v) in row[..n].iter_mut().enumerate() {
                let x = t[j * m + i];
                *v = if accumulate { *v + x } else { x };
            }
        }
    }
}

/// Fills `out` (the transposed `[rows][m]` products of the weight rows from `j0`) by widening
/// [`WIDEN_ROWS`] weight rows at a time into an f32 scratch and running `run(scratch, out)`
/// over each group's part of `out`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn widened_rows(
    m: usize,
    k: usize,
    w: &[u16],
    wrs: usize,
    bf16: bool,
    j0: usize,
    out: &mut [f32],
    mut run: impl FnMut(&[f32], &mut [f32]),
) {
    let rows = out.len() / m;
    let mut scratch = vec![0.0f32; WIDEN_ROWS.min(rows) * k];
    for (s, out) in out.chunks_mut(WIDEN_ROWS * m).enumerate() {
        let r0 = j0 + s * WIDEN_ROWS;
        let tile = out.len() / m;
        for (r, dst) in scratch.chunks_exact_mut(k).take(tile).enumerate() {
            // The caller checked every row lies inside its slice.
            let src = w.get((r0 + r) * wrs..(r0 + r) * wrs + k).unwrap_or(&[]);
            widen(src, dst, bf16);
        }
        run(&scratch[..tile * k], out);
    }
}

/// `dst[i]` = the f16 (or bf16) bits `src[i]` as f32, exactly (subnormals, infinities and NaN
/// included): bf16 by a shift, f16 by F16C on x86-64 and by [`widen_f16`] elsewhere.
fn widen(src: &[u16], dst: &mut [f32], bf16: bool) {
    if bf16 {
        for (d, &h) in dst.iter_mut().zip(src) {
            *d = f32::from_bits(u32::from(h) << 16);
        }
        return;
    }
    // On x86-64 the `half` crate converts with F16C where the CPU has it (every AVX2 CPU),
    // four times faster than the vectorised loop, which in SSE2 cost more than the product.
    #[cfg(target_arch = "x86_64")]
    {
        use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};
        let n = dst.len().min(src.len());
        src[..n]
            .reinterpret_cast::<half::f16>()
            .convert_to_f32_slice(&mut dst[..n]);
    }
    #[cfg(not(target_arch = "x86_64"))]
    for (d, &h) in dst.iter_mut().zip(src) {
        *d = widen_f16(h);
    }
}

/// One f16 as f32, without branches so that LLVM vectorises it (SIMD128). The exponent and
/// mantissa moved into f32's fields read as a number 2^112
/// too small (f16's exponent bias is 15, f32's 127), subnormals included, so one exact
/// multiply scales them; infinities and NaN take f32's all-ones exponent instead.
/// (The wasm path; on x86-64 the unit test holds it to the `half` crate.)
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn widen_f16(h: u16) -> f32 {
    let h = u32::from(h);
    let magnitude = (h & 0x7fff) << 13;
    let scaled = (f32::from_bits(magnitude) * f32::from_bits(0x7780_0000)).to_bits();
    let bits = if h & 0x7c00 == 0x7c00 {
        magnitude | 0x7f80_0000
    } else {
        scaled
    };
    f32::from_bits(bits | ((h & 0x8000) << 16))
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
    /// (the same fused multiply-adds in the same order), f16 and bf16, at edge tiles and tails,
    /// through AVX-512 (where this CPU has it) and through the widening scratch (every CPU:
    /// more weight rows than one scratch holds, and fewer).
    #[test]
    fn half_weights_match_widened_ones() {
        for (m, n, k) in [
            (1, 3, 128),
            (5, 9, 131),
            (13, 6, 384),
            (32, 17, 200),
            (3, 70, 160),
        ] {
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
                let mut want = vec![0.5f32; m * n];
                product(m, n, k, &a, k, &wide, k, &mut want, n, true);
                let mut got = vec![0.5f32; m * n];
                product_half(m, n, k, &a, k, &bits, k, bf16, &mut got, n, true);
                assert_eq!(got, want, "m {m} n {n} k {k} bf16 {bf16}");
                let mut got = vec![0.5f32; m * n];
                product_half_widening(m, n, k, &a, k, &bits, k, bf16, &mut got, n, true);
                assert_eq!(got, want, "widening: m {m} n {n} k {k} bf16 {bf16}");
            }
        }
    }

    /// The branch-free widening (wasm's) and the slice widening are the `half` crate's
    /// conversion for every one of the 65,536 f16 values (NaN to a NaN of the same sign), and
    /// bf16's shift likewise.
    #[test]
    fn widening_is_exact_for_every_half() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        for (bf16, branch_free) in [(false, false), (false, true), (true, false)] {
            let mut got = vec![0.0f32; all.len()];
            if branch_free {
                got.iter_mut()
                    .zip(&all)
                    .for_each(|(g, &h)| *g = widen_f16(h));
            } else {
                widen(&all, &mut got, bf16);
            }
            for (&h, &g) in all.iter().zip(&got) {
                let want = if bf16 {
                    half::bf16::from_bits(h).to_f32()
                } else {
                    half::f16::from_bits(h).to_f32()
                };
                if want.is_nan() {
                    assert!(
                        g.is_nan() && g.is_sign_negative() == want.is_sign_negative(),
                        "{h:#06x} bf16 {bf16}: {g}"
                    );
                } else {
                    assert_eq!(g.to_bits(), want.to_bits(), "{h:#06x} bf16 {bf16}");
                }
            }
        }
    }

    /// The AVX-512 and AVX2 intrinsics blocks give the portable block's values at edge tiles
    /// (rows and weight rows not multiples of their tiles) and row tails (k not a multiple of
    /// their lanes), with strided rows and weight rows from an offset.
    #[test]
    fn intrinsics_blocks_match_the_portable_one() {
        let mut kernels: Vec<(&str, Block)> = Vec::new();
        if is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F; the test's rows lie inside their slices.
            kernels.push(("avx512", |a, ars, m, w, wrs, j0, k, out| unsafe {
                super::super::matmul_rows_avx512::block(a, ars, m, w, wrs, j0, k, out)
            }));
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: the CPU has AVX2 and FMA; as above.
            kernels.push(("avx2", |a, ars, m, w, wrs, j0, k, out| unsafe {
                super::super::matmul_rows_avx2::block(a, ars, m, w, wrs, j0, k, out)
            }));
        }
        assert!(
            !kernels.is_empty(),
            "an x86-64 CI machine has AVX2 at least"
        );
        for (m, nb, k) in [
            (1, 1, 128),
            (3, 5, 131),
            (4, 4, 144),
            (7, 9, 200),
            (13, 6, 384),
            (2, 40, 136),
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
            for (name, run) in &kernels {
                let mut got = vec![f32::NAN; nb * m];
                run(&a, ars, m, &w, wrs, 2, k, &mut got);
                for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - e).abs() <= 1e-4 * e.abs().max(1.0),
                        "{name}: m {m} nb {nb} k {k} [{j}]: {g} vs {e}"
                    );
                }
            }
        }
    }
}
