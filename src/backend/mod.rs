//! The backend trait and the closed enums that dispatch to each backend.
//!
//! A backend receives requests that the ops layer has already validated (shapes agree,
//! parameters make sense); it checks only what depends on the device (limits, memory, loss).
//! Every op passes its storages (and host data such as token ids) and one spec struct from
//! `ops/`; [`BackendImpl`] routes each op with one `dispatch!` line, the same way for every
//! variant.

pub(crate) mod collective;
pub(crate) mod control;
pub(crate) mod cpu;
#[cfg(cuda)]
pub(crate) mod cuda;
pub(crate) mod hybrid;
mod in_place;
pub(crate) mod open;
pub(crate) mod replay;
pub(crate) mod wgpu;

use crate::error::{Error, Result};
use crate::ops::attention::AttentionSpec;
use crate::ops::cast::CastSpec;
use crate::ops::compare::CompareSpec;
use crate::ops::conv::ConvSpec;
use crate::ops::elementwise::{BinarySpec, StridedSpec, UnarySpec, WhereSpec};
use crate::ops::embedding::EmbeddingSpec;
use crate::ops::fused::FusedSpec;
use crate::ops::layout::LayoutSpec;
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::pool::PoolSpec;
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantSpec};
use crate::ops::reduce::{DotSpec, ReduceSpec};
use crate::ops::rope::RopeSpec;
use crate::ops::softmax::SoftmaxSpec;
use crate::ops::topk::TopkSpec;
use crate::ops::OpSpec;

/// A storage and how many elements of it repeat (`n` for a full operand, a row's length, 1 for
/// a scalar): how backends' elementwise kernels read broadcast inputs.
pub(crate) type Operand<'a, S> = (&'a S, usize);

/// What every backend implements: one method per op, taking the op's storages (and host data),
/// then its spec. Lengths are element counts. Storages are 32-bit words (see [`crate::dtype`]);
/// every op but `cast` reads and writes f32 data unless its spec names another dtype.
pub(crate) trait BackendOps {
    type Storage;

