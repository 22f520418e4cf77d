//! The backend trait and the closed enums that dispatch to each backend.
//!
//! A backend receives requests that the ops layer has already validated (shapes agree,
//! parameters make sense); it checks only what depends on the device (limits, memory, loss).

pub(crate) mod cpu;
#[cfg(cuda)]
pub(crate) mod cuda;
pub(crate) mod hybrid;
pub(crate) mod wgpu;

use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::fused::Expr;
use crate::ops::layout::CopySpec;
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::QuantParts;
use crate::ops::RopeLayout;
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};

/// An operand of a broadcasting binary op: its storage and how many elements repeat
/// (`n` for a full operand, the row length for a row, 1 for a scalar).
pub(crate) type Operand<'a, S> = (&'a S, usize);

/// What every backend implements. Lengths are element counts; all data is f32.
pub(crate) trait BackendOps {
    type Storage;

    /// Copies host data into a new device buffer.
    fn upload(&self, data: &[f32]) -> Result<Self::Storage>;
    /// `out[i] = op(x[i])` for `i < n`.
    fn unary(&self, op: UnaryOp, x: &Self::Storage, n: usize) -> Result<Self::Storage>;
    /// `out[i] = op(a[i % a.1], b[i % b.1])` for `i < n`.
    fn binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, Self::Storage>,
        b: Operand<'_, Self::Storage>,
        n: usize,
    ) -> Result<Self::Storage>;
    /// Reduces each of `rows` rows of `cols` elements to one value.
    fn reduce(
        &self,
        op: ReduceOp,
        x: &Self::Storage,
        rows: usize,
        cols: usize,
    ) -> Result<Self::Storage>;
    /// `sum(a[i] * b[i])` for `i < n`, as one element.
    fn dot(&self, a: &Self::Storage, b: &Self::Storage, n: usize) -> Result<Self::Storage>;
    /// softmax (or log_softmax) of each of `rows` rows of `cols` elements.
    fn softmax(
        &self,
        x: &Self::Storage,
        rows: usize,
        cols: usize,
        log: bool,
    ) -> Result<Self::Storage>;
    /// `out[b] = act(op(a[b]) x op(b[b]) + bias)` for each batch entry (see [`MatmulSpec`]).
    fn matmul(
        &self,
        a: &Self::Storage,
        b: &Self::Storage,
        bias: Option<&Self::Storage>,
        spec: MatmulSpec,
    ) -> Result<Self::Storage>;
    /// A fused elementwise expression over `n` elements; input `j` is read at `i % inputs[j].1`.
    fn fused(
        &self,
        expr: &Expr,
        inputs: &[Operand<'_, Self::Storage>],
        n: usize,
    ) -> Result<Self::Storage>;
    /// layernorm or rmsnorm of each row, then `* weight + bias` (see [`NormSpec`]).
    fn norm(
        &self,
        x: &Self::Storage,
        weight: Option<&Self::Storage>,
        bias: Option<&Self::Storage>,
        spec: NormSpec,
    ) -> Result<Self::Storage>;
    /// A new tensor of `n` elements assembled by strided copies (see [`CopySpec`]).
    fn copy(&self, parts: &[(&Self::Storage, CopySpec)], n: usize) -> Result<Self::Storage>;
    /// Rows `ids` of a table whose rows have `dim` elements (ids already checked).
    fn embedding(&self, table: &Self::Storage, ids: &[u32], dim: usize) -> Result<Self::Storage>;
    /// RoPE over `n` elements of rows of `dim`, positions cycling every `seq` rows.
    fn rope(
        &self,
        x: &Self::Storage,
        cos: &Self::Storage,
        sin: &Self::Storage,
        n_seq_dim: [usize; 3],
        layout: RopeLayout,
    ) -> Result<Self::Storage>;
    /// Fused attention (see [`AttentionSpec`]); `lens` hides keys per batch entry.
    fn attention(
        &self,
        q: &Self::Storage,
        k: &Self::Storage,
        v: &Self::Storage,
        lens: Option<&[u32]>,
        spec: AttentionSpec,
    ) -> Result<Self::Storage>;
    /// The `k` largest of each row (values, then indices as f32), in `select::order_key` order.
    fn topk(
        &self,
        x: &Self::Storage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(Self::Storage, Self::Storage)>;
    /// `x [m, k] x w^T` with `w` quantized `[n, k]`: `[m, n]`.
    fn matmul_quant(
        &self,
        x: &Self::Storage,
        w: QuantParts<'_, Self::Storage>,
        m: usize,
    ) -> Result<Self::Storage>;
    /// The f32 `[rows, cols]` matrix of quantized blocks.
    fn dequantize(&self, w: QuantParts<'_, Self::Storage>) -> Result<Self::Storage>;
    /// conv2d (see [`ConvSpec`]).
    fn conv2d(
        &self,
        x: &Self::Storage,
        w: &Self::Storage,
        bias: Option<&Self::Storage>,
        spec: ConvSpec,
    ) -> Result<Self::Storage>;
    /// max or average pooling (see [`PoolSpec`]).
    fn pool2d(&self, x: &Self::Storage, spec: PoolSpec) -> Result<Self::Storage>;
    /// Copies the first `n` elements back to the host.
    async fn read(&self, x: &Self::Storage, n: usize) -> Result<Vec<f32>>;
    /// Waits until all enqueued work has finished.
    async fn synchronize(&self) -> Result<()>;
}

/// The backend a device runs on.
pub(crate) enum BackendImpl {
    Wgpu(self::wgpu::WgpuBackend),
    /// NVIDIA GPUs through the CUDA driver, NVRTC and cuBLAS.
    #[cfg(cuda)]
    Cuda(Box<cuda::CudaBackend>),
    Cpu(cpu::CpuBackend),
    /// A software adapter and the CPU, each op where the measured policy predicts it faster.
    Hybrid(Box<hybrid::Hybrid>),
    /// Shapes only: every op validates and returns an empty storage. A batch runs each op on
    /// meta tensors when it is recorded, so the op's own checks report mistakes at once.
    Meta,
}

/// A tensor's data, on the backend that made it.
pub(crate) enum Storage {
    Wgpu(self::wgpu::WgpuStorage),
    #[cfg(cuda)]
    Cuda(cuda::CudaStorage),
    Cpu(cpu::CpuStorage),
    Meta,
}

/// The sizes of quantized parts without their storages, to rebuild the parts around moved
/// copies (a hybrid device may move every storage an op reads).
#[derive(Clone, Copy)]
struct QuantShape {
    format: crate::ops::quant::QuantFormat,
    rows: usize,
    cols: usize,
    has_mins: bool,
}

impl QuantShape {
    /// The parts from `[scales, words, mins?]`, as `QuantParts::storages` lists them.
    fn parts<'b>(self, s: &[&'b Storage]) -> QuantParts<'b, Storage> {
        QuantParts {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            scales: s[0],
            words: s[1],
            mins: self.has_mins.then(|| s[2]),
        }
    }
}

