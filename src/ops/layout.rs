//! Layout ops: `permute` / `transpose`, `slice`, `split` and `chunk` along an axis,
//! `broadcast_to` and `concat`. All but `concat` return views: tensors that share their source's
//! storage and read it through strides, with no copy. Attention and unary and binary
//! elementwise ops read views in place, and a matmul reads a transposed matrix as its
//! transpose flag; any other op copies a view out in row-major order first (one strided copy on the device, `shaders/layout.wgsl`), as
//! [`Tensor::contiguous`] does. `concat` copies. Tensors of up to 8 axes.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// The most axes a layout op handles.
pub const MAX_RANK: usize = 8;

/// One strided copy: every coordinate `c` of `shape` copies
/// `src[src_offset + c . src_strides]` to `out[out_offset + c . out_strides]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CopySpec {
    pub shape: Vec<usize>,
    pub src_strides: Vec<usize>,
    pub src_offset: usize,
    pub out_strides: Vec<usize>,
    pub out_offset: usize,
}

impl CopySpec {
    pub(crate) fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Row-major strides of a shape.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

fn check_rank(op: &'static str, shape: &[usize]) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("at most {MAX_RANK} axes, got {}", shape.len()),
        });
    }
    Ok(())
}

fn check_axis(op: &'static str, axis: usize, rank: usize) -> Result<()> {
    if axis >= rank {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("axis {axis} does not exist in a tensor of {rank} axes"),
        });
    }
    Ok(())
}

impl Tensor {
    /// A new tensor of `shape` from strided copies of `parts` (zero where none writes), in
    /// their dtype: 32-bit elements are copied as they are, f16 and bf16 through f32.
    pub(crate) fn copies(
        &self,
        parts: &[(&Tensor, CopySpec)],
        shape: Vec<usize>,
    ) -> Result<Tensor> {
        // Views among the parts are copied out first (their specs index row-major data).
        if parts.iter().any(|(t, _)| !t.is_contiguous()) {
            let dense = parts
                .iter()
                .map(|(t, _)| t.contiguous())
                .collect::<Result<Vec<_>>>()?;
            let parts: Vec<(&Tensor, CopySpec)> = dense
                .iter()
                .zip(parts)
                .map(|(t, (_, c))| (t, c.clone()))
                .collect();
            return self.copies(&parts, shape);
        }
        let dtype = self.dtype();
        if let Some((t, _)) = parts.iter().find(|(t, _)| t.dtype() != dtype) {
            return Err(Error::InvalidArgument {
                op: "copy",
                reason: format!(
                    "the parts are {dtype} and {} (cast them to one dtype)",
                    t.dtype()
                ),
            });
        }
        if dtype.size() == 2 {
            let floats = parts
                .iter()
                .map(|(t, _)| t.cast(crate::DType::F32))
                .collect::<Result<Vec<_>>>()?;
            let parts: Vec<(&Tensor, CopySpec)> = floats
                .iter()
                .zip(parts)
                .map(|(f, (_, c))| (f, c.clone()))
                .collect();
            return self
                .cast(crate::DType::F32)?
                .copies(&parts, shape)?
                .cast(dtype);
        }
        let storages: Vec<_> = parts.iter().map(|(t, _)| t.storage()).collect();
        let n = self.device().check_output("copy", &shape)?;
        let spec = LayoutSpec {
            n,
            parts: parts.iter().map(|(_, c)| c.clone()).collect(),
        };
        let storage = self.device().op(&spec).copy(&storages, &spec)?;
        let out = Tensor::new_typed(self.device().clone(), storage, shape.clone(), dtype);
        let inputs: Vec<&Tensor> = parts.iter().map(|(t, _)| *t).collect();
        let specs: Vec<CopySpec> = parts.iter().map(|(_, s)| s.clone()).collect();
        out.verified_many("copy", &inputs, Tol::Exact, move |t| {
            let parts: Vec<(&Tensor, CopySpec)> =
                t.iter().copied().zip(specs.iter().cloned()).collect();
            t[0].copies(&parts, shape.clone())
        })
    }

    /// Reorders the axes: output axis `i` is input axis `axes[i]` (a view).
    pub fn permute(&self, axes: &[usize]) -> Result<Tensor> {
        let rank = self.shape().len();
        check_rank("permute", self.shape())?;
        let mut seen = vec![false; rank];
        if axes.len() != rank
            || axes
                .iter()
                .any(|&a| a >= rank || std::mem::replace(&mut seen[a], true))
        {
            return Err(Error::InvalidArgument {
                op: "permute",
                reason: format!(
                    "{axes:?} is not a permutation of the {rank} axes of {:?}",
                    self.shape()
                ),
            });
        }
        let (in_strides, offset) = self.layout();
        let shape: Vec<usize> = axes.iter().map(|&a| self.shape()[a]).collect();
        let view_strides = axes.iter().map(|&a| in_strides[a]).collect();
        Ok(self.with_view(shape, view_strides, offset))
    }

