//! Products of a few rows by a weight stored `[k, n]` (a plain `matmul`, or a model's
//! transposed copy of a linear weight) on x86-64 with AVX-512 or AVX2 + FMA: the outer-product
//! form that gemm's kernels use, without gemm's packing of the weight on every call. With
//! AVX-512 each tile keeps 8 rows by 48 columns (24 accumulators) in registers; every step
//! loads 48 weights of one row of `b` and multiplies them by one broadcast element of each of
//! the 8 rows of `a`, so no output ends in a sum across lanes (the cost that holds the `[n, k]`
//! dot products of `matmul_rows` back at short rows). AVX2 has 16 registers of 8 lanes: tiles
//! of 6 rows by 16 columns (12 accumulators), f16 weights widened by F16C as they load. Both
//! take f32, f16 and bf16 weights (half the bytes streamed). The first tile of rows over a column panel reads
//! it from memory and asks for the weight rows a few steps ahead; the later tiles find the
//! panel in the core's L2 and ask for the next panel meanwhile, so the memory never idles.

use std::arch::x86_64::*;

use super::elementwise::unary_in_place;
use super::matmul_rows_avx512::{Bf16, Weight, F16};
use super::par;
use crate::ops::UnaryOp;

/// Weight rows ahead that the first tile of rows asks for.
const AHEAD: usize = 32;

/// A tile kernel over weights of `W`: its rows and columns, and the function running one
/// tile of `rows` (at most `rows`) with a fetch mode ([`NONE`], [`AHEAD_ROWS`] or
/// [`NEXT_PANEL`]).
#[derive(Clone, Copy)]
struct Kernel<W> {
    rows: usize,
    cols: usize,
    /// # Safety
    /// As [`Tile`] describes, with the kernel's instructions present.
    run: unsafe fn(&Tile<W>, usize, u8),
}

/// 8 x 48 in AVX-512 (with BW and VL, for the masked loads of 16-bit weights).
fn avx512<W: Weight>() -> Kernel<W> {
    Kernel {
        rows: 8,
        cols: 48,
        run: avx512::tile::<W>,
    }
}

/// 6 x 16 in AVX2 + FMA (and F16C, which every AVX2 processor has, for f16 weights).
fn avx2<W: Weight>() -> Kernel<W> {
    Kernel {
        rows: 6,
        cols: 16,
        run: avx2::tile::<W>,
    }
}

/// Whether the AVX2 kernels run here.
fn has_avx2() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c")
}

/// Whether the AVX-512 kernels run here (and `GPUKIT_CPU_AVX2=1` does not ask for the AVX2
/// paths).
fn has_avx512() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && !super::forced_avx2()
}

/// The kernel this CPU runs for weights of `W`.
fn kernel<W: Weight>() -> Option<Kernel<W>> {
    if has_avx512() {
        Some(avx512())
    } else if has_avx2() {
        Some(avx2())
    } else {
        None
    }
}

/// Whether this CPU runs [`product`] and [`product_half`] (AVX-512, or AVX2 with FMA and
/// F16C; elsewhere half-precision weights keep their `[n, k]` dot products).
pub(super) fn available() -> bool {
    kernel::<f32>().is_some()
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
/// `accumulate` adds to `c` (the bias already there), and `act` then applies to each column
/// panel by the thread that made it, while it is in that core's cache.
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
    act: Option<UnaryOp>,
) {
    if let Some(kernel) = kernel() {
        product_with(kernel, m, n, k, a, ars, b, brs, c, ldc, accumulate, act);
    }
}

/// [`product`] by f16 weights (or bf16 with `bf16`) stored `[k, n]` as their bits, widened as
/// they are loaded: half the bytes of an f32 weight streamed. The caller has checked
/// [`half_available`] and the extents as for [`product`].
#[allow(clippy::too_many_arguments)]
pub(super) fn product_half(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    b: &[u16],
    brs: usize,
    bf16: bool,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    act: Option<UnaryOp>,
) {
    // SAFETY: F16 and Bf16 are transparent over u16.
    unsafe {
        if bf16 {
            let b: &[Bf16] = std::slice::from_raw_parts(b.as_ptr().cast(), b.len());
            if let Some(kernel) = kernel() {
                product_with(kernel, m, n, k, a, ars, b, brs, c, ldc, accumulate, act);
            }
        } else {
            let b: &[F16] = std::slice::from_raw_parts(b.as_ptr().cast(), b.len());
            if let Some(kernel) = kernel() {
                product_with(kernel, m, n, k, a, ars, b, brs, c, ldc, accumulate, act);
            }
        }
    }
}

