//! Matrix multiplication: 2-D `[m, k] x [k, n]`, and batched `[b, m, k] x [b, k, n]` where
//! either side may be 2-D and is then shared by every batch entry.
//!
//! [`MatmulOptions`] reads either operand transposed (no transposed copy is made) and fuses an
//! epilogue, a bias row then an activation, into the same dispatch: [`Tensor::linear`] is a
//! whole linear layer in one kernel.
//!
//! Accumulation is in f32 (fused multiply-add on GPUs); the op suite allows a relative error of
//! 1e-4 of the sum of |a_ik * b_kj|. `k = 0` gives zeros (then the epilogue).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::layout::strides;
use crate::ops::OpSpec;
use crate::ops::UnaryOp;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// An activation fused into the end of a matmul.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Activation {
    /// `max(x, 0)` (NaN stays NaN).
    Relu = 1,
    /// Exact (erf) GELU.
    Gelu = 2,
    /// GELU, tanh approximation.
    GeluTanh = 3,
    /// `x * sigmoid(x)`.
    Silu = 4,
}

impl Activation {
    /// The same function as a standalone unary op.
    pub fn as_unary(self) -> UnaryOp {
        match self {
            Activation::Relu => UnaryOp::Relu,
            Activation::Gelu => UnaryOp::Gelu,
            Activation::GeluTanh => UnaryOp::GeluTanh,
            Activation::Silu => UnaryOp::Silu,
        }
    }
}

/// How to read the operands and what to fuse after the product.
#[derive(Debug, Clone, Copy, Default)]
pub struct MatmulOptions<'a> {
    /// A is stored as `[.., k, m]`.
    pub transpose_a: bool,
    /// B is stored as `[.., n, k]` (the layout of PyTorch's `Linear.weight`).
    pub transpose_b: bool,
    /// Added to every output row: a tensor of `n` elements.
    pub bias: Option<&'a Tensor>,
    /// Applied after the bias.
    pub activation: Option<Activation>,
    /// [`Precision::F16`] multiplies in half precision: on cooperative matrices (tensor cores)
    /// where the adapter has them, else on shader-f16 where it has that.
    pub precision: Precision,
    /// Pins the tile configuration of the tiled kernel (`None`: the autotuner's choice for
    /// this adapter and size). An explicit tile the device cannot run is an error.
    pub tile: Option<MatmulTile>,
}

/// The arithmetic of a matmul.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// f32 inputs, f32 multiply-adds.
    #[default]
    F32,
    /// Inputs rounded to f16. Where the wgpu adapter has cooperative matrices (natively, NVIDIA
    /// over Vulkan: [`crate::DeviceFeatures::cooperative_matrix`]) the products run on tensor
    /// cores and are summed in f32, 2.6x the f32 speed at 4096 on an H100. Elsewhere they are
    /// multiplied in f16 within each k tile (16 or 32 products), tiles summed in f32: about
    /// 1e-3 relative error, up to twice the f32 speed. On adapters
    /// without shader-f16 (and on the CPU backend) the inputs are rounded the same way and the
    /// arithmetic is f32, so results agree within the f16 tolerance everywhere. On CUDA,
    /// cuBLAS multiplies the f16 inputs on tensor cores and accumulates in f32.
    F16,
    /// TF32 tensor-core arithmetic on CUDA (inputs keep 10 mantissa bits, f32 accumulation:
    /// about 1e-3 relative error, several times the f32 speed). An opt-in: other backends
    /// compute exact f32, which is within its tolerance.
    Tf32,
    /// Inputs rounded to bfloat16 (8 mantissa bits, f32's range), f32 accumulation: on CUDA
    /// through cuBLAS's tensor cores, on the CPU backend as rounding then f32 arithmetic; the
    /// wgpu backend (WGSL has no bf16) computes exact f32. About 1e-2 relative error.
    Bf16,
}

impl Precision {
    /// The precision's name: `f32`, `f16`, `tf32` or `bf16`.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
            Precision::Tf32 => "tf32",
            Precision::Bf16 => "bf16",
        }
    }
}

/// A tile configuration of the tiled matmul kernel: a workgroup of 16 x 16 invocations
/// computes a `16 * rows` x `16 * cols` output tile, stepping `depth` along k. The autotuner
/// times [`MatmulTile::CANDIDATES`] on first use and remembers the fastest per adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct MatmulTile {
    /// Output rows per invocation: 4 or 8.
    pub rows: u32,
    /// Output columns per invocation: 4 or 8.
    pub cols: u32,
    /// k per workgroup-memory tile: 8, 16 or 32.
    pub depth: u32,
}

