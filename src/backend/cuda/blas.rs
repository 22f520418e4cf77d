//! Products on cuBLAS: matmul (f32, TF32, f16 and bf16 through `cublasGemmStridedBatchedEx`),
//! conv2d as im2col then a product per group, and the quantized matmul of many rows. gpukit's
//! row-major `C = op(A) op(B)` is cuBLAS's column-major `C^T = op(B)^T op(A)^T`, so operands
//! are passed swapped and never copied; transposes are cuBLAS flags, broadcast batch entries
//! a stride of zero.

use std::ffi::c_void;

use cudarc::cublas::sys::{
    cublasComputeType_t as Compute, cublasGemmAlgo_t, cublasOperation_t as Op, cudaDataType as Data,
};

use super::module::Entry;
use super::ops::{opt, p, u, Im2colParams};
use super::{errors, Arg, CudaBackend, CudaStorage};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::conv::ConvSpec;
use crate::ops::matmul::{MatmulSpec, Precision};
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantParts};

/// Elements of an im2col block above which conv2d works through output rows in tiles.
const IM2COL_BUDGET: u64 = 1 << 24;

/// Rows of x from which the quantized matmul dequantizes the weights and uses cuBLAS instead of
/// the GEMV kernel (which dequantizes per row of x).
const QGEMV_MAX_ROWS: usize = 8;

fn int(what: &str, v: usize) -> Result<i32> {
    i32::try_from(v).map_err(|_| Error::LimitExceeded {
        what: format!("matmul {what}"),
        limit: "cuBLAS 32-bit dimension",
        needed: v as u64,
        max: i32::MAX as u64,
    })
}

/// One strided-batched product in cuBLAS's column-major terms.
struct Gemm {
    op_a: Op,
    op_b: Op,
    m: usize,
    n: usize,
    k: usize,
    a: u64,
    lda: usize,
    stride_a: usize,
    b: u64,
    ldb: usize,
    stride_b: usize,
    c: u64,
    ldc: usize,
    stride_c: usize,
    batch: usize,
    data: Data,
    /// The type of C.
    out: Data,
    compute: Compute,
}

