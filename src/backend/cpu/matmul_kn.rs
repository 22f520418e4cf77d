//! Products of a few rows by a weight stored `[k, n]` (a plain `matmul`, or a model's
//! transposed copy of a linear weight) on AVX-512: the outer-product form that gemm's kernels
//! use, without gemm's packing of the weight on every call. Each tile keeps 8 rows by 48
//! columns (24 accumulators) in registers; every step loads 48 weights of one row of `b` and
//! multiplies them by one broadcast element of each of the 8 rows of `a`, so no output ends in
//! a sum across lanes (the cost that holds the `[n, k]` dot products of `matmul_rows` back at
//! short rows). The first tile of rows over a column panel reads it from memory and asks for
//! the weight rows a few steps ahead; the later tiles find the panel in the core's L2 and ask
//! for the next panel meanwhile, so the memory never idles.

use std::arch::x86_64::*;

use super::par;

/// Rows of `a` per tile.
const ROWS: usize = 8;
/// Columns per tile: three vectors of 16.
const COLS: usize = 48;
/// Weight rows ahead that the first tile of rows asks for.
const AHEAD: usize = 32;

/// Whether this CPU runs [`product`].
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f") && !super::forced_avx2()
}

/// The rows of an output tile, a raw pointer shared by the tasks: each writes only its own
/// columns.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: the tasks of `product` write disjoint columns of `c` through it, and `product`
// holds `c` exclusively borrowed until they are all done.
unsafe impl Send for Out {}
// SAFETY: as above.
unsafe impl Sync for Out {}

impl Out {
    /// The pointer (a method, so that closures capture the whole `Out`).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `c[i * ldc + j] (+)= sum_e a[i * ars + e] * b[e * brs + j]` for `i < m`, `j < n`, `e < k`;
/// `accumulate` adds to `c` (the bias already there).
///
/// The caller has checked [`available`], that every row of `a` (`k` long) and of `b` (`n`
/// long) lies inside its slice, and that `c` holds `m` rows of `ldc >= n`.
#[allow(clippy::too_many_arguments)]
pub(super) fn product(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    b: &[f32],
    brs: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    let tiles = m.div_ceil(ROWS);
    // Panels start where the weight's rows are 64-byte aligned, when every row is aligned
    // alike (a row stride of whole lines): a row of 48 weights then spans three lines, not
    // four. Host buffers start 16 bytes into a line (the allocator's alignment), so the first
    // panel is narrower.
    let lead = match (b.as_ptr() as usize % 64, (brs * 4) % 64) {
        (0, _) | (_, 1..) => 0,
        (off, 0) => ((64 - off) / 4).min(n),
    };
    let start = |p: usize| {
        if p == 0 {
            0
        } else {
            lead + (p - usize::from(lead > 0)) * COLS
        }
    };
    let panels = usize::from(lead > 0) + (n - lead).div_ceil(COLS);
    // One task per thread, in whole panels.
    let per = panels.div_ceil(par::threads().max(1)).max(1);
    let out = Out(c.as_mut_ptr());
    let task = move |p0: usize| {
        for p in p0..(p0 + per).min(panels) {
            let j = start(p);
            let cols = if p == 0 && lead > 0 {
                lead
            } else {
                COLS.min(n - j)
            };
            let masks: [__mmask16; 3] = std::array::from_fn(|v| {
                let live = cols.saturating_sub(16 * v).min(16);
                ((1u32 << live) - 1) as __mmask16
            });
            for t in 0..tiles {
                let (r0, rows) = (t * ROWS, ROWS.min(m - t * ROWS));
                // SAFETY: the caller checked the extents of `a`, `b` and `c`; lanes past
                // `cols` are masked off; this task alone writes columns `j..j + cols`.
                unsafe {
                    let x = a.as_ptr().add(r0 * ars);
                    let dst = out.get().add(r0 * ldc + j);
                    let w = b.as_ptr().add(j);
                    let next = if p + 1 < (p0 + per).min(panels) {
                        start(p + 1) - j
                    } else {
                        0
                    };
                    let run = Tile {
                        x,
                        ars,
                        w,
                        brs,
                        k,
                        masks,
                        dst,
                        ldc,
                        accumulate,
                        next,
                    };
                    match (t, next) {
                        (0, _) => run.rows::<AHEAD_ROWS>(rows),
                        (_, 1..) => run.rows::<NEXT_PANEL>(rows),
                        _ => run.rows::<NONE>(rows),
                    }
                }
            }
        }
    };
    par::for_each((0..panels).step_by(per), task);
}

/// One tile's operands: rows of `a` from `x` (row stride `ars`), the weight's columns from
/// `w` (row stride `brs`), the output's from `dst` (row stride `ldc`).
struct Tile {
    x: *const f32,
    ars: usize,
    w: *const f32,
    brs: usize,
    k: usize,
    masks: [__mmask16; 3],
    dst: *mut f32,
    ldc: usize,
    accumulate: bool,
    /// Elements from `w` to the next panel this task runs, if any.
    next: usize,
}

/// What a tile asks the caches for as it goes: nothing, ...
const NONE: u8 = 0;
/// ... the weight rows [`AHEAD`] steps on, into L1 (the first tile of rows over a panel,
/// which reads the panel from memory), ...
const AHEAD_ROWS: u8 = 1;
/// ... or the next panel's row of the same step, into L2 (the later tiles, which find their
/// own panel in L2 and would leave the memory idle).
const NEXT_PANEL: u8 = 2;

impl Tile {
    /// Runs the tile's kernel for its number of rows (1 to [`ROWS`]).
    ///
    /// # Safety
    /// As [`Tile::run`].
    unsafe fn rows<const FETCH: u8>(&self, rows: usize) {
        // SAFETY: the caller's contract, and AVX-512F is present (`available`).
        unsafe {
            match rows {
                1 => self.run::<1, FETCH>(),
                2 => self.run::<2, FETCH>(),
                3 => self.run::<3, FETCH>(),
                4 => self.run::<4, FETCH>(),
                5 => self.run::<5, FETCH>(),
                6 => self.run::<6, FETCH>(),
                7 => self.run::<7, FETCH>(),
                _ => self.run::<8, FETCH>(),
            }
        }
    }

