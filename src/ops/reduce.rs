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

    /// Reduces along `axis`: with `keepdim` the axis stays with size 1, else it goes. The
    /// last axis is reduced in place; any other is first moved last by a copy.
    pub fn reduce_axis(&self, op: ReduceOp, axis: usize, keepdim: bool) -> Result<Tensor> {
        let rank = self.shape().len();
        if axis >= rank {
            return Err(Error::InvalidArgument {
                op: op.name(),
                reason: format!("axis {axis} does not exist in a tensor of {rank} axes"),
            });
        }
        let moved = self.axis_last(axis)?;
        let out = moved.reduce_last(op)?;
        out.reshape(&reduced_shape(self.shape(), axis, keepdim))
    }

    /// This tensor with `axis` moved to the end (the tensor itself when it is already last).
    pub(crate) fn axis_last(&self, axis: usize) -> Result<Tensor> {
        let rank = self.shape().len();
        if axis + 1 == rank {
            return Ok(self.clone());
        }
        let mut axes: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
        axes.push(axis);
        self.permute(&axes)
    }

    /// Sum along `axis` (see [`Tensor::reduce_axis`]).
    pub fn sum_axis(&self, axis: usize, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(ReduceOp::Sum, axis, keepdim)
    }

    /// Mean along `axis`.
    pub fn mean_axis(&self, axis: usize, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(ReduceOp::Mean, axis, keepdim)
    }

    /// Maximum along `axis` (NaN if the axis holds one).
    pub fn max_axis(&self, axis: usize, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(ReduceOp::Max, axis, keepdim)
    }

    /// Minimum along `axis` (NaN if the axis holds one).
    pub fn min_axis(&self, axis: usize, keepdim: bool) -> Result<Tensor> {
        self.reduce_axis(ReduceOp::Min, axis, keepdim)
    }

    /// `[batch, seq, ..]` split as the pooling ops take it.
    fn pooled_axes(&self) -> Result<(usize, usize, &[usize])> {
        match self.shape() {
            [batch, seq, rest @ ..] => Ok((*batch, *seq, rest)),
            shape => Err(Error::InvalidArgument {
                op: "masked_mean",
                reason: format!("expected [batch, seq, ..], got {shape:?}"),
            }),
        }
    }

    /// [`Tensor::masked_mean`] with the lengths in a device tensor (u32 or i32, `[batch]`),
    /// so a compiled graph takes new lengths at each run (record it with `Batch::apply`). The
    /// lengths are not read back, so they cannot be checked: a length beyond `seq` counts as
    /// `seq` (as attention's device lengths do), and 0 or a negative length gives NaN (0 / 0).
    /// Padding is selected away, never multiplied, so NaN there does no harm.
    pub fn masked_mean_by(&self, lengths: &Tensor) -> Result<Tensor> {
        self.same_device(lengths, "masked_mean")?;
        lengths.expect_integer("masked_mean", "lengths")?;
        let (batch, seq, rest) = self.pooled_axes()?;
        if lengths.shape() != [batch] {
            return Err(Error::shape(
                "masked_mean",
                lengths.shape(),
                &[batch],
                "(one length per entry of the batch)",
            ));
        }
        let positions = self.device().arange(seq, lengths.dtype())?;
        let keep = positions
            .reshape(&[1, seq])?
            .less(&lengths.reshape(&[batch, 1])?)?;
        let mut mask_shape = vec![batch, seq];
        mask_shape.extend(std::iter::repeat_n(1, rest.len()));
        let keep = keep.reshape(&mask_shape)?;
        let zero = self.device().tensor(&[0.0], &[1])?.cast(self.dtype())?;
        let sums = keep.where_cond(self, &zero)?.sum_axis(1, false)?;
        let counts = keep.cast(crate::DType::F32)?.sum_axis(1, false)?;
        sums.div(&counts.cast(sums.dtype())?)
    }

    /// Mean pooling with lengths: `self` is `[batch, seq, ..]`, and entry `i` averages its
    /// first `lengths[i]` positions along axis 1 (the rest, padding, is never read, so NaN
    /// there does no harm): shape `[batch, ..]`. A length of 0 gives NaN (0 / 0). For lengths
    /// held on the device, see [`Tensor::masked_mean_by`].
    pub fn masked_mean(&self, lengths: &[u32]) -> Result<Tensor> {
        let shape = self.shape();
        let (batch, seq, rest) = self.pooled_axes()?;
        if lengths.len() != batch {
            return Err(Error::InvalidArgument {
                op: "masked_mean",
                reason: format!("{} lengths for a batch of {batch}", lengths.len()),
            });
        }
        if let Some((i, &l)) = lengths.iter().enumerate().find(|(_, &l)| l as usize > seq) {
            return Err(Error::InvalidArgument {
                op: "masked_mean",
                reason: format!("length {l} of entry {i} is more than the {seq} positions"),
            });
        }
        // The real positions of each entry, copied into a zeroed tensor, then summed.
        let row: usize = rest.iter().product();
        let parts: Vec<(&Tensor, crate::ops::layout::CopySpec)> = lengths
            .iter()
            .enumerate()
            .filter(|(_, &l)| l > 0 && row > 0)
            .map(|(i, &l)| {
                let at = i * seq * row;
                let spec = crate::ops::layout::CopySpec {
                    shape: vec![l as usize * row],
                    src_strides: vec![1],
                    src_offset: at,
                    out_strides: vec![1],
                    out_offset: at,
                };
                (self, spec)
            })
            .collect();
        let kept = self.copies(&parts, shape.to_vec())?;
        let sums = kept.sum_axis(1, false)?;
        let mut count_shape = vec![batch];
        count_shape.extend(std::iter::repeat_n(1, rest.len()));
        let counts: Vec<f32> = lengths.iter().map(|&l| l as f32).collect();
        let counts = self.device().tensor(&counts, &count_shape)?;
        sums.div(&counts.cast(sums.dtype())?)
    }

    fn reduce_rows(
        &self,
        op: ReduceOp,
        rows: usize,
        cols: usize,
        shape: Vec<usize>,
    ) -> Result<Tensor> {
        if let Some(out) = Tensor::promoted(op.name(), &[self], |t| {
            t[0].reduce_rows(op, rows, cols, shape.clone())
        })? {
            return Ok(out);
        }
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
        if let Some(out) = Tensor::promoted("dot", &[self, rhs], |t| t[0].dot(t[1]))? {
            return Ok(out);
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

/// `shape` without `axis`, or with it as 1 under `keepdim`.
pub(crate) fn reduced_shape(shape: &[usize], axis: usize, keepdim: bool) -> Vec<usize> {
    let mut out = shape.to_vec();
    if keepdim {
        out[axis] = 1;
    } else {
        out.remove(axis);
    }
    out
}
