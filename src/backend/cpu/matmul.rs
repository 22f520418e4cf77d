//! Products on the CPU. The product itself is the `gemm` crate's: packed, cache-blocked
//! micro-kernels chosen at run time (AVX2/FMA or AVX-512 on x86-64, NEON on aarch64, SIMD128 in
//! wasm), threaded with rayon natively. gpukit adds the batching, the transposes (as strides), the
//! bias and activation epilogue, and the f16 rounding of `Precision::F16`.

use super::elementwise::unary_in_place;
use super::par;
use crate::error::{Error, Result};
use crate::info::Backend;
use crate::ops::matmul::{MatmulSpec, Precision};
use crate::ops::UnaryOp;

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

pub(super) fn internal(what: &str) -> Error {
    Error::Backend {
        backend: Backend::Cpu,
        detail: format!("internal error: {what}"),
    }
}

/// `c = act(a b)` (or `c = act(c + a b)` with `accumulate`), `a` of `m x k`, `b` of `k x n`,
/// `c` row-major with row stride `ldc`. `threads` > 1 lets gemm split the work.
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
    act: Option<UnaryOp>,
) -> Result<()> {
    if m == 0 || n == 0 {
        return Ok(());
    }
    if (m - 1) * ldc + n > c.len() || n > ldc {
        return Err(internal("matmul output extent"));
    }
    let c = &mut c[..(m - 1) * ldc + n];
    if k == 0 {
        if !accumulate {
            for row in c.chunks_mut(ldc) {
                row[..n].fill(0.0);
            }
        }
        finish(c, n, ldc, act);
        return Ok(());
    }
    if !a.fits(m, k) || !b.fits(k, n) {
        return Err(internal("matmul operand extent"));
    }
    if m <= super::matmul_rows::MAX_ROWS && k >= super::matmul_rows::MIN_K && a.cs == 1 && b.rs == 1
    {
        // A few rows by a weight stored [n, k]: dot products of contiguous rows, unpacked.
        super::matmul_rows::product(m, n, k, a.data, a.rs, b.data, b.cs, c, ldc, accumulate);
        finish(c, n, ldc, act);
        return Ok(());
    }
    #[cfg(target_arch = "x86_64")]
    if m <= super::matmul_rows::MAX_ROWS && a.cs == 1 && b.cs == 1 && super::matmul_kn::available()
    {
        // A few rows by a weight stored [k, n]: outer products from the weight as stored, the
        // activation applied to each column panel as it is done.
        super::matmul_kn::product(m, n, k, a.data, a.rs, b.data, b.rs, c, ldc, accumulate, act);
        return Ok(());
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
    finish(c, n, ldc, act);
    Ok(())
}

/// Applies `act` to the `n` leading columns of every row (stride `ldc`) of `c`: in one run
/// over threads when the rows are contiguous.
fn finish(c: &mut [f32], n: usize, ldc: usize, act: Option<UnaryOp>) {
    let Some(op) = act else { return };
    if ldc == n {
        unary_in_place(op, c);
    } else {
        for row in c.chunks_mut(ldc) {
            unary_in_place(op, &mut row[..n]);
        }
    }
}

/// Rounds `v` in place as `precision` reads a product's inputs (f16 or bf16 and back; f32
/// and TF32 keep them).
pub(super) fn round_inputs(precision: Precision, v: &mut [f32]) {
    match precision {
        Precision::F16 => v
            .iter_mut()
            .for_each(|x| *x = half::f16::from_f32(*x).to_f32()),
        Precision::Bf16 => v
            .iter_mut()
            .for_each(|x| *x = half::bf16::from_f32(*x).to_f32()),
        Precision::F32 | Precision::Tf32 => {}
    }
}

/// `v` as `precision` reads it: itself for f32 and TF32, else a rounded copy (f16 as the GPU's
/// f16 path reads its inputs, bf16 as CUDA's bf16 path does).
pub(super) fn rounded(precision: Precision, v: &[f32]) -> std::borrow::Cow<'_, [f32]> {
    match precision {
        Precision::F32 | Precision::Tf32 => std::borrow::Cow::Borrowed(v),
        Precision::F16 | Precision::Bf16 => {
            let mut r = v.to_vec();
            round_inputs(precision, &mut r);
            std::borrow::Cow::Owned(r)
        }
    }
}

/// `[m, n]` = `a [m, k]` times the f16 or bf16 weight `[n, k]` transposed or `[k, n]` (packed
/// two to a word), with the bias and activation of `spec`: the shapes
/// `BackendImpl::matmul_takes_half_weights` admits.
pub(super) fn matmul_half_weight(
    a: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    spec: MatmulSpec,
) -> Result<Vec<f32>> {
    let d = spec.dims;
    let halves: &[u16] = bytemuck::cast_slice(w);
    if d.batch != 1 || spec.transpose_a || a.len() < d.m * d.k || halves.len() < d.n * d.k {
        return Err(internal("half-weight matmul shape"));
    }
    let mut out = accumulators(d.m, d.n, bias)?;
    let bf16 = spec.weight == crate::DType::BF16;
    let act = spec.activation.map(|a| a.as_unary());
    if d.m * d.n == 0 {
        return Ok(out);
    }
    if spec.transpose_b {
        super::matmul_rows::product_half(
            d.m,
            d.n,
            d.k,
            a,
            d.k,
            halves,
            d.k,
            bf16,
            &mut out,
            d.n,
            bias.is_some(),
        );
        finish(&mut out, d.n, d.n, act);
        return Ok(out);
    }
    #[cfg(target_arch = "x86_64")]
    if super::matmul_kn::available() {
        let acc = bias.is_some();
        let (m, n, k) = (d.m, d.n, d.k);
        super::matmul_kn::product_half(m, n, k, a, k, halves, n, bf16, &mut out, n, acc, act);
        return Ok(out);
    }
    Err(internal(
        "half-weight matmul by a [k, n] weight without AVX-512 or AVX2",
    ))
}

/// `rows` rows of `n` values that a product adds to: `bias` in every row (written once, with
/// no zeroing first), or zeros.
fn accumulators(rows: usize, n: usize, bias: Option<&[f32]>) -> Result<Vec<f32>> {
    Ok(match bias {
        Some(bias) => {
            let row = bias.get(..n).ok_or_else(|| internal("bias length"))?;
            let mut out = Vec::with_capacity(rows * n);
            for _ in 0..rows {
                out.extend_from_slice(row);
            }
            out
        }
        None => vec![0.0; rows * n],
    })
}

/// `[batch, m, n]` products with the bias and activation of `spec`.
pub(super) fn matmul(
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    spec: MatmulSpec,
) -> Result<Vec<f32>> {
    let d = spec.dims;
    let (a, b) = (rounded(spec.precision, a), rounded(spec.precision, b));
    let (a, b) = (&a[..], &b[..]);
    let (ars, acs) = if spec.transpose_a { (1, d.m) } else { (d.k, 1) };
    let (brs, bcs) = if spec.transpose_b { (1, d.k) } else { (d.n, 1) };
    let mn = d.m * d.n;
    let mut out = accumulators(d.batch * d.m, d.n, bias)?;
    if mn == 0 {
        return Ok(out);
    }
    let act = spec.activation.map(|a| a.as_unary());
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
        sgemm(d.m, d.n, d.k, va, vb, c, d.n, bias.is_some(), threads, act)
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
    Ok(out)
}