/// [`product`] with a given kernel, which the CPU must run.
#[allow(clippy::too_many_arguments)]
fn product_with<W: Weight + Sync>(
    kernel: Kernel<W>,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    ars: usize,
    b: &[W],
    brs: usize,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    act: Option<UnaryOp>,
) {
    if m == 0 || n == 0 {
        return;
    }
    let Kernel {
        rows: tile_rows,
        cols: panel_cols,
        run,
    } = kernel;
    let tiles = m.div_ceil(tile_rows);
    // Panels start where the weight's rows are 64-byte aligned, when every row is aligned
    // alike (a row stride of whole lines): a row of 48 weights then spans three lines, not
    // four. Host buffers start 16 bytes into a line (the allocator's alignment), so the first
    // panel is narrower. (An AVX2 panel of halves is 32 bytes: it starts 32 bytes on.)
    let size = std::mem::size_of::<W>();
    let lead = match (b.as_ptr() as usize % 64, (brs * size) % 64) {
        (0, _) | (_, 1..) => 0,
        (off, 0) => (((64 - off) / size) % panel_cols).min(n),
    };
    let start = |p: usize| {
        if p == 0 {
            0
        } else {
            lead + (p - usize::from(lead > 0)) * panel_cols
        }
    };
    let panels = usize::from(lead > 0) + (n - lead).div_ceil(panel_cols);
    // One task per thread, in whole panels.
    let per = panels.div_ceil(par::threads().max(1)).max(1);
    let out = Out(c.as_mut_ptr());
    let task = move |i: usize| {
        let (p0, end) = (i * per, ((i + 1) * per).min(panels));
        for p in p0..end {
            let j = start(p);
            let cols = if p == 0 && lead > 0 {
                lead
            } else {
                panel_cols.min(n - j)
            };
            let next = if p + 1 < end { start(p + 1) - j } else { 0 };
            for t in 0..tiles {
                let (r0, rows) = (t * tile_rows, tile_rows.min(m - t * tile_rows));
                // SAFETY: the caller checked the extents of `a`, `b` and `c` and that the CPU
                // runs the kernel; lanes past `cols` are masked off; this task alone writes
                // columns `j..j + cols`.
                unsafe {
                    let tile = Tile {
                        x: a.as_ptr().add(r0 * ars),
                        ars,
                        w: b.as_ptr().add(j),
                        brs,
                        k,
                        cols,
                        dst: out.get().add(r0 * ldc + j),
                        ldc,
                        accumulate,
                        next,
                    };
                    let fetch = match (t, next) {
                        (0, _) => AHEAD_ROWS,
                        (_, 1..) => NEXT_PANEL,
                        _ => NONE,
                    };
                    run(&tile, rows, fetch)
                }
            }
            if let Some(op) = act {
                for r in 0..m {
                    // SAFETY: row `r`'s columns `j..j + cols` lie inside `c` (the caller's
                    // contract), and only this task touches them.
                    let row =
                        unsafe { std::slice::from_raw_parts_mut(out.get().add(r * ldc + j), cols) };
                    unary_in_place(op, row);
                }
            }
        }
    };
    par::for_each(panels.div_ceil(per), task);
}

/// One tile's operands: rows of `a` from `x` (row stride `ars`), `cols` columns of the weight
/// from `w` (row stride `brs`) and of the output from `dst` (row stride `ldc`). Safety
/// contract of a kernel's `run`: `rows` rows of `k` elements readable from `x`, every
/// column up to `cols` of the `k` weight rows and of the `rows` output rows inside its
/// allocation.
struct Tile<W> {
    x: *const f32,
    ars: usize,
    w: *const W,
    brs: usize,
    k: usize,
    cols: usize,
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

/// Asks for the `lines` cache lines from `p` (any address: a prefetch never faults), into L1
/// (`T0`) or L2.
///
/// # Safety
/// SSE must be present (every x86-64 CPU).
#[inline(always)]
unsafe fn prefetch<const T0: bool, W>(p: *const W, lines: usize) {
    for l in 0..lines {
        let at = (p as *const i8).wrapping_add(64 * l);
        // SAFETY: a prefetch reads nothing architecturally.
        unsafe {
            if T0 {
                _mm_prefetch::<_MM_HINT_T0>(at);
            } else {
                _mm_prefetch::<_MM_HINT_T1>(at);
            }
        }
    }
}

mod avx512 {
    use super::*;

    /// Runs a tile of `rows` (1 to 8) rows.
    ///
    /// # Safety
    /// AVX-512F, BW and VL must be present; [`Tile`]'s contract.
    pub(super) unsafe fn tile<W: Weight>(t: &Tile<W>, rows: usize, fetch: u8) {
        // SAFETY: the caller's contract.
        unsafe {
            match fetch {
                AHEAD_ROWS => by_rows::<W, AHEAD_ROWS>(t, rows),
                NEXT_PANEL => by_rows::<W, NEXT_PANEL>(t, rows),
                _ => by_rows::<W, NONE>(t, rows),
            }
        }
    }