impl MatmulTile {
    /// The default before (or without) tuning: 64 x 64 outputs, k tiles of 16.
    pub const DEFAULT: MatmulTile = MatmulTile::new(4, 4, 16);

    /// The configurations the autotuner times.
    pub const CANDIDATES: [MatmulTile; 6] = [
        MatmulTile::DEFAULT,
        MatmulTile::new(4, 4, 32),
        MatmulTile::new(8, 4, 16),
        MatmulTile::new(4, 8, 16),
        MatmulTile::new(8, 8, 8),
        MatmulTile::new(8, 8, 16),
    ];

    /// A configuration; [`MatmulTile::check`] says whether it is one the kernel supports.
    pub const fn new(rows: u32, cols: u32, depth: u32) -> MatmulTile {
        MatmulTile { rows, cols, depth }
    }

    /// Output rows of one workgroup's tile.
    pub fn tile_m(self) -> u32 {
        16 * self.rows
    }

    /// Output columns of one workgroup's tile.
    pub fn tile_n(self) -> u32 {
        16 * self.cols
    }

    /// Bytes of workgroup memory the tile needs with `f16` or f32 tiles.
    pub fn workgroup_bytes(self, f16: bool) -> u32 {
        let elem = if f16 { 2 } else { 4 };
        (self.tile_m() + self.tile_n()) * self.depth * elem
    }

    /// Whether the f32 and f16 tile kernels have this configuration.
    pub(crate) fn supported(self) -> bool {
        matches!(self.rows, 4 | 8)
            && matches!(self.cols, 4 | 8)
            && matches!(self.depth, 8 | 16 | 32)
    }

    /// Ok when the kernel has this configuration.
    pub fn check(self) -> Result<()> {
        if self.supported() {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                op: "matmul",
                reason: format!(
                    "tile {self} is not supported (rows and cols 4 or 8, depth 8, 16 or 32)"
                ),
            })
        }
    }
}

impl std::fmt::Display for MatmulTile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}", self.tile_m(), self.tile_n(), self.depth)
    }
}

/// The longest k one wgpu matmul dispatch sums; longer products are split along k and the
/// parts added. Mesa's llvmpipe (lavapipe) stops all the loops of one shader invocation
/// together after 65,535 iterations, silently, and the tiled kernel's k loop runs k / 8 or
/// k / 16 times; 2^18 keeps it at 32,768. On other adapters the split costs one add per 2^18
/// of k, nothing next to the product. (Natively: the browser's WebGPU never runs on lavapipe.)
pub const WGPU_MAX_K: usize = 1 << 18;

/// Everything a backend needs besides the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulSpec {
    pub dims: MatmulDims,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub activation: Option<Activation>,
    pub precision: Precision,
    pub tile: Option<MatmulTile>,
    /// The dtype A, B and the output are stored in: f32, or f16/bf16 where the backend takes
    /// half-precision storage directly ([`BackendImpl::matmul_stores_halves`]).
    pub storage: DType,
    /// The dtype B is stored in: `storage`, or f16/bf16 under f32 A and output where the
    /// backend multiplies such weights as stored ([`BackendImpl::matmul_takes_half_weights`]).
    pub weight: DType,
}

/// The sizes of one matmul, as the backends receive them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulDims {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Elements between batch entries of A (0: A is shared by every entry).
    pub a_stride: usize,
    /// Elements between batch entries of B (0: B is shared).
    pub b_stride: usize,
}

pub(crate) fn dims(
    a: &[usize],
    b: &[usize],
    ta: bool,
    tb: bool,
) -> Result<(MatmulDims, Vec<usize>)> {
    let hint =
        "(expected [m, k] or [batch, m, k] times [k, n] or [batch, k, n], with equal k and batch)";
    let split = |s: &[usize]| -> Option<(Option<usize>, usize, usize)> {
        match *s {
            [r, c] => Some((None, r, c)),
            [bt, r, c] => Some((Some(bt), r, c)),
            _ => None,
        }
    };
    let (Some((ba, r0, c0)), Some((bb, r1, c1))) = (split(a), split(b)) else {
        return Err(Error::shape("matmul", a, b, hint));
    };
    let (m, k) = if ta { (c0, r0) } else { (r0, c0) };
    let (kb, n) = if tb { (c1, r1) } else { (r1, c1) };
    if k != kb {
        return Err(Error::shape("matmul", a, b, hint));
    }
    let batch = match (ba, bb) {
        (Some(x), Some(y)) if x != y => return Err(Error::shape("matmul", a, b, hint)),
        (Some(x), _) | (None, Some(x)) => Some(x),
        (None, None) => None,
    };
    let d = MatmulDims {
        batch: batch.unwrap_or(1),
        m,
        k,
        n,
        a_stride: if ba.is_some() { m * k } else { 0 },
        b_stride: if bb.is_some() { k * n } else { 0 },
    };
    let shape = match batch {
        Some(bt) => vec![bt, m, n],
        None => vec![m, n],
    };
    Ok((d, shape))
}