    /// This tensor repeated along new or size-1 axes to `shape`, by NumPy's rules (aligned at
    /// the last axis; each size equal to the target's or 1): a view whose repeated axes have
    /// stride 0.
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        let from = self.shape();
        if from == shape {
            return Ok(self.clone());
        }
        check_rank("broadcast_to", shape)?;
        let skip = shape.len().checked_sub(from.len());
        let fits = skip.is_some_and(|skip| {
            from.iter()
                .zip(&shape[skip..])
                .all(|(&f, &t)| f == t || f == 1)
        });
        let Some(skip) = skip.filter(|_| fits) else {
            return Err(Error::shape(
                "broadcast_to",
                from,
                shape,
                "(each size must equal the target's or be 1, aligned at the last axis)",
            ));
        };
        let (in_strides, offset) = self.layout();
        let view_strides = (0..shape.len())
            .map(|i| match i.checked_sub(skip) {
                Some(j) if from[j] != 1 => in_strides[j],
                _ => 0,
            })
            .collect();
        Ok(self.with_view(shape.to_vec(), view_strides, offset))
    }

    /// Swaps two axes (a view).
    pub fn transpose(&self, a: usize, b: usize) -> Result<Tensor> {
        let rank = self.shape().len();
        check_axis("transpose", a, rank)?;
        check_axis("transpose", b, rank)?;
        let mut axes: Vec<usize> = (0..rank).collect();
        axes.swap(a, b);
        self.permute(&axes)
    }

    /// The elements `range` along `axis` (a view; the other axes are whole).
    pub fn slice(&self, axis: usize, range: Range<usize>) -> Result<Tensor> {
        let rank = self.shape().len();
        check_axis("slice", axis, rank)?;
        check_rank("slice", self.shape())?;
        let size = self.shape()[axis];
        if range.start > range.end || range.end > size {
            return Err(Error::InvalidArgument {
                op: "slice",
                reason: format!("range {range:?} is outside axis {axis} of length {size}"),
            });
        }
        let mut shape = self.shape().to_vec();
        shape[axis] = range.end - range.start;
        let (in_strides, offset) = self.layout();
        let offset = offset + range.start * in_strides[axis];
        Ok(self.with_view(shape, in_strides, offset))
    }

    /// Splits along `axis` into parts of `sizes` elements each (they must add up to the axis's
    /// length), each part a view.
    pub fn split(&self, axis: usize, sizes: &[usize]) -> Result<Vec<Tensor>> {
        let rank = self.shape().len();
        check_axis("split", axis, rank)?;
        let total = crate::shape::sum("split", sizes.iter().copied())?;
        if total != self.shape()[axis] {
            return Err(Error::InvalidArgument {
                op: "split",
                reason: format!(
                    "sizes {sizes:?} add up to {total}, not axis {axis}'s length {}",
                    self.shape()[axis]
                ),
            });
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&size| {
                let part = self.slice(axis, start..start + size);
                start += size;
                part
            })
            .collect()
    }

    /// Splits along `axis` into `n` parts of `ceil(len / n)` elements, the last smaller (and
    /// fewer parts when there are not enough elements), as PyTorch's `chunk` does.
    pub fn chunk(&self, n: usize, axis: usize) -> Result<Vec<Tensor>> {
        let rank = self.shape().len();
        check_axis("chunk", axis, rank)?;
        if n == 0 {
            return Err(Error::InvalidArgument {
                op: "chunk",
                reason: "the number of chunks must be at least 1".into(),
            });
        }
        let len = self.shape()[axis];
        let step = len.div_ceil(n).max(1);
        let sizes: Vec<usize> = (0..len)
            .step_by(step)
            .map(|start| step.min(len - start))
            .collect();
        if sizes.is_empty() {
            return Ok(vec![self.clone()]);
        }
        self.split(axis, &sizes)
    }

    /// Joins tensors along `axis`; all other axes must agree.
    pub fn concat(tensors: &[&Tensor], axis: usize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::InvalidArgument {
                op: "concat",
                reason: "no tensors to join".into(),
            });
        };
        let rank = first.shape().len();
        check_axis("concat", axis, rank)?;
        check_rank("concat", first.shape())?;
        for t in tensors {
            first.same_device(t, "concat")?;
            let agree = t.shape().len() == rank
                && t.shape()
                    .iter()
                    .zip(first.shape())
                    .enumerate()
                    .all(|(d, (x, y))| d == axis || x == y);
            if !agree {
                return Err(Error::shape(
                    "concat",
                    first.shape(),
                    t.shape(),
                    "(all axes but the joined one must agree)",
                ));
            }
        }
        let mut shape = first.shape().to_vec();
        shape[axis] = crate::shape::sum("concat", tensors.iter().map(|t| t.shape()[axis]))?;
        let out_strides = strides(&shape);
        let mut offset = 0;
        let parts: Vec<(&Tensor, CopySpec)> = tensors
            .iter()
            .map(|t| {
                let spec = CopySpec {
                    shape: t.shape().to_vec(),
                    src_strides: strides(t.shape()),
                    src_offset: 0,
                    out_strides: out_strides.clone(),
                    out_offset: offset * out_strides[axis],
                };
                offset += t.shape()[axis];
                (*t, spec)
            })
            .collect();
        first.copies(&parts, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::strides;

    #[test]
    fn row_major_strides() {
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(strides(&[5]), vec![1]);
        assert!(strides(&[]).is_empty());
    }
}

/// A new tensor of `n` elements assembled by strided copies, one per input in order. Elements
/// no copy writes are zero.
#[derive(Debug, Clone)]
pub(crate) struct LayoutSpec {
    pub n: usize,
    pub parts: Vec<CopySpec>,
}

impl OpSpec for LayoutSpec {
    fn name(&self) -> &'static str {
        "copy"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 2)
    }
}
