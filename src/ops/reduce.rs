//! Reductions, computed entirely on the device: sum, mean, max and min over all elements or
//! along the last axis, and the dot product.
//!
//! # Empty input and NaN
//! The sum of nothing is 0. Mean, max and min of an empty tensor (or along an empty last axis)
//! are [`Error::Empty`]: they have no value. A NaN anywhere in the reduced elements makes the
//! result NaN, for max and min too (unlike `f32::max`, which skips NaN).

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum ReduceOp {
    /// Sum (0 for no elements).
    Sum = 0,
    /// Arithmetic mean.
    Mean = 1,
    /// Maximum (NaN if any element is NaN).
    Max = 2,
    /// Minimum (NaN if any element is NaN).
    Min = 3,
}

impl ReduceOp {
    /// Every reduction.
    pub const ALL: [ReduceOp; 4] = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

impl Tensor {
    /// Reduces every element to a one-element tensor of shape `[]`.
    pub fn reduce(&self, op: ReduceOp) -> Result<Tensor> {
        self.reduce_rows(op, 1, self.len(), Vec::new())
    }

    /// Reduces along the last axis: shape `[.., k]` becomes `[..]`.
    pub fn reduce_last(&self, op: ReduceOp) -> Result<Tensor> {
        let Some((&cols, lead)) = self.shape().split_last() else {
            return Err(Error::InvalidArgument {
                op: op.name(),
                reason: "a tensor of shape [] has no last axis; use the all-element reduction"
                    .into(),
            });
        };
        self.reduce_rows(op, lead.iter().product(), cols, lead.to_vec())
    }

    fn reduce_rows(
        &self,
        op: ReduceOp,
        rows: usize,
        cols: usize,
        shape: Vec<usize>,
    ) -> Result<Tensor> {
        if cols == 0 && rows > 0 && op != ReduceOp::Sum {
            return Err(Error::Empty {
                op: op.name(),
                shape: self.shape().to_vec(),
            });
        }
        self.device().check_output(op.name(), &shape)?;
        let spec = ReduceSpec { op, rows, cols };
        let storage = self.device().op(&spec).reduce(self.storage(), spec)?;
        let rerun_shape = shape.clone();
        let out = self.with_storage(storage, shape);
        out.verified(op.name(), [self], Tol::Accumulate, move |t| {
            t[0].reduce_rows(op, rows, cols, rerun_shape.clone())
        })
    }

    /// Sum of all elements (shape `[]`).
    pub fn sum(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum)
    }
    /// Mean of all elements (shape `[]`).
    pub fn mean(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean)
    }
    /// Largest element (shape `[]`).
    pub fn max(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Max)
    }
    /// Smallest element (shape `[]`).
    pub fn min(&self) -> Result<Tensor> {
        self.reduce(ReduceOp::Min)
    }
    /// Sum along the last axis.
    pub fn sum_last(&self) -> Result<Tensor> {
        self.reduce_last(ReduceOp::Sum)
    }
    /// Mean along the last axis.
    pub fn mean_last(&self) -> Result<Tensor> {
        self.reduce_last(ReduceOp::Mean)
    }
    /// Maximum along the last axis.
    pub fn max_last(&self) -> Result<Tensor> {
        self.reduce_last(ReduceOp::Max)
    }
    /// Minimum along the last axis.
    pub fn min_last(&self) -> Result<Tensor> {
        self.reduce_last(ReduceOp::Min)
    }

    /// Dot product of two tensors with the same number of elements (shape `[]`).
    pub fn dot(&self, rhs: &Tensor) -> Result<Tensor> {
        self.same_device(rhs, "dot")?;
        if self.len() != rhs.len() {
            return Err(Error::shape(
                "dot",
                self.shape(),
                rhs.shape(),
                "(dot needs the same number of elements)",
            ));
        }
        self.device().check_output("dot", &[])?;
        let spec = DotSpec { n: self.len() };
        let storage = self
            .device()
            .op(&spec)
            .dot(self.storage(), rhs.storage(), spec)?;
        let out = self.with_storage(storage, Vec::new());
        out.verified("dot", [self, rhs], Tol::Accumulate, |t| t[0].dot(t[1]))
    }
}

/// One reduction of each of `rows` rows of `cols` elements to one value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReduceSpec {
    pub op: ReduceOp,
    pub rows: usize,
    pub cols: usize,
}

impl OpSpec for ReduceSpec {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn work(&self) -> Work {
        let n = self.rows * self.cols;
        Work::Memory {
            elements: n,
            bytes: 4.0 * (n as f64 + self.rows as f64),
        }
    }
}

/// `sum(a[i] * b[i])` for `i < n`, as one element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DotSpec {
    pub n: usize,
}

impl OpSpec for DotSpec {
    fn name(&self) -> &'static str {
        "dot"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 2)
    }
}
