//! Matrix multiplication: 2-D `[m, k] x [k, n]`, and batched `[b, m, k] x [b, k, n]` where
//! either side may be 2-D and is then shared by every batch entry.
//!
//! [`MatmulOptions`] reads either operand transposed (no transposed copy is made) and fuses an
//! epilogue, a bias row then an activation, into the same dispatch: [`Tensor::linear`] is a
//! whole linear layer in one kernel.
//!
//! Accumulation is in f32 (fused multiply-add on GPUs); the op suite allows a relative error of
//! 1e-4 of the sum of |a_ik * b_kj|. `k = 0` gives zeros (then the epilogue).

use crate::error::{Error, Result};
use crate::ops::UnaryOp;
use crate::tensor::Tensor;

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
}

/// Everything a backend needs besides the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MatmulSpec {
    pub dims: MatmulDims,
    pub transpose_a: bool,
    pub transpose_b: bool,
    pub activation: Option<Activation>,
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

fn dims(a: &[usize], b: &[usize], ta: bool, tb: bool) -> Result<(MatmulDims, Vec<usize>)> {
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
        let spec = MatmulSpec {
            dims,
            transpose_a: ta,
            transpose_b: tb,
            activation: options.activation,
        };
        let bias = options.bias.map(Tensor::storage);
        let storage = self
            .device()
            .backend()
            .matmul(self.storage(), rhs.storage(), bias, spec)?;
        Ok(self.with_storage(storage, shape))
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
        };
        self.matmul_with(weight, options)
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