impl<'a> QuantParts<'a, Storage> {
    fn storages(&self) -> Vec<&'a Storage> {
        let mut v = vec![self.scales, self.words];
        v.extend(self.mins);
        v
    }

    fn shape(&self) -> QuantShape {
        QuantShape {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            has_mins: self.mins.is_some(),
        }
    }

    /// The same parts as one backend's storages.
    fn map<S>(self, f: impl Fn(&'a Storage) -> Result<&'a S>) -> Result<QuantParts<'a, S>> {
        Ok(QuantParts {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            scales: f(self.scales)?,
            mins: self.mins.map(&f).transpose()?,
            words: f(self.words)?,
        })
    }
}

impl Storage {
    pub(crate) fn as_wgpu(&self) -> Result<&self::wgpu::WgpuStorage> {
        match self {
            Storage::Wgpu(s) => Ok(s),
            _ => Err(mismatch()),
        }
    }

    pub(crate) fn as_cpu(&self) -> Result<&cpu::CpuStorage> {
        match self {
            Storage::Cpu(s) => Ok(s),
            _ => Err(mismatch()),
        }
    }

    #[cfg(cuda)]
    pub(crate) fn as_cuda(&self) -> Result<&cuda::CudaStorage> {
        match self {
            Storage::Cuda(s) => Ok(s),
            _ => Err(mismatch()),
        }
    }
}

