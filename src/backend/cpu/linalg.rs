//! Products on the CPU: matmul, conv2d (as im2col then a product) and quantized matmul. The
//! product itself is the `gemm` crate's: packed, cache-blocked micro-kernels chosen at run time
//! (AVX2/FMA or AVX-512 on x86-64, NEON on aarch64, SIMD128 in wasm), threaded with rayon
//! natively. gpukit adds the batching, the transposes (as strides), the bias and activation
//! epilogue, and the f16 rounding of `Precision::F16`.

use super::elementwise::unary_in_place;
use super::nn::dequant_rows;
use super::par;
use crate::error::{Error, Result};
use crate::info::Backend;
use crate::ops::conv::ConvSpec;
use crate::ops::matmul::{MatmulSpec, Precision};
use crate::quant::QuantParts;

use super::CpuStorage;

/// A strided matrix: element `(i, j)` is `data[i * rs + j * cs]`.
#[derive(Clone, Copy)]
pub(super) struct View<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl View<'_> {
    /// Whether every element of a `rows x cols` matrix lies inside `data`.
    fn fits(&self, rows: usize, cols: usize) -> bool {
        rows == 0 || cols == 0 || (rows - 1) * self.rs + (cols - 1) * self.cs < self.data.len()
    }
}

fn internal(what: &str) -> Error {
    Error::Backend {
        backend: Backend::Cpu,
        detail: format!("internal error: {what}"),
    }
}

/// `c = a b` (or `c += a b` with `accumulate`), `a` of `m x k`, `b` of `k x n`, `c` row-major
/// with row stride `ldc`. `threads` > 1 lets gemm split the work.
#[allow(clippy::too_many_arguments)]
pub(super) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: View<'_>,
    b: View<'_>,
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    threads: usize,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if (m - 1) * ldc + n > c.len() || n > ldc {
        return Err(internal("matmul output extent"));
    }
    if k == 0 {
        if !accumulate {
            for row in c.chunks_mut(ldc).take(m) {
                row[..n].fill(0.0);
            }
        }
        return Ok(());
    }
    if !a.fits(m, k) || !b.fits(k, n) {
        return Err(internal("matmul operand extent"));
    }
    #[cfg(web)]
    {
        // The SIMD128 kernels run exactly when this module was built with simd128, so a
        // build without it measures gemm's scalar kernels (see `gpukit-bench` in Node).
        gemm::set_wasm_simd128(cfg!(target_feature = "simd128"));
    }
    #[cfg(native)]
    let parallelism = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    #[cfg(web)]
    let parallelism = {
        let _ = threads;
        gemm::Parallelism::None
    };
    // SAFETY: every element gemm touches was checked to lie inside its slice above
    // (`fits` and the output extent), strides are as described, and `c` is exclusively
    // borrowed, so it aliases neither operand.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.data.as_ptr(),
            a.cs as isize,
            a.rs as isize,
            b.data.as_ptr(),
            b.cs as isize,
            b.rs as isize,
            1.0f32,
            1.0f32,
            false,
            false,
            false,
            parallelism,
        );
    }
    Ok(())
}

/// Rounds to f16 and back, as the GPU's f16 path reads its inputs.
fn round_f16(v: &[f32]) -> Vec<f32> {
    v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
}

/// Rounds to bf16 and back, as CUDA's bf16 path reads its inputs.
fn round_bf16(v: &[f32]) -> Vec<f32> {
    v.iter()
        .map(|&x| half::bf16::from_f32(x).to_f32())
        .collect()
}

/// `[batch, m, n]` products with the bias and activation of `spec`.
pub(super) fn matmul(
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    spec: MatmulSpec,
) -> Result<Vec<f32>> {
    let d = spec.dims;
    let (rounded_a, rounded_b);
    let (a, b) = match spec.precision {
        Precision::F16 => {
            rounded_a = round_f16(a);
            rounded_b = round_f16(b);
            (&rounded_a[..], &rounded_b[..])
        }
        Precision::Bf16 => {
            rounded_a = round_bf16(a);
            rounded_b = round_bf16(b);
            (&rounded_a[..], &rounded_b[..])
        }
        Precision::F32 | Precision::Tf32 => (a, b),
    };
    let (ars, acs) = if spec.transpose_a { (1, d.m) } else { (d.k, 1) };
    let (brs, bcs) = if spec.transpose_b { (1, d.k) } else { (d.n, 1) };
    let mn = d.m * d.n;
    let mut out = vec![0.0f32; d.batch * mn];
    if mn == 0 {
        return Ok(out);
    }
    if let Some(bias) = bias {
        for row in out.chunks_exact_mut(d.n) {
            row.copy_from_slice(&bias[..d.n]);
        }
    }
    let entry = |e: usize, c: &mut [f32], threads: usize| {
        let va = View {
            data: a.get(e * d.a_stride..).unwrap_or(&[]),
            rs: ars,
            cs: acs,
        };
        let vb = View {
            data: b.get(e * d.b_stride..).unwrap_or(&[]),
            rs: brs,
            cs: bcs,
        };
        sgemm(d.m, d.n, d.k, va, vb, c, d.n, bias.is_some(), threads)
    };
    // Many small products: one per thread task. Otherwise gemm threads each product.
    let small = d.m * d.n * d.k < 1 << 18;
    if d.batch > 1 && small {
        par::try_chunks_mut(&mut out, mn, |start, c| entry(start / mn, c, 1))?;
    } else {
        for (e, c) in out.chunks_exact_mut(mn).enumerate() {
            entry(e, c, par::threads())?;
        }
    }
    if let Some(act) = spec.activation {
        unary_in_place(act.as_unary(), &mut out);
    }
    Ok(out)
}