    /// # Safety
    /// As [`tile`].
    unsafe fn by_rows<W: Weight, const FETCH: u8>(t: &Tile<W>, rows: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match rows {
                1 => run::<W, 1, FETCH>(t),
                2 => run::<W, 2, FETCH>(t),
                3 => run::<W, 3, FETCH>(t),
                4 => run::<W, 4, FETCH>(t),
                5 => run::<W, 5, FETCH>(t),
                6 => run::<W, 6, FETCH>(t),
                7 => run::<W, 7, FETCH>(t),
                _ => run::<W, 8, FETCH>(t),
            }
        }
    }

    /// The lanes of `mask` of 16 weights from `p` as f32 (the others 0).
    ///
    /// # Safety
    /// AVX-512F, BW and VL must be present; the masked-in elements readable.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline]
    unsafe fn load<W: Weight>(mask: __mmask16, p: *const W) -> __m512 {
        // SAFETY: the caller's contract; f16 and bf16 elements are 2 bytes, f32 ones 4, and
        // a masked-off element is not read.
        unsafe {
            match W::KIND {
                0 => _mm512_maskz_loadu_ps(mask, p.cast()),
                1 => _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mask, p.cast())),
                _ => _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                    _mm256_maskz_loadu_epi16(mask, p.cast()),
                ))),
            }
        }
    }

    /// `dst[i * ldc + j] (+)= sum_e x[i * ars + e] * w[e * brs + j]` for `i < R`, `j < cols`.
    ///
    /// # Safety
    /// As [`tile`].
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    #[inline(never)]
    unsafe fn run<W: Weight, const R: usize, const FETCH: u8>(t: &Tile<W>) {
        // A weight row's 48 values span 3 lines in f32, 2 (or 3, unaligned) in f16 or bf16.
        let lines = if W::KIND == 0 { 3 } else { 2 };
        let mut acc = [[_mm512_setzero_ps(); 3]; R];
        let xs: [*const f32; R] = std::array::from_fn(|i| t.x.wrapping_add(i * t.ars));
        let masks: [__mmask16; 3] = std::array::from_fn(|v| {
            let live = t.cols.saturating_sub(16 * v).min(16);
            ((1u32 << live) - 1) as __mmask16
        });
        let [m0, m1, m2] = masks;
        let mut w = t.w;
        for e in 0..t.k {
            // SAFETY: this function's contract; the rows ahead are computed with wrapping
            // arithmetic, as a prefetch may point past the weight.
            unsafe {
                if FETCH == AHEAD_ROWS {
                    prefetch::<true, W>(w.wrapping_add(AHEAD * t.brs), lines);
                } else if FETCH == NEXT_PANEL {
                    prefetch::<false, W>(w.wrapping_add(t.next), lines);
                }
                let wv = [
                    load(m0, w),
                    load(m1, w.wrapping_add(16)),
                    load(m2, w.wrapping_add(32)),
                ];
                for (acc, x) in acc.iter_mut().zip(xs) {
                    let xv = _mm512_set1_ps(*x.add(e));
                    for (a, wv) in acc.iter_mut().zip(wv) {
                        *a = _mm512_fmadd_ps(xv, wv, *a);
                    }
                }
                w = w.wrapping_add(t.brs);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (v, (&a, mask)) in acc.iter().zip(masks).enumerate() {
                // SAFETY: this function's contract: the masked-in lanes of row `i`.
                unsafe {
                    let d = t.dst.wrapping_add(i * t.ldc + 16 * v);
                    let r = if t.accumulate {
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

mod avx2 {
    use super::*;

    /// Runs a tile of `rows` (1 to 6) rows; a panel narrower than 16 columns takes masked
    /// loads and stores, a whole one plain ones.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be present; [`Tile`]'s contract.
    pub(super) unsafe fn tile<W: Weight>(t: &Tile<W>, rows: usize, fetch: u8) {
        // SAFETY: the caller's contract.
        unsafe {
            match (fetch, t.cols >= 16) {
                (AHEAD_ROWS, true) => by_rows::<W, AHEAD_ROWS, false>(t, rows),
                (NEXT_PANEL, true) => by_rows::<W, NEXT_PANEL, false>(t, rows),
                (_, true) => by_rows::<W, NONE, false>(t, rows),
                (AHEAD_ROWS, false) => by_rows::<W, AHEAD_ROWS, true>(t, rows),
                (NEXT_PANEL, false) => by_rows::<W, NEXT_PANEL, true>(t, rows),
                (_, false) => by_rows::<W, NONE, true>(t, rows),
            }
        }
    }

    /// # Safety
    /// As [`tile`].
    unsafe fn by_rows<W: Weight, const FETCH: u8, const MASKED: bool>(t: &Tile<W>, rows: usize) {
        // SAFETY: the caller's contract.
        unsafe {
            match rows {
                1 => run::<W, 1, FETCH, MASKED>(t),
                2 => run::<W, 2, FETCH, MASKED>(t),
                3 => run::<W, 3, FETCH, MASKED>(t),
                4 => run::<W, 4, FETCH, MASKED>(t),
                5 => run::<W, 5, FETCH, MASKED>(t),
                _ => run::<W, 6, FETCH, MASKED>(t),
            }
        }
    }

    /// 8 weights from `p` as f32.
    ///
    /// # Safety
    /// AVX2 and F16C must be present; 8 elements readable at `p`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load8<W: Weight>(p: *const W) -> __m256 {
        // SAFETY: the caller's contract; f16 and bf16 elements are 2 bytes, f32 ones 4.
        unsafe {
            match W::KIND {
                0 => _mm256_loadu_ps(p.cast()),
                1 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                _ => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128(p.cast()),
                ))),
            }
        }
    }

    /// The first `live` (at most 8) weights from `p` as f32, the other lanes 0; `mask` has
    /// those lanes set (for f32, read by a masked load; 16-bit elements are copied first, as
    /// AVX2 has no masked load of them).
    ///
    /// # Safety
    /// AVX2 and F16C must be present; `live` elements readable at `p`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    unsafe fn load_live<W: Weight>(p: *const W, live: usize, mask: __m256i) -> __m256 {
        // SAFETY: the caller's contract: only the live elements are read.
        unsafe {
            if W::KIND == 0 {
                _mm256_maskload_ps(p.cast(), mask)
            } else {
                let mut bits = [0u16; 8];
                std::ptr::copy_nonoverlapping(p.cast::<u16>(), bits.as_mut_ptr(), live);
                load8(bits.as_ptr().cast::<W>())
            }
        }
    }

    /// `dst[i * ldc + j] (+)= sum_e x[i * ars + e] * w[e * brs + j]` for `i < R`, `j < cols`.
    ///
    /// # Safety
    /// As [`tile`]; without `MASKED`, `cols` >= 16.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline(never)]
    unsafe fn run<W: Weight, const R: usize, const FETCH: u8, const MASKED: bool>(t: &Tile<W>) {
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        let xs: [*const f32; R] = std::array::from_fn(|i| t.x.wrapping_add(i * t.ars));
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let live: [usize; 2] = std::array::from_fn(|v| t.cols.saturating_sub(8 * v).min(8));
        let masks: [__m256i; 2] =
            std::array::from_fn(|v| _mm256_cmpgt_epi32(_mm256_set1_epi32(live[v] as i32), lanes));
        let mut w = t.w;
        for e in 0..t.k {
            // SAFETY: as in the AVX-512 kernel; without MASKED 16 weights are readable.
            unsafe {
                if FETCH == AHEAD_ROWS {
                    prefetch::<true, W>(w.wrapping_add(AHEAD * t.brs), 1);
                } else if FETCH == NEXT_PANEL {
                    prefetch::<false, W>(w.wrapping_add(t.next), 1);
                }
                let wv = if MASKED {
                    [
                        load_live(w, live[0], masks[0]),
                        load_live(w.wrapping_add(8), live[1], masks[1]),
                    ]
                } else {
                    [load8(w), load8(w.wrapping_add(8))]
                };
                for (acc, x) in acc.iter_mut().zip(xs) {
                    let xv = _mm256_broadcast_ss(&*x.add(e));
                    for (a, wv) in acc.iter_mut().zip(wv) {
                        *a = _mm256_fmadd_ps(xv, wv, *a);
                    }
                }
                w = w.wrapping_add(t.brs);
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            for (v, &a) in acc.iter().enumerate() {
                // SAFETY: this function's contract: the masked-in lanes of row `i`.
                unsafe {
                    let d = t.dst.wrapping_add(i * t.ldc + 8 * v);
                    let r = match (t.accumulate, MASKED) {
                        (false, _) => a,
                        (true, false) => _mm256_add_ps(a, _mm256_loadu_ps(d)),
                        (true, true) => _mm256_add_ps(a, _mm256_maskload_ps(d, masks[v])),
                    };
                    if MASKED {
                        _mm256_maskstore_ps(d, masks[v], r);
                    } else {
                        _mm256_storeu_ps(d, r);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "matmul_kn_tests.rs"]
mod tests;
