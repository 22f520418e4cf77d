//! Elementwise ops that read their operands through strides: a view (permute, transpose,
//! slice, broadcast_to) or an operand broadcast along any axis is read in place, with no copy
//! made first. A broadcast axis is a zero stride.

use super::{BinaryOp, UnaryOp};
use crate::ops::layout::MAX_RANK;
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::DType;

/// Where one operand's elements lie: element `c` of the output's shape is element
/// `offset + c . strides` of the operand's storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Strided {
    pub strides: Vec<usize>,
    pub offset: usize,
    /// Elements of the storage the reads reach (one past the furthest; 0 when none).
    pub extent: usize,
}

/// The op of a strided elementwise kernel.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum StridedOp {
    Unary(UnaryOp),
    Binary(BinaryOp),
    /// `silu(a) * b`: a gated linear unit's activation and product (SwiGLU).
    Swiglu,
}

/// An elementwise op over a row-major output of `shape` (at most [`MAX_RANK`] axes, `n`
/// elements) whose f32 operands are read through strides: `a` alone for a unary op, `a` and
/// `b` for a binary one.
#[derive(Debug, Clone)]
pub(crate) struct StridedSpec {
    pub op: StridedOp,
    pub shape: Vec<usize>,
    pub n: usize,
    pub a: Strided,
    pub b: Option<Strided>,
}

impl StridedOp {
    fn name(self) -> &'static str {
        match self {
            StridedOp::Unary(op) => op.name(),
            StridedOp::Binary(op) => op.name(),
            StridedOp::Swiglu => "swiglu",
        }
    }
}

impl OpSpec for StridedSpec {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn work(&self) -> Work {
        Work::elements(self.n, if self.b.is_some() { 3 } else { 2 })
    }
}

impl Tensor {
    /// SwiGLU, the gated activation of LLaMA-style MLPs: with the last axis split into halves
    /// `a` and `b` (`[.., 2h]` into two `[.., h]`), `silu(a) * b`. A model that stores its
    /// gate and up projections as one weight (gate rows first) gets both from one product
    /// and their activation from this one kernel, which reads the halves in place. An odd last
    /// axis is an error.
    pub fn swiglu(&self) -> crate::Result<Tensor> {
        let op = "swiglu";
        let Some((&last, lead)) = self.shape().split_last() else {
            return Err(crate::Error::InvalidArgument {
                op,
                reason: "a tensor of shape [] has no last axis".into(),
            });
        };
        if last % 2 != 0 {
            return Err(crate::Error::shape(
                op,
                self.shape(),
                &[last + 1],
                "(the last axis holds two halves, so its length must be even)",
            ));
        }
        // One strided kernel over a row-major f32 copy (halves and views are converted), its
        // two operands the halves of each row.
        let x = self.floats(op)?;
        let (h, m) = (last / 2, lead.iter().product::<usize>());
        let mut shape = lead.to_vec();
        shape.push(h);
        self.device().check_output(op, &shape)?;
        let spec = swiglu_spec(m, h);
        let storage = x
            .device()
            .op(&spec)
            .strided(x.storage(), Some(x.storage()), spec)?;
        let out = x.with_storage(storage, shape);
        let out = if self.dtype() == DType::F32 {
            out
        } else {
            out.cast(self.dtype())?
        };
        out.verified(op, [self], crate::verify::Tol::Elementwise, |t| {
            t[0].swiglu()
        })
    }

    /// This f32 tensor as an operand of an output of `shape` it broadcasts to (NumPy's rules:
    /// axes aligned on the right, size-1 and missing axes read with stride 0).
    fn strided_operand(&self, shape: &[usize]) -> Strided {
        let (strides, offset) = self.layout();
        let lead = shape.len() - self.shape().len();
        let mut out = vec![0; shape.len()];
        for (i, (&d, &s)) in self.shape().iter().zip(&strides).enumerate() {
            if d != 1 {
                out[lead + i] = s;
            }
        }
        let empty = shape.contains(&0);
        let far: usize = shape
            .iter()
            .zip(&out)
            .map(|(&d, &s)| (d.max(1) - 1) * s)
            .sum();
        Strided {
            extent: if empty { 0 } else { offset + far + 1 },
            strides: out,
            offset,
        }
    }

    /// Whether `op` over these f32 operands, broadcast to `shape`, reads them through strides
    /// rather than copying them first: some operand is a view, or broadcasts other than by
    /// repetition (`expand`), and the output has at most [`MAX_RANK`] axes.
    pub(crate) fn reads_strided(operands: &[&Tensor], shape: &[usize], expand: bool) -> bool {
        shape.len() <= MAX_RANK
            && operands.iter().all(|t| t.dtype() == DType::F32)
            && (expand || operands.iter().any(|t| !t.is_contiguous()))
    }

    /// `op` over this tensor (and `rhs` for a binary op) read through strides, as a row-major
    /// tensor of `shape` (see [`Tensor::reads_strided`]).
    pub(crate) fn strided(
        &self,
        op: StridedOp,
        rhs: Option<&Tensor>,
        shape: Vec<usize>,
    ) -> crate::Result<Tensor> {
        let n = self.device().check_output(op.name(), &shape)?;
        let spec = StridedSpec {
            op,
            n,
            a: self.strided_operand(&shape),
            b: rhs.map(|r| r.strided_operand(&shape)),
            shape: shape.clone(),
        };
        let storage =
            self.device()
                .op(&spec)
                .strided(self.storage(), rhs.map(Tensor::storage), spec)?;
        Ok(self.with_storage(storage, shape))
    }
}

/// The strided op that makes `silu(gate) * up` of `m` rows of `2 * k` values (gate then up):
/// backends that do not read a SwiGLU input inside the product run it first.
pub(crate) fn swiglu_spec(m: usize, k: usize) -> StridedSpec {
    let extent = if m * k == 0 { 0 } else { m * 2 * k };
    StridedSpec {
        op: StridedOp::Swiglu,
        shape: vec![m, k],
        n: m * k,
        a: Strided {
            strides: vec![2 * k, 1],
            offset: 0,
            extent,
        },
        b: Some(Strided {
            strides: vec![2 * k, 1],
            offset: k,
            extent,
        }),
    }
}