    /// Copies host data into a new device buffer.
    fn upload(&self, data: &[f32]) -> Result<Self::Storage>;
    /// Converts elements between dtypes (see [`CastSpec`] and [`crate::dtype`]).
    fn cast(&self, x: &Self::Storage, spec: CastSpec) -> Result<Self::Storage>;
    /// Comparisons and integer arithmetic (see [`CompareSpec`]).
    fn compare(
        &self,
        a: &Self::Storage,
        b: &Self::Storage,
        spec: CompareSpec,
    ) -> Result<Self::Storage>;
    /// See [`UnarySpec`].
    fn unary(&self, x: &Self::Storage, spec: UnarySpec) -> Result<Self::Storage>;
    /// See [`BinarySpec`].
    fn binary(
        &self,
        a: &Self::Storage,
        b: &Self::Storage,
        spec: BinarySpec,
    ) -> Result<Self::Storage>;
    /// A unary or binary op over operands read through strides (see [`StridedSpec`]); `b`
    /// is given exactly when the op is binary.
    fn strided(
        &self,
        a: &Self::Storage,
        b: Option<&Self::Storage>,
        spec: StridedSpec,
    ) -> Result<Self::Storage>;
    /// `where(cond, a, b)` (see [`WhereSpec`]).
    fn where_select(
        &self,
        cond: &Self::Storage,
        a: &Self::Storage,
        b: &Self::Storage,
        spec: WhereSpec,
    ) -> Result<Self::Storage>;
    /// See [`ReduceSpec`].
    fn reduce(&self, x: &Self::Storage, spec: ReduceSpec) -> Result<Self::Storage>;
    /// See [`DotSpec`].
    fn dot(&self, a: &Self::Storage, b: &Self::Storage, spec: DotSpec) -> Result<Self::Storage>;
    /// See [`SoftmaxSpec`].
    fn softmax(&self, x: &Self::Storage, spec: SoftmaxSpec) -> Result<Self::Storage>;
    /// `act(op(a) x op(b) + bias)` for each batch entry (see [`MatmulSpec`]).
    fn matmul(
        &self,
        a: &Self::Storage,
        b: &Self::Storage,
        bias: Option<&Self::Storage>,
        spec: MatmulSpec,
    ) -> Result<Self::Storage>;
    /// See [`FusedSpec`]: one input per leaf of its expression.
    fn fused(&self, inputs: &[&Self::Storage], spec: &FusedSpec<'_>) -> Result<Self::Storage>;
    /// layernorm or rmsnorm of each row, then `* weight + bias` (see [`NormSpec`]).
    fn norm(
        &self,
        x: &Self::Storage,
        weight: Option<&Self::Storage>,
        bias: Option<&Self::Storage>,
        spec: NormSpec,
    ) -> Result<Self::Storage>;
    /// Strided copies of `parts` into a new tensor (see [`LayoutSpec`]).
    fn copy(&self, parts: &[&Self::Storage], spec: &LayoutSpec) -> Result<Self::Storage>;
    /// Rows of a table picked by u32 ids (see [`EmbeddingSpec`]; ids at or above the
    /// vocabulary give NaN rows).
    fn embedding(
        &self,
        table: &Self::Storage,
        ids: &Self::Storage,
        spec: EmbeddingSpec,
    ) -> Result<Self::Storage>;
    /// See [`RopeSpec`].
    fn rope(
        &self,
        x: &Self::Storage,
        cos: &Self::Storage,
        sin: &Self::Storage,
        spec: RopeSpec,
    ) -> Result<Self::Storage>;
    /// Fused attention (see [`AttentionSpec`]); `lens` (u32 words, one per batch entry,
    /// clamped to the key count) hides keys per batch entry.
    fn attention(
        &self,
        q: &Self::Storage,
        k: &Self::Storage,
        v: &Self::Storage,
        lens: Option<&Self::Storage>,
        spec: AttentionSpec,
    ) -> Result<Self::Storage>;
    /// See [`TopkSpec`].
    fn topk(&self, x: &Self::Storage, spec: TopkSpec) -> Result<(Self::Storage, Self::Storage)>;
    /// `rope(rms_norm(x, norm) x w^T) (+ residual)` with `w` quantized (see
    /// [`QuantMatmulSpec`]; `w` as [`QuantSpec::parts`] reads it).
    fn matmul_quant(
        &self,
        x: &Self::Storage,
        w: &[&Self::Storage],
        around: &QuantAround<'_, Self::Storage>,
        spec: QuantMatmulSpec,
    ) -> Result<Self::Storage>;
    /// What a quantized product's backend runs apart from its kernel (prompts, the CPU, wgpu
    /// asked for both): `out`, the `[m, n]` product, rotated by `around`'s rope tables when
    /// `spec.rope` says so, then `around`'s residual added.
    fn quant_rope_and_add(
        &self,
        mut out: Self::Storage,
        around: &QuantAround<'_, Self::Storage>,
        spec: QuantMatmulSpec,
    ) -> Result<Self::Storage> {
        let n = spec.m * spec.weight.rows;
        if let (Some((cos, sin)), Some(dim)) = (around.rope, spec.rope) {
            let rope = RopeSpec {
                n,
                seq: n / dim,
                dim,
                layout: crate::RopeLayout::Interleaved,
            };
            out = self.rope(&out, cos, sin, rope)?;
        }
        if let Some(r) = around.residual {
            let add = BinarySpec {
                op: crate::ops::elementwise::BinaryOp::Add,
                n,
                a_len: n,
                b_len: n,
            };
            out = self.binary(&out, r, add)?;
        }
        Ok(out)
    }
    /// The f32 matrix of quantized blocks (see [`QuantSpec`]).
    fn dequantize(&self, w: &[&Self::Storage], spec: QuantSpec) -> Result<Self::Storage>;
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

/// One backend's result as the enum's: a storage, or a pair of them (top-k).
trait Wrap<T> {
    fn wrap(self) -> T;
}

/// The result of a shape-only device.
trait MetaOutput {
    fn meta() -> Self;
}

impl MetaOutput for Storage {
    fn meta() -> Storage {
        Storage::Meta
    }
}

impl MetaOutput for (Storage, Storage) {
    fn meta() -> (Storage, Storage) {
        (Storage::Meta, Storage::Meta)
    }
}

impl<A: Wrap<Storage>> Wrap<(Storage, Storage)> for (A, A) {
    fn wrap(self) -> (Storage, Storage) {
        (self.0.wrap(), self.1.wrap())
    }
}

macro_rules! wrap {
    ($variant:ident, $ty:ty) => {
        impl Wrap<Storage> for $ty {
            fn wrap(self) -> Storage {
                Storage::$variant(self)
            }
        }
    };
}
wrap!(Wgpu, self::wgpu::WgpuStorage);
wrap!(Cpu, cpu::CpuStorage);
#[cfg(cuda)]
wrap!(Cuda, cuda::CudaStorage);

/// An operand as one backend's storage: `one` (a storage), `opt` (an optional one), `list`, or
/// `around` (a [`QuantAround`]).
macro_rules! cast {
    (one, $s:expr, $as:ident) => {
        $s.$as()?
    };
    (opt, $s:expr, $as:ident) => {
        $s.map(Storage::$as).transpose()?
    };
    (list, $s:expr, $as:ident) => {
        &$s.iter().map(|s| s.$as()).collect::<Result<Vec<_>>>()?
    };
    (around, $s:expr, $as:ident) => {
        &$s.try_map(Storage::$as)?
    };
}

/// Adds an operand's storages to a hybrid device's input list.
macro_rules! push {
    (one, $v:ident, $s:expr) => {
        $v.push($s)
    };
    (opt, $v:ident, $s:expr) => {
        $v.extend($s)
    };
    (list, $v:ident, $s:expr) => {
        $v.extend($s.iter().copied())
    };
    (around, $v:ident, $s:expr) => {
        $v.extend($s.all())
    };
}

/// Takes an operand back from a hybrid device's placed inputs, in `push!` order.
macro_rules! take {
    (one, $it:ident, $s:expr) => {
        $it.next().ok_or_else(mismatch)?
    };
    (opt, $it:ident, $s:expr) => {
        match $s {
            Some(_) => Some($it.next().ok_or_else(mismatch)?),
            None => None,
        }
    };
    (list, $it:ident, $s:expr) => {
        &$it.by_ref().take($s.len()).collect::<Vec<_>>()
    };
    (around, $it:ident, $s:expr) => {
        &$s.try_map(|_| $it.next().ok_or_else(mismatch))?
    };
}

/// One op on whichever backend this is: `dispatch!(self.op(kind storage, ..; args..), spec)`.
/// Each variant casts the storages to its own and calls its method; a shape-only device
/// returns empty storage; a hybrid device places the storages on the side its policy picks
/// for `spec`'s work and calls the op there.
macro_rules! dispatch {
    ($self:ident . $m:ident ($($kind:ident $s:expr),* ; $($arg:expr),*), $spec:expr) => {
        match $self {
            BackendImpl::Wgpu(be) => be.$m($(cast!($kind, $s, as_wgpu)),*, $($arg),*).map(Wrap::wrap),
            BackendImpl::Cpu(be) => be.$m($(cast!($kind, $s, as_cpu)),*, $($arg),*).map(Wrap::wrap),
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => be.$m($(cast!($kind, $s, as_cuda)),*, $($arg),*).map(Wrap::wrap),
            BackendImpl::Meta => Ok(MetaOutput::meta()),
            BackendImpl::Hybrid(h) => {
                let mut inputs: Vec<&Storage> = Vec::new();
                $(push!($kind, inputs, $s);)*
                h.run($spec.work(), &inputs, |be, placed| {
                    let mut it = placed.iter().copied();
                    be.$m($(take!($kind, it, $s)),*, $($arg),*)
                })
            }
        }
    };
}

impl BackendImpl {
    /// The wgpu backend doing the GPU work, if any (a hybrid device's adapter included).
    pub(crate) fn wgpu(&self) -> Option<&self::wgpu::WgpuBackend> {
        match self {
            BackendImpl::Wgpu(b) => Some(b),
            BackendImpl::Hybrid(h) => h.gpu.wgpu(),
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
        match self {
            BackendImpl::Wgpu(be) => be.upload(data).map(Storage::Wgpu),
            BackendImpl::Cpu(be) => be.upload(data).map(Storage::Cpu),
            #[cfg(cuda)]
            BackendImpl::Cuda(be) => be.upload(data).map(Storage::Cuda),
            BackendImpl::Meta => Ok(Storage::Meta),
            // A hybrid device keeps new data on the host until an op on the adapter needs it.
            BackendImpl::Hybrid(h) => h.cpu.upload(data),
        }
    }

    pub(crate) fn cast(&self, x: &Storage, spec: CastSpec) -> Result<Storage> {
        dispatch!(self.cast(one x; spec), spec)
    }

    pub(crate) fn compare(&self, a: &Storage, b: &Storage, spec: CompareSpec) -> Result<Storage> {
        dispatch!(self.compare(one a, one b; spec), spec)
    }

    pub(crate) fn unary(&self, x: &Storage, spec: UnarySpec) -> Result<Storage> {
        dispatch!(self.unary(one x; spec), spec)
    }

    pub(crate) fn binary(&self, a: &Storage, b: &Storage, spec: BinarySpec) -> Result<Storage> {
        dispatch!(self.binary(one a, one b; spec), spec)
    }

    pub(crate) fn strided(
        &self,
        a: &Storage,
        b: Option<&Storage>,
        spec: StridedSpec,
    ) -> Result<Storage> {
        dispatch!(self.strided(one a, opt b; spec), spec)
    }

    pub(crate) fn where_select(
        &self,
        cond: &Storage,
        a: &Storage,
        b: &Storage,
        spec: WhereSpec,
    ) -> Result<Storage> {
        dispatch!(self.where_select(one cond, one a, one b; spec), spec)
    }

    pub(crate) fn reduce(&self, x: &Storage, spec: ReduceSpec) -> Result<Storage> {
        dispatch!(self.reduce(one x; spec), spec)
    }

    pub(crate) fn dot(&self, a: &Storage, b: &Storage, spec: DotSpec) -> Result<Storage> {
        dispatch!(self.dot(one a, one b; spec), spec)
    }

    pub(crate) fn softmax(&self, x: &Storage, spec: SoftmaxSpec) -> Result<Storage> {
        dispatch!(self.softmax(one x; spec), spec)
    }

    pub(crate) fn matmul(
        &self,
        a: &Storage,
        b: &Storage,
        bias: Option<&Storage>,
        spec: MatmulSpec,
    ) -> Result<Storage> {
        dispatch!(self.matmul(one a, one b, opt bias; spec), spec)
    }

    pub(crate) fn fused(&self, inputs: &[&Storage], spec: &FusedSpec<'_>) -> Result<Storage> {
        dispatch!(self.fused(list inputs; spec), spec)
    }

    pub(crate) fn norm(
        &self,
        x: &Storage,
        weight: Option<&Storage>,
        bias: Option<&Storage>,
        spec: NormSpec,
    ) -> Result<Storage> {
        dispatch!(self.norm(one x, opt weight, opt bias; spec), spec)
    }

    pub(crate) fn copy(&self, parts: &[&Storage], spec: &LayoutSpec) -> Result<Storage> {
        dispatch!(self.copy(list parts; spec), spec)
    }

    pub(crate) fn embedding(
        &self,
        table: &Storage,
        ids: &Storage,
        spec: EmbeddingSpec,
    ) -> Result<Storage> {
        dispatch!(self.embedding(one table, one ids; spec), spec)
    }

    pub(crate) fn rope(
        &self,
        x: &Storage,
        cos: &Storage,
        sin: &Storage,
        spec: RopeSpec,
    ) -> Result<Storage> {
        dispatch!(self.rope(one x, one cos, one sin; spec), spec)
    }

    pub(crate) fn attention(
        &self,
        q: &Storage,
        k: &Storage,
        v: &Storage,
        lens: Option<&Storage>,
        spec: AttentionSpec,
    ) -> Result<Storage> {
        dispatch!(self.attention(one q, one k, one v, opt lens; spec), spec)
    }

    pub(crate) fn topk(&self, x: &Storage, spec: TopkSpec) -> Result<(Storage, Storage)> {
        dispatch!(self.topk(one x; spec), spec)
    }

    pub(crate) fn matmul_quant(
        &self,
        x: &Storage,
        w: &[&Storage],
        around: &QuantAround<'_, Storage>,
        spec: QuantMatmulSpec,
    ) -> Result<Storage> {
        dispatch!(self.matmul_quant(one x, list w, around around; spec), spec)
    }

    pub(crate) fn dequantize(&self, w: &[&Storage], spec: QuantSpec) -> Result<Storage> {
        dispatch!(self.dequantize(list w; spec), spec)
    }

    pub(crate) fn conv2d(
        &self,
        x: &Storage,
        w: &Storage,
        bias: Option<&Storage>,
        spec: ConvSpec,
    ) -> Result<Storage> {
        dispatch!(self.conv2d(one x, one w, opt bias; spec), spec)
    }

    pub(crate) fn pool2d(&self, x: &Storage, spec: PoolSpec) -> Result<Storage> {
        dispatch!(self.pool2d(one x; spec), spec)
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