impl CudaBackend {
    fn gemm(&self, g: &Gemm) -> Result<()> {
        let (alpha, beta) = (1.0f32, 0.0f32);
        // The stream first: it waits for another thread's capture, which must not happen
        // while this thread holds the handle the capture may need.
        let stream = self.cu_stream();
        let blas = self.cublas();
        self.bind()?;
        let handle = *blas.handle();
        // SAFETY: the handle is this backend's; pointers are device buffers of this context,
        // large enough for the dimensions and strides (the callers allocate them so), and
        // alpha/beta are host scalars (the handle's default pointer mode).
        unsafe {
            cudarc::cublas::result::set_stream(handle, stream as _).map_err(errors::blas)?;
            cudarc::cublas::result::gemm_strided_batched_ex(
                handle,
                g.op_a,
                g.op_b,
                int("m", g.m)?,
                int("n", g.n)?,
                int("k", g.k)?,
                &alpha as *const f32 as *const c_void,
                g.a as *const c_void,
                g.data,
                int("lda", g.lda)?,
                g.stride_a as i64,
                g.b as *const c_void,
                g.data,
                int("ldb", g.ldb)?,
                g.stride_b as i64,
                &beta as *const f32 as *const c_void,
                g.c as *mut c_void,
                g.out,
                int("ldc", g.ldc)?,
                g.stride_c as i64,
                int("batch", g.batch)?,
                g.compute,
                cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(errors::blas)
    }

    /// `n` f32s of `x` as 16-bit floats (f16 or bf16) in a new buffer.
    fn narrow(&self, x: &CudaStorage, n: usize, bf16: bool) -> Result<CudaStorage> {
        let out = self.alloc_bytes(n as u64 * 2)?;
        if n > 0 {
            let entry = if bf16 { Entry::ToBf16 } else { Entry::ToF16 };
            self.launch_1d(entry, n as u64, &[p(x), p(&out), u(n)])?;
        }
        Ok(out)
    }

    /// `out = act(out + bias)` in place over `total` elements, the bias repeating by channel.
    fn epilogue(
        &self,
        out: &CudaStorage,
        bias: Option<&CudaStorage>,
        inner: usize,
        channels: usize,
        act: u32,
        total: usize,
    ) -> Result<()> {
        if total == 0 || (bias.is_none() && act == 0) {
            return Ok(());
        }
        let args = [
            p(out),
            opt(bias),
            u(inner.max(1)),
            u(channels.max(1)),
            Arg::I(act),
            u(total),
        ];
        self.launch_1d(Entry::Epilogue, total as u64, &args)
    }
}

pub(super) fn matmul(
    be: &CudaBackend,
    a: &CudaStorage,
    b: &CudaStorage,
    bias: Option<&CudaStorage>,
    spec: MatmulSpec,
) -> Result<CudaStorage> {
    let d = spec.dims;
    let mn = d.m * d.n;
    // Half-precision storage: A, B and C are f16 or bf16 as stored, accumulated in f32 (the
    // ops layer sends no bias or activation this way).
    let half = match spec.storage {
        DType::F16 => Some(Data::CUDA_R_16F),
        DType::BF16 => Some(Data::CUDA_R_16BF),
        _ => None,
    };
    let out_bytes = (d.batch * mn) as u64 * if half.is_some() { 2 } else { 4 };
    let out = be.alloc_bytes(out_bytes)?;
    if d.batch * mn == 0 {
        return Ok(out);
    }
    let act = spec
        .activation
        .map_or(0, |a| a.as_unary().kind() as u32 + 1);
    if d.k == 0 {
        // A product of zeros (+0 in every dtype), then the epilogue.
        be.zero(&out, out_bytes)?;
        be.epilogue(&out, bias, 1, d.n, act, d.batch * mn)?;
        return Ok(out);
    }
    // Elements each operand's buffer holds: one matrix when shared by every batch entry.
    let a_len = if d.a_stride == 0 {
        d.m * d.k
    } else {
        d.batch * d.a_stride
    };
    let b_len = if d.b_stride == 0 {
        d.k * d.n
    } else {
        d.batch * d.b_stride
    };
    let (narrow_a, narrow_b);
    let (pa, pb, data, compute) = match (half, spec.precision) {
        (Some(data), _) => (a.ptr(), b.ptr(), data, Compute::CUBLAS_COMPUTE_32F),
        (None, Precision::F32) => (
            a.ptr(),
            b.ptr(),
            Data::CUDA_R_32F,
            Compute::CUBLAS_COMPUTE_32F,
        ),
        (None, Precision::Tf32) => (
            a.ptr(),
            b.ptr(),
            Data::CUDA_R_32F,
            Compute::CUBLAS_COMPUTE_32F_FAST_TF32,
        ),
        (None, Precision::F16 | Precision::Bf16) => {
            let bf16 = spec.precision == Precision::Bf16;
            narrow_a = be.narrow(a, a_len, bf16)?;
            narrow_b = be.narrow(b, b_len, bf16)?;
            let data = if bf16 {
                Data::CUDA_R_16BF
            } else {
                Data::CUDA_R_16F
            };
            (
                narrow_a.ptr(),
                narrow_b.ptr(),
                data,
                Compute::CUBLAS_COMPUTE_32F,
            )
        }
    };
    let (op_a, lda) = if spec.transpose_a {
        (Op::CUBLAS_OP_T, d.m)
    } else {
        (Op::CUBLAS_OP_N, d.k)
    };
    let (op_b, ldb) = if spec.transpose_b {
        (Op::CUBLAS_OP_T, d.k)
    } else {
        (Op::CUBLAS_OP_N, d.n)
    };
    be.gemm(&Gemm {
        op_a: op_b,
        op_b: op_a,
        m: d.n,
        n: d.m,
        k: d.k,
        a: pb,
        lda: ldb,
        stride_a: d.b_stride,
        b: pa,
        ldb: lda,
        stride_b: d.a_stride,
        c: out.ptr(),
        ldc: d.n,
        stride_c: mn,
        batch: d.batch,
        data,
        out: half.unwrap_or(Data::CUDA_R_32F),
        compute,
    })?;
    be.epilogue(&out, bias, 1, d.n, act, d.batch * mn)?;
    Ok(out)
}

pub(super) fn conv2d(
    be: &CudaBackend,
    x: &CudaStorage,
    w: &CudaStorage,
    bias: Option<&CudaStorage>,
    s: ConvSpec,
) -> Result<CudaStorage> {
    let o = &s.opts;
    let plane = s.oh * s.ow;
    let total = s.n * s.o * plane;
    let out = be.alloc(total)?;
    if total == 0 {
        return Ok(out);
    }
    let groups = o.groups.max(1);
    let (cg, og) = (s.c / groups, s.o / groups);
    let depth = cg * s.kh * s.kw;
    if depth == 0 {
        be.zero(&out, total as u64 * 4)?;
        be.epilogue(&out, bias, plane, s.o, 0, total)?;
        return Ok(out);
    }
    let pointwise = s.kh == 1
        && s.kw == 1
        && o.stride == [1, 1]
        && o.padding == [0, 0]
        && (s.oh, s.ow) == (s.h, s.w);
    let per_row = (groups * depth * s.ow) as u64;
    let tile_rows = ((IM2COL_BUDGET / per_row.max(1)) as usize).clamp(1, s.oh.max(1));
    let cols = if pointwise {
        None
    } else {
        Some(be.alloc(groups * depth * tile_rows * s.ow)?)
    };
    let f = 4u64;
    for img in 0..s.n {
        let x_img = x.ptr() + (img * s.c * s.h * s.w) as u64 * f;
        let out_img = out.ptr() + (img * s.o * plane) as u64 * f;
        // Per group: out_g[og, width] = w_g[og, depth] x cols_g[depth, width].
        let gemm = |src: u64, width: usize, src_stride: usize, dst: u64| {
            be.gemm(&Gemm {
                op_a: Op::CUBLAS_OP_N,
                op_b: Op::CUBLAS_OP_N,
                m: width,
                n: og,
                k: depth,
                a: src,
                lda: width,
                stride_a: src_stride,
                b: w.ptr(),
                ldb: depth,
                stride_b: og * depth,
                c: dst,
                ldc: plane,
                stride_c: og * plane,
                batch: groups,
                data: Data::CUDA_R_32F,
                out: Data::CUDA_R_32F,
                compute: Compute::CUBLAS_COMPUTE_32F,
            })
        };
        let Some(cols) = &cols else {
            gemm(x_img, plane, cg * plane, out_img)?;
            continue;
        };
        for oy0 in (0..s.oh).step_by(tile_rows) {
            let rows = tile_rows.min(s.oh - oy0);
            let width = rows * s.ow;
            let params = Im2colParams {
                c: s.c as u64,
                h: s.h as u64,
                w: s.w as u64,
                kh: s.kh as u64,
                kw: s.kw as u64,
                ow: s.ow as u64,
                sh: o.stride[0] as u64,
                sw: o.stride[1] as u64,
                ph: o.padding[0] as u64,
                pw: o.padding[1] as u64,
                dh: o.dilation[0] as u64,
                dw: o.dilation[1] as u64,
                groups: groups as u64,
                cg: cg as u64,
                oy0: oy0 as u64,
                rows: rows as u64,
            };
            let args = [
                Arg::Raw(bytemuck::bytes_of(&params)),
                Arg::P(x_img),
                p(cols),
            ];
            be.launch_1d(Entry::Im2col, (groups * depth * width) as u64, &args)?;
            gemm(
                cols.ptr(),
                width,
                depth * width,
                out_img + (oy0 * s.ow) as u64 * f,
            )?;
        }
    }
    be.epilogue(&out, bias, plane, s.o, 0, total)?;
    Ok(out)
}

/// `residual + rope(rms_norm(x) w^T)` (each part as `spec` and `around` ask): the GEMV kernel
/// does it all for up to QGEMV_MAX_ROWS rows; prompts run the parts as their own kernels
/// around cuBLAS.
pub(super) fn matmul_quant(
    be: &CudaBackend,
    x: &CudaStorage,
    w: QuantParts<'_, CudaStorage>,
    around: QuantAround<'_, CudaStorage>,
    spec: QuantMatmulSpec,
) -> Result<CudaStorage> {
    use crate::backend::BackendOps;
    let (m, n, k) = (spec.m, w.rows, w.cols);
    let apart = m > QGEMV_MAX_ROWS || k == 0;
    if spec.swiglu && apart {
        // A prompt (or empty rows): the SwiGLU's own kernel first, then the product.
        let x = be.strided(x, Some(x), crate::ops::elementwise::swiglu_spec(m, k))?;
        let spec = QuantMatmulSpec {
            swiglu: false,
            ..spec
        };
        return matmul_quant(be, &x, w, around, spec);
    }
    if let (Some(nw), Some(eps), true) = (around.norm, spec.rms_norm, apart) {
        // A prompt (or empty rows): the norm's own kernel first, then the product.
        let norm = crate::ops::norm::NormSpec {
            rms: true,
            rows: m,
            cols: k,
            eps,
        };
        let x = be.norm(x, Some(nw), None, norm)?;
        let around = QuantAround {
            norm: None,
            ..around
        };
        let spec = QuantMatmulSpec {
            rms_norm: None,
            ..spec
        };
        return matmul_quant(be, &x, w, around, spec);
    }
    if apart && (around.residual.is_some() || around.rope.is_some()) {
        // A prompt's product (cuBLAS, bound by arithmetic) or an empty one: the rotation
        // and the add are more passes.
        let plain = QuantAround {
            residual: None,
            rope: None,
            ..around
        };
        let out = matmul_quant(be, x, w, plain, spec)?;
        return be.quant_rope_and_add(out, &around, spec);
    }
    if m > QGEMV_MAX_ROWS && n * k > 0 {
        // Many rows: dequantize once and multiply on cuBLAS in the asked precision, out[m, n]
        // = x[m, k] w[n, k]^T.
        let deq = be.dequantize(&w.storages(), w.spec())?;
        let spec = MatmulSpec {
            dims: crate::ops::matmul::MatmulDims {
                batch: 1,
                m,
                k,
                n,
                a_stride: 0,
                b_stride: 0,
            },
            transpose_a: false,
            transpose_b: true,
            activation: None,
            precision: spec.precision,
            tile: None,
            storage: DType::F32,
            weight: DType::F32,
        };
        return matmul(be, x, &deq, None, spec);
    }
    let out = be.alloc(m * n)?;
    if m * n == 0 {
        return Ok(out);
    }
    if k == 0 {
        be.zero(&out, (m * n) as u64 * 4)?;
        return Ok(out);
    }
    // Blocks of 4 warps in groups of `kw` warps that split a row's quant blocks (32 a warp
    // a round); a group takes 8 outputs (4 for Q8_0), or 2. See qgemv in quant.cu. (Raising
    // kw for short rows, to spread small GEMVs over more blocks, made SmolLM2's decoding
    // slower.)
    let blocks = k / 32;
    let rope_dim = u32::try_from(spec.rope.unwrap_or(0)).map_err(|_| Error::InvalidArgument {
        op: "matmul_quant",
        reason: "rope rows longer than 2^32 values".into(),
    })?;
    // Matrices under 4096 rows (a small model's layers) take 2 outputs a group: more warps,
    // each with less arithmetic before the result.
    let few = n < 4096;
    let rows = if few {
        2
    } else if w.format == crate::QuantFormat::Q8_0 {
        4
    } else {
        8
    };
    let kw: usize = match blocks {
        0..=32 => 1,
        33..=64 => 2,
        _ => 4,
    };
    let per_block = 4 / kw * rows;
    let grid = (grid_x(n, per_block)?, m.clamp(1, 65535) as u32, 1);
    // A grid of one wave (4 blocks an SM, as launch bounds allow) lets the next kernel launch
    // as it starts (LAUNCH_NEXT in common.cuh).
    let one_wave = grid.0 as u64 * grid.1 as u64 <= 4 * be.multiprocessors as u64;
    // A row of x (after the norm's weight or SwiGLU) in shared memory where it fits 48 KB,
    // which every device gives a block without opting in (4 blocks an SM then fit an H100's
    // 228 KB); longer rows are read from global memory.
    let staged = k <= X_STAGE_MAX;
    let shared = if staged { k as u32 * 4 } else { 0 };
    let args = [
        Arg::I(w.format as u32),
        p(w.scales),
        opt(w.mins),
        p(w.words),
        p(x),
        u(m),
        u(n),
        u(k),
        Arg::I(kw as u32),
        Arg::I(few as u32),
        opt(around.residual),
        opt(around.norm),
        Arg::F(spec.rms_norm.unwrap_or(0.0)),
        Arg::I(spec.swiglu as u32),
        opt(around.rope.map(|r| r.0)),
        opt(around.rope.map(|r| r.1)),
        Arg::I(rope_dim),
        Arg::I(one_wave as u32),
        p(&out),
    ];
    let entry = if staged {
        Entry::QgemvStaged
    } else {
        Entry::Qgemv
    };
    be.launch(entry, grid, 128, shared, &args)?;
    Ok(out)
}

/// The longest row of x the quantized GEMV stages in shared memory (48 KB of f32).
const X_STAGE_MAX: usize = 12 << 10;

/// Blocks of `per_block` quantized rows covering `n` rows: the grid's x dimension.
fn grid_x(n: usize, per_block: usize) -> Result<u32> {
    let blocks = n.div_ceil(per_block);
    u32::try_from(blocks)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| Error::LimitExceeded {
            what: "quantized matrix rows".into(),
            limit: "CUDA grid x dimension",
            needed: n as u64,
            max: (i32::MAX as u64) * per_block as u64,
        })
}
