//! The CUDA backend's ops: the `BackendOps` implementation, each op a launch (or a few) of a
//! kernel of `shaders/cuda/` with its arguments in the order the `.cu` signature declares.

use bytemuck::{Pod, Zeroable};

use super::module::{Entry, Kernels};
use super::{blas, fused, Arg, CudaBackend, CudaStorage, BLOCK};
use crate::backend::BackendOps;
use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::cast::CastSpec;
use crate::ops::compare::CompareSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::elementwise::{BinarySpec, StridedSpec, UnarySpec, WhereSpec};
use crate::ops::embedding::{EmbeddingSpec, WriteRowsSpec};
use crate::ops::fused::{Expr, FusedSpec, MAX_INPUTS};
use crate::ops::layout::{CopySpec, LayoutSpec, MAX_RANK};
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantSpec};
use crate::ops::reduce::{DotSpec, ReduceSpec};
use crate::ops::rope::RopeSpec;
use crate::ops::softmax::SoftmaxSpec;
use crate::ops::topk::TopkSpec;
use crate::ops::RopeLayout;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    n: u64,
    rank: u64,
    in_offset: u64,
    out_offset: u64,
    shape: [u64; MAX_RANK],
    in_strides: [u64; MAX_RANK],
    out_strides: [u64; MAX_RANK],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PoolParams {
    planes: u64,
    h: u64,
    w: u64,
    oh: u64,
    ow: u64,
    kh: u64,
    kw: u64,
    sh: u64,
    sw: u64,
    ph: u64,
    pw: u64,
    max: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct Im2colParams {
    pub(super) c: u64,
    pub(super) h: u64,
    pub(super) w: u64,
    pub(super) kh: u64,
    pub(super) kw: u64,
    pub(super) ow: u64,
    pub(super) sh: u64,
    pub(super) sw: u64,
    pub(super) ph: u64,
    pub(super) pw: u64,
    pub(super) dh: u64,
    pub(super) dw: u64,
    pub(super) groups: u64,
    pub(super) cg: u64,
    pub(super) oy0: u64,
    pub(super) rows: u64,
}

pub(super) fn u(v: usize) -> Arg<'static> {
    Arg::U(v as u64)
}

pub(super) fn p(s: &CudaStorage) -> Arg<'static> {
    Arg::P(s.ptr())
}

pub(super) fn opt(s: Option<&CudaStorage>) -> Arg<'static> {
    Arg::P(s.map_or(0, CudaStorage::ptr))
}

impl BackendOps for CudaBackend {
    type Storage = CudaStorage;

    fn upload(&self, data: &[f32]) -> Result<CudaStorage> {
        let out = self.alloc(data.len())?;
        self.write(out.ptr(), data)?;
        Ok(out)
    }

    fn cast(&self, x: &CudaStorage, spec: CastSpec) -> Result<CudaStorage> {
        let words = (spec.n * spec.to.size()).div_ceil(4);
        let out = self.alloc(words)?;
        if spec.n > 0 {
            let args = [
                p(x),
                Arg::I(spec.from.code()),
                p(&out),
                Arg::I(spec.to.code()),
                u(spec.n),
            ];
            self.launch_1d(Entry::Cast, spec.n as u64, &args)?;
        }
        Ok(out)
    }

    fn compare(&self, a: &CudaStorage, b: &CudaStorage, spec: CompareSpec) -> Result<CudaStorage> {
        let n = spec.n;
        let out = self.alloc(n)?;
        if n > 0 {
            let args = [
                Arg::I(spec.op.code()),
                Arg::I(spec.kind.code()),
                p(a),
                u(spec.a_len.max(1)),
                p(b),
                u(spec.b_len.max(1)),
                p(&out),
                u(n),
            ];
            self.launch_1d(Entry::Compare, n as u64, &args)?;
        }
        Ok(out)
    }

    fn unary(&self, x: &CudaStorage, spec: UnarySpec) -> Result<CudaStorage> {
        let (op, n) = (spec.op, spec.n);
        let out = self.alloc(n)?;
        if n > 0 {
            let [p0, p1] = op.params();
            let args = [
                Arg::I(op.kind() as u32),
                Arg::F(p0),
                Arg::F(p1),
                p(x),
                p(&out),
                u(n),
            ];
            self.launch_1d(Entry::Unary, (n as u64).div_ceil(4), &args)?;
        }
        Ok(out)
    }