/// Elements of an im2col block above which conv2d works through output rows in tiles.
const IM2COL_BUDGET: usize = 1 << 22;

/// conv2d as, per image and group, `out[og, oh*ow] = w[og, cg*kh*kw] x cols[cg*kh*kw, oh*ow]`.
pub(super) fn conv2d(x: &[f32], w: &[f32], bias: Option<&[f32]>, s: ConvSpec) -> Result<Vec<f32>> {
    let o = &s.opts;
    let (cg, og) = (s.c / o.groups, s.o / o.groups);
    let depth = cg * s.kh * s.kw;
    let plane = s.oh * s.ow;
    let mut out = vec![0.0f32; s.n * s.o * plane];
    if let Some(b) = bias {
        for (i, p) in out.chunks_exact_mut(plane.max(1)).enumerate() {
            p.fill(b[i % s.o]);
        }
    }
    let pointwise = s.kh == 1
        && s.kw == 1
        && o.stride == [1, 1]
        && o.padding == [0, 0]
        && (s.oh, s.ow) == (s.h, s.w);
    let tile_rows = (IM2COL_BUDGET / (depth * s.ow).max(1)).clamp(1, s.oh.max(1));
    let mut cols = Vec::new();
    for n in 0..s.n {
        for g in 0..o.groups {
            let wg = View {
                data: &w[g * og * depth..],
                rs: depth,
                cs: 1,
            };
            let out_g = &mut out[(n * s.o + g * og) * plane..];
            if pointwise {
                let xg = View {
                    data: &x[(n * s.c + g * cg) * s.h * s.w..],
                    rs: s.h * s.w,
                    cs: 1,
                };
                sgemm(og, plane, depth, wg, xg, out_g, plane, true, par::threads())?;
                continue;
            }
            for oy0 in (0..s.oh).step_by(tile_rows) {
                let rows = tile_rows.min(s.oh - oy0);
                let width = rows * s.ow;
                cols.clear();
                cols.resize(depth * width, 0.0);
                im2col(x, &s, n, g * cg, oy0, rows, &mut cols);
                let cv = View {
                    data: &cols,
                    rs: width,
                    cs: 1,
                };
                let dst = &mut out_g[oy0 * s.ow..];
                sgemm(og, width, depth, wg, cv, dst, plane, true, par::threads())?;
            }
        }
    }
    Ok(out)
}

/// Fills `cols[(c*kh + ky)*kw + kx, (oy - oy0)*ow + ox]` with the input pixel under that tap
/// (zero in the padding), for output rows `oy0..oy0 + rows`.
fn im2col(x: &[f32], s: &ConvSpec, n: usize, c0: usize, oy0: usize, rows: usize, cols: &mut [f32]) {
    let o = &s.opts;
    let width = rows * s.ow;
    par::rows_each_mut(cols, width, |r, dst| {
        let (c, rem) = (r / (s.kh * s.kw), r % (s.kh * s.kw));
        let (ky, kx) = (rem / s.kw, rem % s.kw);
        let src = &x[(n * s.c + c0 + c) * s.h * s.w..][..s.h * s.w];
        for (yy, line) in dst.chunks_exact_mut(s.ow).enumerate() {
            let iy =
                ((oy0 + yy) * o.stride[0] + ky * o.dilation[0]) as isize - o.padding[0] as isize;
            if iy < 0 || iy >= s.h as isize {
                line.fill(0.0);
                continue;
            }
            let src_row = &src[iy as usize * s.w..][..s.w];
            for (ox, v) in line.iter_mut().enumerate() {
                let ix = (ox * o.stride[1] + kx * o.dilation[1]) as isize - o.padding[1] as isize;
                *v = if ix < 0 || ix >= s.w as isize {
                    0.0
                } else {
                    src_row[ix as usize]
                };
            }
        }
    });
}

/// Weight rows dequantized at a time by `matmul_quant`.
const QUANT_ROWS: usize = 64;

/// `x[m, k] * w[n, k]^T` with `w` quantized: blocks of weight rows are dequantized into a
/// small buffer (in parallel) and multiplied at once, so the f32 weights never exist whole.
pub(super) fn matmul_quant(x: &[f32], w: QuantParts<'_, CpuStorage>, m: usize) -> Result<Vec<f32>> {
    let (n, k) = (w.rows, w.cols);
    // Computed transposed, out^T[n, m] = w x^T, so each task owns whole rows of the result.
    let mut out_t = vec![0.0f32; n * m];
    par::try_chunks_mut(&mut out_t, (QUANT_ROWS * m).max(1), |start, dst| {
        let r0 = start / m.max(1);
        let rows = dst.len() / m.max(1);
        let mut deq = vec![0.0f32; rows * k];
        dequant_rows(&w, r0, &mut deq);
        let wv = View {
            data: &deq,
            rs: k,
            cs: 1,
        };
        let xv = View {
            data: x,
            rs: 1,
            cs: k,
        };
        sgemm(rows, m, k, wv, xv, dst, m, false, 1)
    })?;
    let mut out = vec![0.0f32; m * n];
    for (j, col) in out_t.chunks_exact(m.max(1)).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
    Ok(out)
}
