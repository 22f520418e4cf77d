//! Matrix multiplication: 2-D `[m, k] x [k, n]`, and batched `[b, m, k] x [b, k, n]` where
//! either side may be 2-D and is then shared by every batch entry.
//!
//! Accumulation is in f32 (fused multiply-add on GPUs); the op suite allows a relative error of
//! 1e-4 of the sum of |a_ik * b_kj|. `k = 0` gives zeros.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

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

fn dims(a: &[usize], b: &[usize]) -> Result<(MatmulDims, Vec<usize>)> {
    let hint =
        "(expected [m, k] or [batch, m, k] times [k, n] or [batch, k, n], with equal k and batch)";
    let split = |s: &[usize]| -> Option<(Option<usize>, usize, usize)> {
        match *s {
            [r, c] => Some((None, r, c)),
            [bt, r, c] => Some((Some(bt), r, c)),
            _ => None,
        }
    };
    let (Some((ba, m, k)), Some((bb, kb, n))) = (split(a), split(b)) else {
        return Err(Error::shape("matmul", a, b, hint));
    };
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
        self.same_device(rhs, "matmul")?;
        let (d, shape) = dims(self.shape(), rhs.shape())?;
        let storage = self
            .device()
            .backend()
            .matmul(self.storage(), rhs.storage(), d)?;
        Ok(self.with_storage(storage, shape))
    }
}

#[cfg(test)]
mod tests {
    use super::dims;

    #[test]
    fn shapes_and_broadcast_batch() {
        let (d, s) = dims(&[2, 3], &[3, 4]).unwrap();
        assert_eq!(
            (d.batch, d.m, d.k, d.n, d.a_stride, d.b_stride, s),
            (1, 2, 3, 4, 0, 0, vec![2, 4])
        );
        let (d, s) = dims(&[5, 2, 3], &[3, 4]).unwrap();
        assert_eq!(
            (d.batch, d.a_stride, d.b_stride, s),
            (5, 6, 0, vec![5, 2, 4])
        );
        let (d, s) = dims(&[2, 3], &[5, 3, 4]).unwrap();
        assert_eq!(
            (d.batch, d.a_stride, d.b_stride, s),
            (5, 0, 12, vec![5, 2, 4])
        );
        assert!(dims(&[2, 3], &[4, 3]).is_err());
        assert!(dims(&[2, 2, 3], &[3, 3, 4]).is_err());
        assert!(dims(&[3], &[3, 4]).is_err());
    }
}