    fn binary(&self, a: &CudaStorage, b: &CudaStorage, spec: BinarySpec) -> Result<CudaStorage> {
        let (op, n) = (spec.op, spec.n);
        let (a, b) = ((a, spec.a_len), (b, spec.b_len));
        let out = self.alloc(n)?;
        if n > 0 {
            let args = [
                Arg::I(op as u32),
                p(a.0),
                u(a.1.max(1)),
                p(b.0),
                u(b.1.max(1)),
                p(&out),
                u(n),
            ];
            self.launch_1d(Entry::Binary, (n as u64).div_ceil(4), &args)?;
        }
        Ok(out)
    }

    fn strided(
        &self,
        a: &CudaStorage,
        b: Option<&CudaStorage>,
        spec: StridedSpec,
    ) -> Result<CudaStorage> {
        self.launch_strided(a, b, &spec)
    }

    fn where_select(
        &self,
        c: &CudaStorage,
        a: &CudaStorage,
        b: &CudaStorage,
        spec: WhereSpec,
    ) -> Result<CudaStorage> {
        let n = spec.n;
        let out = self.alloc(n)?;
        if n > 0 {
            let [lc, la, lb] = spec.lens;
            let args = [p(c), u(lc), p(a), u(la), p(b), u(lb), p(&out), u(n)];
            self.launch_1d(Entry::Where, n as u64, &args)?;
        }
        Ok(out)
    }

    fn reduce(&self, x: &CudaStorage, spec: ReduceSpec) -> Result<CudaStorage> {
        let ReduceSpec { op, rows, cols } = spec;
        let out = self.alloc(rows)?;
        if rows == 0 {
            return Ok(out);
        }
        if cols == 0 {
            self.zero(&out, rows as u64 * 4)?;
            return Ok(out);
        }
        let args = [Arg::I(op as u32), p(x), u(rows), u(cols), p(&out)];
        self.launch_rows(Entry::ReduceRows, rows, cols, &args)?;
        Ok(out)
    }

    fn dot(&self, a: &CudaStorage, b: &CudaStorage, spec: DotSpec) -> Result<CudaStorage> {
        let n = spec.n;
        let out = self.alloc(1)?;
        if n == 0 {
            self.zero(&out, 4)?;
            return Ok(out);
        }
        let blocks = (n as u64).div_ceil(u64::from(BLOCK)).clamp(1, 1024) as usize;
        let partial = self.alloc(blocks)?;
        self.launch(
            Entry::DotPartial,
            (blocks as u32, 1, 1),
            BLOCK,
            0,
            &[p(a), p(b), u(n), p(&partial)],
        )?;
        let args = [
            Arg::I(crate::ops::ReduceOp::Sum as u32),
            p(&partial),
            u(1),
            u(blocks),
            p(&out),
        ];
        self.launch_rows(Entry::ReduceRows, 1, blocks, &args)?;
        Ok(out)
    }

    fn softmax(&self, x: &CudaStorage, spec: SoftmaxSpec) -> Result<CudaStorage> {
        let SoftmaxSpec { rows, cols, log } = spec;
        let out = self.alloc(rows * cols)?;
        if rows * cols == 0 {
            return Ok(out);
        }
        // A few long rows would leave most of the GPU idle with a block per row: split them.
        const CHUNK: usize = 16384;
        if rows < 256 && cols >= 2 * CHUNK && rows <= 65535 {
            let chunks = cols.div_ceil(CHUNK);
            let pairs = self.alloc(2 * rows * chunks)?;
            let grid = (chunks as u32, rows as u32, 1);
            let args = [p(x), u(cols), u(CHUNK), p(&pairs)];
            self.launch(Entry::SoftmaxPartial, grid, 1024, 0, &args)?;
            let args = [
                p(x),
                u(cols),
                u(CHUNK),
                p(&pairs),
                Arg::I(log as u32),
                p(&out),
            ];
            self.launch(Entry::SoftmaxFinish, grid, 1024, 0, &args)?;
            return Ok(out);
        }
        let args = [p(x), u(rows), u(cols), Arg::I(log as u32), p(&out)];
        self.launch_rows(Entry::SoftmaxRows, rows, cols, &args)?;
        Ok(out)
    }

    fn matmul(
        &self,
        a: &CudaStorage,
        b: &CudaStorage,
        bias: Option<&CudaStorage>,
        spec: MatmulSpec,
    ) -> Result<CudaStorage> {
        blas::matmul(self, a, b, bias, spec)
    }