impl Tensor {
    /// `self x rhs`. See the module docs for the shapes accepted.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.matmul_with(rhs, MatmulOptions::default())
    }

    /// `act(op(self) x op(rhs) + bias)`, in one dispatch; see [`MatmulOptions`].
    pub fn matmul_with(&self, rhs: &Tensor, options: MatmulOptions<'_>) -> Result<Tensor> {
        self.same_device(rhs, "matmul")?;
        // A transposed view is read as its source with the transpose flag flipped (no copy).
        if let Some(a) = self.transposed_source() {
            let options = MatmulOptions {
                transpose_a: !options.transpose_a,
                ..options
            };
            return a.matmul_with(rhs, options);
        }
        if let Some(b) = rhs.transposed_source() {
            let options = MatmulOptions {
                transpose_b: !options.transpose_b,
                ..options
            };
            return self.matmul_with(&b, options);
        }
        let (ta, tb) = (options.transpose_a, options.transpose_b);
        let (dims, shape) = dims(self.shape(), rhs.shape(), ta, tb)?;
        if let Some(bias) = options.bias {
            bias.same_device(self, "matmul bias")?;
            if bias.len() != dims.n {
                return Err(Error::shape(
                    "matmul bias",
                    bias.shape(),
                    &[dims.n],
                    "(the bias has one value per output column)",
                ));
            }
        }
        let mut inputs = vec![self, rhs];
        inputs.extend(options.bias);
        // An f16 or bf16 weight under f32 rows goes as stored to a backend that widens it as
        // it reads (the CPU's few-row product), rather than converted on every call.
        let weight = if self.dtype() == DType::F32
            && rhs.dtype().size() == 2
            && options.bias.is_none_or(|b| b.dtype() == DType::F32)
            && options.precision == Precision::F32
            && self
                .device()
                .backend()
                .matmul_takes_half_weights(rhs.dtype(), &dims, ta, tb)
        {
            rhs.dtype()
        } else {
            DType::F32
        };
        // Half-precision operands of one dtype go to a backend that multiplies them as they
        // are stored (cuBLAS on CUDA); elsewhere they are converted around an f32 product.
        let halves = self.dtype().size() == 2 && rhs.dtype() == self.dtype();
        let storage = if halves
            && options.bias.is_none()
            && options.activation.is_none()
            && self
                .device()
                .backend()
                .matmul_stores_halves(self.dtype(), &dims, ta || tb)
        {
            self.dtype()
        } else {
            DType::F32
        };
        let weight = if storage == DType::F32 {
            weight
        } else {
            storage
        };
        if storage == DType::F32 && weight == DType::F32 {
            if let Some(out) = Tensor::promoted("matmul", &inputs, |t| {
                let bias = options.bias.map(|_| t[2]);
                t[0].matmul_with(t[1], MatmulOptions { bias, ..options })
            })? {
                return Ok(out);
            }
        }
        let spec = MatmulSpec {
            dims,
            transpose_a: ta,
            transpose_b: tb,
            activation: options.activation,
            precision: options.precision,
            tile: options.tile,
            storage,
            weight,
        };
        if let Some(tile) = options.tile {
            tile.check()?;
        }
        self.device().check_output_of("matmul", &shape, storage)?;
        #[cfg(native)]
        if dims.k > WGPU_MAX_K && self.device().backend().splits_long_products() {
            return self.matmul_split_k(rhs, options, dims.k);
        }
        let bias = options.bias.map(Tensor::storage);
        let data = self
            .device()
            .op(&spec)
            .matmul(self.storage(), rhs.storage(), bias, spec)?;
        let out = Tensor::new_typed(self.device().clone(), data, shape, storage);
        let tol = match (options.precision, storage) {
            (Precision::F32, DType::F32) => Tol::Accumulate,
            _ => Tol::Reduced,
        };
        let (activation, precision) = (options.activation, options.precision);
        out.verified_many("matmul", &inputs, tol, move |t| {
            let options = MatmulOptions {
                transpose_a: ta,
                transpose_b: tb,
                bias: t.get(2).copied(),
                activation,
                precision,
                tile: None,
            };
            t[0].matmul_with(t[1], options)
        })
    }

    /// The row-major tensor this view is the transpose of (its last two axes swapped, the
    /// others untouched), if it is one.
    fn transposed_source(&self) -> Option<Tensor> {
        let v = self.view()?;
        let rank = self.shape().len();
        if rank < 2 || v.offset != 0 || v.base != self.len() {
            return None;
        }
        let mut source = self.shape().to_vec();
        source.swap(rank - 2, rank - 1);
        let mut want = strides(&source);
        want.swap(rank - 2, rank - 1);
        (v.strides == want)
            .then(|| self.base().reshape(&source))
            .and_then(Result::ok)
    }

    /// A product longer than [`WGPU_MAX_K`] on wgpu: the partial products of slices of k,
    /// added, then the bias and the activation. Native only: lavapipe is the one adapter that
    /// needs it, and the browser's WebGPU never runs on it.
    #[cfg(native)]
    fn matmul_split_k(&self, rhs: &Tensor, options: MatmulOptions<'_>, k: usize) -> Result<Tensor> {
        let (ra, rb) = (self.shape().len(), rhs.shape().len());
        let a_axis = if options.transpose_a { ra - 2 } else { ra - 1 };
        let b_axis = if options.transpose_b { rb - 1 } else { rb - 2 };
        // The parts run the default tile unless one is asked for: on lavapipe the tuner's
        // other tiles (4 x 8 x 16 seen) still gave wrong sums at 2^18 per part, the default
        // never did.
        let plain = MatmulOptions {
            bias: None,
            activation: None,
            tile: options.tile.or(Some(MatmulTile::DEFAULT)),
            ..options
        };
        let mut sum: Option<Tensor> = None;
        for start in (0..k).step_by(WGPU_MAX_K) {
            let range = start..(start + WGPU_MAX_K).min(k);
            let a = self.slice(a_axis, range.clone())?;
            let b = rhs.slice(b_axis, range)?;
            let part = a.matmul_with(&b, plain)?;
            sum = Some(match sum {
                Some(s) => s.add(&part)?,
                None => part,
            });
        }
        let Some(mut out) = sum else {
            return Err(Error::InvalidArgument {
                op: "matmul",
                reason: "a split product needs a non-empty k".into(),
            });
        };
        if let Some(bias) = options.bias {
            out = out.add(&bias.reshape(&[bias.len()])?)?;
        }
        if let Some(act) = options.activation {
            out = out.unary(act.as_unary())?;
        }
        Ok(out)
    }

    /// A linear layer, `act(self x weight^T + bias)`, with `weight` stored `[out, in]` as in
    /// PyTorch: one dispatch.
    pub fn linear(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        activation: Option<Activation>,
    ) -> Result<Tensor> {
        let options = MatmulOptions {
            transpose_a: false,
            transpose_b: true,
            bias,
            activation,
            ..MatmulOptions::default()
        };
        self.matmul_with(weight, options)
    }
}