/// A tensor of one backend handed to another: impossible through the public API, since
/// tensors are checked to share a device first; kept as an error rather than a panic.
fn mismatch() -> Error {
    Error::DeviceMismatch {
        op: "backend dispatch",
    }
}

/// Matches the backend and the storages of the same variant, and calls `$body` with them bound.
macro_rules! dispatch {
    ($self:expr, $b:ident, [$($s:ident = $e:expr),*], $body:expr) => {
        match $self {
            BackendImpl::Wgpu($b) => {
                $(let Storage::Wgpu($s) = $e else { return Err(mismatch()) };)*
                $body.map(Storage::Wgpu)
            }
            BackendImpl::Cpu($b) => {
                $(let Storage::Cpu($s) = $e else { return Err(mismatch()) };)*
                $body.map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda($b) => {
                $(let Storage::Cuda($s) = $e else { return Err(mismatch()) };)*
                $body.map(Storage::Cuda)
            }
            BackendImpl::Meta => Ok(Storage::Meta),
            BackendImpl::Hybrid(_) => Err(mismatch()),
        }
    };
}

/// The early return of a hybrid device: `hybrid!(self, class, size, [inputs], |be, s| call)`.
macro_rules! hybrid {
    ($self:expr, $class:expr, $size:expr, $inputs:expr, $f:expr) => {
        if let BackendImpl::Hybrid(h) = $self {
            return h.run($class, $size, $inputs, $f);
        }
    };
}

use crate::policy::OpClass::{Elementwise, Matmul};

impl BackendImpl {
    /// The wgpu backend doing the GPU work, if any (a hybrid device's adapter included).
    pub(crate) fn wgpu(&self) -> Option<&self::wgpu::WgpuBackend> {
        match self {
            BackendImpl::Wgpu(b) => Some(b),
            BackendImpl::Hybrid(h) => h.gpu.backend().wgpu(),
            BackendImpl::Cpu(_) | BackendImpl::Meta => None,
            #[cfg(cuda)]
            BackendImpl::Cuda(_) => None,
        }
    }

    /// The CUDA backend, if this device runs on it.
    #[cfg(cuda)]
    pub(crate) fn cuda(&self) -> Option<&cuda::CudaBackend> {
        match self {
            BackendImpl::Cuda(b) => Some(b),
            _ => None,
        }
    }

    pub(crate) fn upload(&self, data: &[f32]) -> Result<Storage> {
        // A hybrid device keeps new data on the host until an op routed to the adapter needs it.
        if let BackendImpl::Hybrid(h) = self {
            return h.cpu.upload(data);
        }
        dispatch!(self, b, [], b.upload(data))
    }

    pub(crate) fn unary(&self, op: UnaryOp, x: &Storage, n: usize) -> Result<Storage> {
        hybrid!(self, Elementwise, n, &[x], |be, s| be.unary(op, s[0], n));
        dispatch!(self, b, [x = x], b.unary(op, x, n))
    }

    pub(crate) fn binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, Storage>,
        b: Operand<'_, Storage>,
        n: usize,
    ) -> Result<Storage> {
        hybrid!(self, Elementwise, n, &[a.0, b.0], |be, s| be.binary(
            op,
            (s[0], a.1),
            (s[1], b.1),
            n
        ));
        dispatch!(
            self,
            be,
            [sa = a.0, sb = b.0],
            be.binary(op, (sa, a.1), (sb, b.1), n)
        )
    }

    pub(crate) fn reduce(
        &self,
        op: ReduceOp,
        x: &Storage,
        rows: usize,
        cols: usize,
    ) -> Result<Storage> {
        hybrid!(self, Elementwise, rows * cols, &[x], |be, s| be
            .reduce(op, s[0], rows, cols));
        dispatch!(self, b, [x = x], b.reduce(op, x, rows, cols))
    }

    pub(crate) fn dot(&self, a: &Storage, b: &Storage, n: usize) -> Result<Storage> {
        hybrid!(self, Elementwise, n, &[a, b], |be, s| be.dot(s[0], s[1], n));
        dispatch!(self, be, [a = a, b = b], be.dot(a, b, n))
    }

    pub(crate) fn softmax(
        &self,
        x: &Storage,
        rows: usize,
        cols: usize,
        log: bool,
    ) -> Result<Storage> {
        hybrid!(self, Elementwise, rows * cols, &[x], |be, s| be
            .softmax(s[0], rows, cols, log));
        dispatch!(self, b, [x = x], b.softmax(x, rows, cols, log))
    }

    pub(crate) fn matmul(
        &self,
        a: &Storage,
        b: &Storage,
        bias: Option<&Storage>,
        spec: MatmulSpec,
    ) -> Result<Storage> {
        let d = spec.dims;
        let flops = 2.0 * (d.batch * d.m) as f64 * (d.n * d.k) as f64;
        let mut ins = vec![a, b];
        ins.extend(bias);
        hybrid!(self, Matmul, hybrid::square_side(flops), &ins, |be, s| be
            .matmul(s[0], s[1], s.get(2).copied(), spec));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => {
                let bias = bias.map(Storage::as_wgpu).transpose()?;
                be.matmul(a.as_wgpu()?, b.as_wgpu()?, bias, spec)
                    .map(Storage::Wgpu)
            }
            BackendImpl::Cpu(be) => {
                let bias = bias.map(Storage::as_cpu).transpose()?;
                be.matmul(a.as_cpu()?, b.as_cpu()?, bias, spec)
                    .map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let bias = bias.map(Storage::as_cuda).transpose()?;
                be.matmul(a.as_cuda()?, b.as_cuda()?, bias, spec)
                    .map(Storage::Cuda)
            }
        }
    }

    pub(crate) fn norm(
        &self,
        x: &Storage,
        weight: Option<&Storage>,
        bias: Option<&Storage>,
        spec: NormSpec,
    ) -> Result<Storage> {
        let mut ins = vec![x];
        let wi = weight.map(|w| {
            ins.push(w);
            ins.len() - 1
        });
        let bi = bias.map(|b| {
            ins.push(b);
            ins.len() - 1
        });
        hybrid!(self, Elementwise, spec.rows * spec.cols, &ins, |be, s| be
            .norm(s[0], wi.map(|i| s[i]), bi.map(|i| s[i]), spec));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => {
                let w = weight.map(Storage::as_wgpu).transpose()?;
                let b = bias.map(Storage::as_wgpu).transpose()?;
                be.norm(x.as_wgpu()?, w, b, spec).map(Storage::Wgpu)
            }
            BackendImpl::Cpu(be) => {
                let w = weight.map(Storage::as_cpu).transpose()?;
                let b = bias.map(Storage::as_cpu).transpose()?;
                be.norm(x.as_cpu()?, w, b, spec).map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let w = weight.map(Storage::as_cuda).transpose()?;
                let b = bias.map(Storage::as_cuda).transpose()?;
                be.norm(x.as_cuda()?, w, b, spec).map(Storage::Cuda)
            }
        }
    }

    pub(crate) fn embedding(&self, table: &Storage, ids: &[u32], dim: usize) -> Result<Storage> {
        hybrid!(self, Elementwise, ids.len() * dim, &[table], |be, s| be
            .embedding(s[0], ids, dim));
        dispatch!(self, be, [t = table], be.embedding(t, ids, dim))
    }

    pub(crate) fn rope(
        &self,
        x: &Storage,
        cos: &Storage,
        sin: &Storage,
        n_seq_dim: [usize; 3],
        layout: RopeLayout,
    ) -> Result<Storage> {
        hybrid!(self, Elementwise, n_seq_dim[0], &[x, cos, sin], |be, s| be
            .rope(s[0], s[1], s[2], n_seq_dim, layout));
        dispatch!(
            self,
            be,
            [x = x, c = cos, s = sin],
            be.rope(x, c, s, n_seq_dim, layout)
        )
    }

    pub(crate) fn attention(
        &self,
        q: &Storage,
        k: &Storage,
        v: &Storage,
        lens: Option<&[u32]>,
        spec: AttentionSpec,
    ) -> Result<Storage> {
        let a = &spec;
        let flops = 2.0 * (a.batch * a.hq * a.sq) as f64 * (a.sk * (a.d + a.dv)) as f64;
        hybrid!(
            self,
            Matmul,
            hybrid::square_side(flops),
            &[q, k, v],
            |be, s| be.attention(s[0], s[1], s[2], lens, spec)
        );
        dispatch!(
            self,
            be,
            [q = q, k = k, v = v],
            be.attention(q, k, v, lens, spec)
        )
    }

    pub(crate) fn topk(
        &self,
        x: &Storage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(Storage, Storage)> {
        hybrid!(self, Elementwise, rows * cols, &[x], |be, s| be
            .topk(s[0], rows, cols, k));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok((Storage::Meta, Storage::Meta)),
            BackendImpl::Wgpu(be) => {
                let (v, i) = be.topk(x.as_wgpu()?, rows, cols, k)?;
                Ok((Storage::Wgpu(v), Storage::Wgpu(i)))
            }
            BackendImpl::Cpu(be) => {
                let (v, i) = be.topk(x.as_cpu()?, rows, cols, k)?;
                Ok((Storage::Cpu(v), Storage::Cpu(i)))
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let (v, i) = be.topk(x.as_cuda()?, rows, cols, k)?;
                Ok((Storage::Cuda(v), Storage::Cuda(i)))
            }
        }
    }

    pub(crate) fn matmul_quant(
        &self,
        x: &Storage,
        w: QuantParts<'_, Storage>,
        m: usize,
    ) -> Result<Storage> {
        let flops = 2.0 * m as f64 * (w.rows * w.cols) as f64;
        let shape = w.shape();
        let mut ins = vec![x];
        ins.extend(w.storages());
        hybrid!(self, Matmul, hybrid::square_side(flops), &ins, |be, s| be
            .matmul_quant(s[0], shape.parts(&s[1..]), m));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => be
                .matmul_quant(x.as_wgpu()?, w.map(Storage::as_wgpu)?, m)
                .map(Storage::Wgpu),
            BackendImpl::Cpu(be) => be
                .matmul_quant(x.as_cpu()?, w.map(Storage::as_cpu)?, m)
                .map(Storage::Cpu),
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => be
                .matmul_quant(x.as_cuda()?, w.map(Storage::as_cuda)?, m)
                .map(Storage::Cuda),
        }
    }

    pub(crate) fn dequantize(&self, w: QuantParts<'_, Storage>) -> Result<Storage> {
        let n = w.rows * w.cols;
        let shape = w.shape();
        hybrid!(self, Elementwise, n, &w.storages(), |be, s| be
            .dequantize(shape.parts(s)));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => be.dequantize(w.map(Storage::as_wgpu)?).map(Storage::Wgpu),
            BackendImpl::Cpu(be) => be.dequantize(w.map(Storage::as_cpu)?).map(Storage::Cpu),
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => be.dequantize(w.map(Storage::as_cuda)?).map(Storage::Cuda),
        }
    }

    pub(crate) fn conv2d(
        &self,
        x: &Storage,
        w: &Storage,
        bias: Option<&Storage>,
        spec: ConvSpec,
    ) -> Result<Storage> {
        let depth = (spec.c / spec.opts.groups.max(1)) * spec.kh * spec.kw;
        let flops = 2.0 * (spec.n * spec.o * spec.oh * spec.ow) as f64 * depth as f64;
        let mut ins = vec![x, w];
        ins.extend(bias);
        hybrid!(self, Matmul, hybrid::square_side(flops), &ins, |be, s| be
            .conv2d(s[0], s[1], s.get(2).copied(), spec));
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => {
                let bias = bias.map(Storage::as_wgpu).transpose()?;
                be.conv2d(x.as_wgpu()?, w.as_wgpu()?, bias, spec)
                    .map(Storage::Wgpu)
            }
            BackendImpl::Cpu(be) => {
                let bias = bias.map(Storage::as_cpu).transpose()?;
                be.conv2d(x.as_cpu()?, w.as_cpu()?, bias, spec)
                    .map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let bias = bias.map(Storage::as_cuda).transpose()?;
                be.conv2d(x.as_cuda()?, w.as_cuda()?, bias, spec)
                    .map(Storage::Cuda)
            }
        }
    }

    pub(crate) fn fused(
        &self,
        expr: &Expr,
        inputs: &[(&Storage, usize)],
        n: usize,
    ) -> Result<Storage> {
        let ins: Vec<&Storage> = inputs.iter().map(|(s, _)| *s).collect();
        hybrid!(self, Elementwise, n, &ins, |be, s| {
            let moved: Vec<(&Storage, usize)> =
                s.iter().zip(inputs).map(|(s, (_, l))| (*s, *l)).collect();
            be.fused(expr, &moved, n)
        });
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => {
                let inputs = inputs
                    .iter()
                    .map(|(s, l)| Ok((s.as_wgpu()?, *l)))
                    .collect::<Result<Vec<_>>>()?;
                be.fused(expr, &inputs, n).map(Storage::Wgpu)
            }
            BackendImpl::Cpu(be) => {
                let inputs = inputs
                    .iter()
                    .map(|(s, l)| Ok((s.as_cpu()?, *l)))
                    .collect::<Result<Vec<_>>>()?;
                be.fused(expr, &inputs, n).map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let inputs = inputs
                    .iter()
                    .map(|(s, l)| Ok((s.as_cuda()?, *l)))
                    .collect::<Result<Vec<_>>>()?;
                be.fused(expr, &inputs, n).map(Storage::Cuda)
            }
        }
    }

    pub(crate) fn pool2d(&self, x: &Storage, spec: PoolSpec) -> Result<Storage> {
        hybrid!(
            self,
            Elementwise,
            spec.planes * spec.h * spec.w,
            &[x],
            |be, s| be.pool2d(s[0], spec)
        );
        dispatch!(self, be, [x = x], be.pool2d(x, spec))
    }

    pub(crate) fn copy(&self, parts: &[(&Storage, CopySpec)], n: usize) -> Result<Storage> {
        let ins: Vec<&Storage> = parts.iter().map(|(s, _)| *s).collect();
        hybrid!(self, Elementwise, n, &ins, |be, s| {
            let moved: Vec<(&Storage, CopySpec)> = s
                .iter()
                .zip(parts)
                .map(|(s, (_, c))| (*s, c.clone()))
                .collect();
            be.copy(&moved, n)
        });
        match self {
            BackendImpl::Meta | BackendImpl::Hybrid(_) => Ok(Storage::Meta),
            BackendImpl::Wgpu(be) => {
                let parts = parts
                    .iter()
                    .map(|(s, c)| Ok((s.as_wgpu()?, c.clone())))
                    .collect::<Result<Vec<_>>>()?;
                be.copy(&parts, n).map(Storage::Wgpu)
            }
            BackendImpl::Cpu(be) => {
                let parts = parts
                    .iter()
                    .map(|(s, c)| Ok((s.as_cpu()?, c.clone())))
                    .collect::<Result<Vec<_>>>()?;
                be.copy(&parts, n).map(Storage::Cpu)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => {
                let parts = parts
                    .iter()
                    .map(|(s, c)| Ok((s.as_cuda()?, c.clone())))
                    .collect::<Result<Vec<_>>>()?;
                be.copy(&parts, n).map(Storage::Cuda)
            }
        }
    }

    pub(crate) async fn read(&self, x: &Storage, n: usize) -> Result<Vec<f32>> {
        match (self, x) {
            (BackendImpl::Wgpu(b), Storage::Wgpu(x)) => b.read(x, n).await,
            (BackendImpl::Cpu(b), Storage::Cpu(x)) => b.read(x, n).await,
            #[cfg(cuda)]
            (BackendImpl::Cuda(b), Storage::Cuda(x)) => b.read(x, n).await,
            (BackendImpl::Hybrid(h), x) => h.read(x, n).await,
            _ => Err(mismatch()),
        }
    }

    pub(crate) async fn synchronize(&self) -> Result<()> {
        match self {
            BackendImpl::Meta => Ok(()),
            BackendImpl::Wgpu(b) => b.synchronize().await,
            BackendImpl::Cpu(b) => b.synchronize().await,
            #[cfg(cuda)]
            BackendImpl::Cuda(b) => b.synchronize().await,
            BackendImpl::Hybrid(h) => h.synchronize().await,
        }
    }
}