    /// `dst[i * ldc + j] (+)= sum_e x[i * ars + e] * w[e * brs + j]` for `i < R` and the
    /// columns the masks keep.
    ///
    /// # Safety
    /// AVX-512F must be present; `R` rows of `k` elements readable from `x`; every masked-in
    /// lane of the `k` weight rows and of the `R` output rows inside its allocation.
    #[target_feature(enable = "avx512f")]
    #[inline(never)]
    unsafe fn run<const R: usize, const FETCH: u8>(&self) {
        let mut acc = [[_mm512_setzero_ps(); 3]; R];
        let xs: [*const f32; R] = std::array::from_fn(|i| self.x.wrapping_add(i * self.ars));
        let mut w = self.w;
        let [m0, m1, m2] = self.masks;
        for e in 0..self.k {
            // SAFETY: this function's contract; a prefetch of any address is harmless, so
            // the rows ahead are computed with wrapping arithmetic.
            unsafe {
                if FETCH == AHEAD_ROWS {
                    let ahead = w.wrapping_add(AHEAD * self.brs) as *const i8;
                    _mm_prefetch::<_MM_HINT_T0>(ahead);
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(128));
                } else if FETCH == NEXT_PANEL {
                    let next = w.wrapping_add(self.next) as *const i8;
                    _mm_prefetch::<_MM_HINT_T1>(next);
                    _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(64));
                    _mm_prefetch::<_MM_HINT_T1>(next.wrapping_add(128));
                }
                let wv = [
                    _mm512_maskz_loadu_ps(m0, w),
                    _mm512_maskz_loadu_ps(m1, w.wrapping_add(16)),
                    _mm512_maskz_loadu_ps(m2, w.wrapping_add(32)),
                ];
                for (i, acc) in acc.iter_mut().enumerate() {
                    let xv = _mm512_set1_ps(*xs[i].add(e));
                    for (a, wv) in acc.iter_mut().zip(wv) {
                        *a = _mm512_fmadd_ps(xv, wv, *a);
                    }
                }
                w = w.wrapping_add(self.brs);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (v, (&a, mask)) in acc.iter().zip(self.masks).enumerate() {
                // SAFETY: this function's contract: the masked-in lanes of row `i`.
                unsafe {
                    let d = self.dst.wrapping_add(i * self.ldc + 16 * v);
                    let r = if self.accumulate {
                        _mm512_add_ps(a, _mm512_maskz_loadu_ps(mask, d))
                    } else {
                        a
                    };
                    _mm512_mask_storeu_ps(d, mask, r);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against an f64 product: every row count of a tile (and two and four tiles), panels
    /// cut at every alignment of the weight (the narrower first panel included), columns past
    /// a whole panel, strided rows of `a`, `b` and `c`, accumulating onto `c`, and NaN and
    /// infinity reaching exactly their row or column.
    #[test]
    fn matches_f64_product() {
        if !available() {
            eprintln!("matmul_kn: this CPU lacks AVX-512F; the kernel is not used here");
            return;
        }
        let value = |i: usize, s: usize| ((i * 37 + s * 11) % 101) as f32 / 50.0 - 1.0;
        let mut cases = 0;
        for (m, n, k) in [
            (1, 1, 1),
            (3, 47, 5),
            (7, 48, 130),
            (8, 49, 64),
            (9, 100, 33),
            (15, 96, 40),
            (17, 160, 7),
            (32, 200, 20),
        ] {
            for off in [0usize, 1, 4, 12] {
                for (ars, brs, ldc) in [(k, n, n), (k + 3, n + 16, n + 5)] {
                    for accumulate in [false, true] {
                        let a: Vec<f32> = (0..m * ars).map(|i| value(i, 1)).collect();
                        let mut b: Vec<f32> = (0..off + k * brs).map(|i| value(i, 2)).collect();
                        if m > 4 && n > 3 && k > 2 {
                            b[off + 2 * brs + 3] = f32::NAN;
                        }
                        let b = &b[off..];
                        let c0: Vec<f32> = (0..m * ldc).map(|i| value(i, 3)).collect();
                        let mut c = c0.clone();
                        product(m, n, k, &a, ars, b, brs, &mut c, ldc, accumulate);
                        for i in 0..m {
                            for j in 0..n {
                                let mut want = if accumulate {
                                    f64::from(c0[i * ldc + j])
                                } else {
                                    0.0
                                };
                                let mut scale = want.abs();
                                for e in 0..k {
                                    let p = f64::from(a[i * ars + e]) * f64::from(b[e * brs + j]);
                                    want += p;
                                    scale += p.abs();
                                }
                                let got = f64::from(c[i * ldc + j]);
                                let ok = if want.is_nan() {
                                    got.is_nan()
                                } else {
                                    (got - want).abs() <= 1e-5 * scale.max(1.0)
                                };
                                assert!(ok, "{m}x{n}x{k} off {off} strides ({ars}, {brs}, {ldc}) acc {accumulate}: c[{i}][{j}] {got} want {want}");
                            }
                            // Past `n`, a row of `c` is untouched.
                            for j in n..ldc {
                                assert_eq!(c[i * ldc + j].to_bits(), c0[i * ldc + j].to_bits());
                            }
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert_eq!(cases, 8 * 4 * 2 * 2);
    }
}