impl OpSpec for MatmulSpec {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn work(&self) -> Work {
        let d = self.dims;
        Work::Flops(2.0 * d.batch as f64 * d.m as f64 * d.n as f64 * d.k as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::dims;

    #[test]
    fn shapes_and_broadcast_batch() {
        let (d, s) = dims(&[2, 3], &[3, 4], false, false).unwrap();
        assert_eq!(
            (d.batch, d.m, d.k, d.n, d.a_stride, d.b_stride, s),
            (1, 2, 3, 4, 0, 0, vec![2, 4])
        );
        let (d, s) = dims(&[5, 2, 3], &[3, 4], false, false).unwrap();
        assert_eq!(
            (d.batch, d.a_stride, d.b_stride, s),
            (5, 6, 0, vec![5, 2, 4])
        );
        let (d, s) = dims(&[2, 3], &[5, 3, 4], false, false).unwrap();
        assert_eq!(
            (d.batch, d.a_stride, d.b_stride, s),
            (5, 0, 12, vec![5, 2, 4])
        );
        assert!(dims(&[2, 3], &[4, 3], false, false).is_err());
        assert!(dims(&[2, 2, 3], &[3, 3, 4], false, false).is_err());
        assert!(dims(&[3], &[3, 4], false, false).is_err());
        let (d, s) = dims(&[3, 2], &[4, 3], true, true).unwrap();
        assert_eq!((d.m, d.k, d.n, s), (2, 3, 4, vec![2, 4]));
        assert!(dims(&[3, 2], &[3, 4], false, false).is_err());
    }
}
