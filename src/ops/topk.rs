//! Selection along the last axis: `argmax_last` and `topk_last`.
//!
//! Order: NaN above +inf above every number, -0 below +0, equal values by the lower index (a
//! total order on the bits, the same on every backend). Indices are u32 tensors (kernels
//! find them as f32, exact below 2^24 = 16,777,216 columns, then convert); values keep the
//! input's dtype.

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Monotone map of an f32 to a u32 key: larger value, larger key; NaN is the largest.
pub(crate) fn order_key(v: f32) -> u32 {
    let b = v.to_bits();
    if v.is_nan() {
        u32::MAX
    } else if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

impl Tensor {
    /// The `k` largest elements of each row and their column indices (u32), largest first:
    /// two tensors of shape `[.., k]`.
    pub fn topk_last(&self, k: usize) -> Result<(Tensor, Tensor)> {
        if self.dtype() != crate::DType::F32 || !self.is_contiguous() {
            let (values, indices) = self.floats("topk")?.topk_last(k)?;
            return Ok((values.cast(self.dtype())?, indices));
        }
        let Some((&cols, lead)) = self.shape().split_last() else {
            return Err(Error::InvalidArgument {
                op: "topk",
                reason: "a tensor of shape [] has no last axis".into(),
            });
        };
        if k > cols {
            return Err(Error::InvalidArgument {
                op: "topk",
                reason: format!("k = {k} is more than the {cols} columns"),
            });
        }
        if cols >= 1 << 24 {
            return Err(Error::InvalidArgument {
                op: "topk",
                reason: format!("{cols} columns: the kernels count columns below 2^24 only"),
            });
        }
        let rows = lead.iter().product();
        let mut shape = lead.to_vec();
        shape.push(k);
        self.device().check_output("topk", &shape)?;
        let spec = TopkSpec { rows, cols, k };
        let (values, indices) = self.device().op(&spec).topk(self.storage(), spec)?;
        let values = self.with_storage(values, shape.clone());
        let indices = self.with_storage(indices, shape);
        let values = values.verified("topk", [self], Tol::Exact, move |t| {
            Ok(t[0].topk_last(k)?.0)
        })?;
        let indices = indices.verified("topk", [self], Tol::Exact, move |t| {
            t[0].topk_last(k)?.1.cast(crate::DType::F32)
        })?;
        Ok((values, indices.cast(crate::DType::U32)?))
    }

    /// The index (u32) of the largest element along `axis` (the first, for ties; NaN counts
    /// as largest); with `keepdim` the axis stays with size 1.
    pub fn argmax_axis(&self, axis: usize, keepdim: bool) -> Result<Tensor> {
        let rank = self.shape().len();
        if axis >= rank {
            return Err(Error::InvalidArgument {
                op: "argmax",
                reason: format!("axis {axis} does not exist in a tensor of {rank} axes"),
            });
        }
        let out = self.axis_last(axis)?.argmax_last()?;
        out.reshape(&crate::ops::reduce::reduced_shape(
            self.shape(),
            axis,
            keepdim,
        ))
    }

    /// The column index (u32) of each row's largest element: shape `[..]`.
    pub fn argmax_last(&self) -> Result<Tensor> {
        if self.shape().last() == Some(&0) {
            return Err(Error::Empty {
                op: "argmax",
                shape: self.shape().to_vec(),
            });
        }
        let (_, indices) = self.topk_last(1)?;
        let lead = self.shape()[..self.shape().len() - 1].to_vec();
        indices.reshape(&lead)
    }
}

#[cfg(test)]
mod tests {
    use super::order_key;

    #[test]
    fn order_key_is_monotone_with_nan_on_top() {
        let xs = [
            f32::NEG_INFINITY,
            -1e30,
            -1.0,
            -1e-30,
            -0.0,
            0.0,
            1e-30,
            1.0,
            1e30,
            f32::INFINITY,
            f32::NAN,
        ];
        for w in xs.windows(2) {
            assert!(order_key(w[0]) < order_key(w[1]), "{} < {}", w[0], w[1]);
        }
    }
}

/// The `k` largest of each of `rows` rows of `cols` elements (values, then indices as f32), in
/// [`order_key`] order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopkSpec {
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
}

impl OpSpec for TopkSpec {
    fn name(&self) -> &'static str {
        "topk"
    }

    /// k selection rounds, each reading the row.
    fn work(&self) -> Work {
        let n = self.rows * self.cols;
        Work::Memory {
            elements: n,
            bytes: 4.0 * n as f64 * self.k.max(1) as f64,
        }
    }
}