    fn fused(&self, inputs: &[&CudaStorage], spec: &FusedSpec<'_>) -> Result<CudaStorage> {
        let (expr, n) = (spec.expr, spec.n);
        let inputs: Vec<(&CudaStorage, usize)> = inputs
            .iter()
            .copied()
            .zip(spec.lens.iter().copied())
            .collect();
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return Err(Error::InvalidArgument {
                op: "fused elementwise",
                reason: format!("{} inputs (1 to {MAX_INPUTS} supported)", inputs.len()),
            });
        }
        let out = self.alloc(n)?;
        if n == 0 {
            return Ok(out);
        }
        let entry = self.kernels.fused(expr)?;
        let mut args = Vec::with_capacity(2 * MAX_INPUTS + 2);
        for j in 0..MAX_INPUTS {
            match inputs.get(j) {
                Some((s, len)) => {
                    args.push(p(s));
                    args.push(u((*len).max(1)));
                }
                None => {
                    args.push(Arg::P(0));
                    args.push(u(1));
                }
            }
        }
        args.push(p(&out));
        args.push(u(n));
        self.launch_1d(entry, n as u64, &args)?;
        Ok(out)
    }

    fn norm(
        &self,
        x: &CudaStorage,
        weight: Option<&CudaStorage>,
        bias: Option<&CudaStorage>,
        spec: NormSpec,
    ) -> Result<CudaStorage> {
        let out = self.alloc(spec.rows * spec.cols)?;
        if spec.rows * spec.cols > 0 {
            let args = [
                p(x),
                opt(weight),
                opt(bias),
                u(spec.rows),
                u(spec.cols),
                Arg::I(spec.rms as u32),
                Arg::F(spec.eps),
                p(&out),
            ];
            self.launch_rows(Entry::NormRows, spec.rows, spec.cols, &args)?;
        }
        Ok(out)
    }

    fn copy(&self, parts: &[&CudaStorage], layout: &LayoutSpec) -> Result<CudaStorage> {
        let n = layout.n;
        let out = self.alloc(n)?;
        let covered: usize = layout.parts.iter().map(CopySpec::len).sum();
        if covered < n {
            self.zero(&out, n as u64 * 4)?;
        }
        for (src, spec) in parts.iter().zip(&layout.parts) {
            let total = spec.len();
            if total == 0 {
                continue;
            }
            let rank = spec.shape.len();
            if rank > MAX_RANK {
                return Err(Error::InvalidArgument {
                    op: "copy",
                    reason: format!("at most {MAX_RANK} axes, got {rank}"),
                });
            }
            let mut c = CopyParams::zeroed();
            c.n = total as u64;
            c.rank = rank.max(1) as u64;
            c.in_offset = spec.src_offset as u64;
            c.out_offset = spec.out_offset as u64;
            c.shape[0] = 1;
            for d in 0..rank {
                c.shape[d] = spec.shape[d] as u64;
                c.in_strides[d] = spec.src_strides[d] as u64;
                c.out_strides[d] = spec.out_strides[d] as u64;
            }
            let args = [Arg::Raw(bytemuck::bytes_of(&c)), p(src), p(&out)];
            self.launch_1d(Entry::CopyStrided, total as u64, &args)?;
        }
        Ok(out)
    }

    fn embedding(
        &self,
        table: &CudaStorage,
        ids: &CudaStorage,
        spec: EmbeddingSpec,
    ) -> Result<CudaStorage> {
        let (count, dim) = (spec.count, spec.dim);
        let out = self.alloc(count * dim)?;
        if count == 0 || dim == 0 {
            return Ok(out);
        }
        let args = [p(table), p(ids), u(count), u(dim), u(spec.vocab), p(&out)];
        self.launch_1d(Entry::Embedding, (count * dim) as u64, &args)?;
        Ok(out)
    }

    fn rope(
        &self,
        x: &CudaStorage,
        cos: &CudaStorage,
        sin: &CudaStorage,
        spec: RopeSpec,
    ) -> Result<CudaStorage> {
        let RopeSpec {
            n,
            seq,
            dim,
            layout,
        } = spec;
        let out = self.alloc(n)?;
        if n == 0 || dim == 0 {
            return Ok(out);
        }
        let interleaved = matches!(layout, RopeLayout::Interleaved) as u32;
        let args = [
            p(x),
            p(cos),
            p(sin),
            u(n),
            u(seq.max(1)),
            u(dim),
            Arg::I(interleaved),
            p(&out),
        ];
        self.launch_1d(Entry::Rope, n as u64, &args)?;
        Ok(out)
    }

    fn attention(
        &self,
        q: &CudaStorage,
        k: &CudaStorage,
        v: &CudaStorage,
        lens: Option<&CudaStorage>,
        a: AttentionSpec,
    ) -> Result<CudaStorage> {
        super::attention::attention(self, q, k, v, lens, a)
    }

    fn topk(&self, x: &CudaStorage, spec: TopkSpec) -> Result<(CudaStorage, CudaStorage)> {
        let TopkSpec { rows, cols, k } = spec;
        let values = self.alloc(rows * k)?;
        let indices = self.alloc(rows * k)?;
        if rows * k > 0 {
            let args = [p(x), u(rows), u(cols), u(k), p(&values), p(&indices)];
            let blocks = rows.clamp(1, 65535) as u32;
            // Long rows (a vocabulary of logits) take a block of 1024 threads.
            let threads = if cols >= 16 * BLOCK as usize {
                1024
            } else {
                BLOCK
            };
            self.launch(Entry::TopkRows, (blocks, 1, 1), threads, 0, &args)?;
        }
        Ok((values, indices))
    }

    fn matmul_quant(
        &self,
        x: &CudaStorage,
        w: &[&CudaStorage],
        around: &QuantAround<'_, CudaStorage>,
        spec: QuantMatmulSpec,
    ) -> Result<CudaStorage> {
        let parts = spec.weight.parts(w)?;
        blas::matmul_quant(self, x, parts, *around, spec)
    }

    fn dequantize(&self, w: &[&CudaStorage], spec: QuantSpec) -> Result<CudaStorage> {
        let w = spec.parts(w)?;
        let n = w.rows * w.cols;
        let out = self.alloc(n)?;
        if n > 0 {
            let args = [
                Arg::I(w.format as u32),
                p(w.scales),
                opt(w.mins),
                p(w.words),
                u(w.rows),
                u(w.cols),
                p(&out),
            ];
            self.launch_1d(Entry::Dequantize, n as u64, &args)?;
        }
        Ok(out)
    }

    fn conv2d(
        &self,
        x: &CudaStorage,
        w: &CudaStorage,
        bias: Option<&CudaStorage>,
        spec: ConvSpec,
    ) -> Result<CudaStorage> {
        blas::conv2d(self, x, w, bias, spec)
    }

    fn pool2d(&self, x: &CudaStorage, s: PoolSpec) -> Result<CudaStorage> {
        let total = s.planes * s.oh * s.ow;
        let out = self.alloc(total)?;
        if total > 0 {
            let o = &s.opts;
            let params = PoolParams {
                planes: s.planes as u64,
                h: s.h as u64,
                w: s.w as u64,
                oh: s.oh as u64,
                ow: s.ow as u64,
                kh: o.kernel[0] as u64,
                kw: o.kernel[1] as u64,
                sh: o.stride[0] as u64,
                sw: o.stride[1] as u64,
                ph: o.padding[0] as u64,
                pw: o.padding[1] as u64,
                max: s.max as u32,
                _pad: 0,
            };
            let args = [Arg::Raw(bytemuck::bytes_of(&params)), p(x), p(&out)];
            self.launch_1d(Entry::Pool2d, total as u64, &args)?;
        }
        Ok(out)
    }

    async fn read(&self, x: &CudaStorage, n: usize) -> Result<Vec<f32>> {
        self.read_blocking(x, n)
    }

    async fn synchronize(&self) -> Result<()> {
        self.wait()
    }
}

impl Kernels {
    /// The entry point of the fused kernel of `expr`, generating its source on first use.
    fn fused(&self, expr: &Expr) -> Result<Entry> {
        let mut key = Vec::new();
        expr.key(&mut key);
        if let Some(id) = self.fused_id_of(&key) {
            return Ok(Entry::Fused(id));
        }
        let source = fused::fused_source(expr)?;
        let id = fused::fused_id(&source);
        self.register_fused(key, id, source);
        Ok(Entry::Fused(id))
    }
}

impl CudaBackend {
    /// See [`WriteRowsSpec`]: `spec.rows` rows of `dst` rewritten in place from the row that
    /// `at` names.
    pub(crate) fn write_rows(
        &self,
        dst: &CudaStorage,
        src: &CudaStorage,
        at: &CudaStorage,
        spec: WriteRowsSpec,
    ) -> Result<()> {
        let n = spec.rows * spec.width;
        if n == 0 {
            return Ok(());
        }
        let args = [
            p(src),
            p(at),
            u(spec.rows),
            u(spec.width),
            u(spec.capacity),
            u(spec.offset),
            u(spec.stride),
            p(dst),
        ];
        self.launch_1d(Entry::WriteRows, n as u64, &args)
    }
}
