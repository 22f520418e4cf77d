//! Conversions between dtypes (`cast`), and how ops take tensors that are not f32.
//!
//! Float ops compute in f32 on every backend. An op given f16 or bf16 tensors converts them
//! to f32, computes, and converts the result back ([`Tensor::floats`]): storage stays half
//! size and results carry the input's dtype. Ops that read half-precision data directly
//! (the CUDA f16/bf16 matmul, embedding gathers) skip the conversions. Integer tensors go to
//! the ops that take them (embedding ids, attention key lengths, integer arithmetic, layout
//! ops, `where`); any other op given one says so.

use crate::dtype::{self, DType};
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Converts `n` elements from one dtype to another (see [`crate::dtype`] for the rules).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CastSpec {
    pub from: DType,
    pub to: DType,
    pub n: usize,
}

impl OpSpec for CastSpec {
    fn name(&self) -> &'static str {
        "cast"
    }

    fn work(&self) -> Work {
        Work::Memory {
            elements: self.n,
            bytes: (self.n * (self.from.size() + self.to.size())) as f64,
        }
    }
}

/// The dtype two float operands compute in and return: the same dtype stays; f32 with
/// anything, or f16 with bf16, gives f32.
pub(crate) fn common_float(op: &'static str, a: DType, b: DType) -> Result<DType> {
    for d in [a, b] {
        if !d.is_float() {
            return Err(dtype::unsupported(op, d, "float"));
        }
    }
    Ok(if a == b { a } else { DType::F32 })
}

impl Tensor {
    /// The same values as `dtype` (a new tensor; the same tensor when it already is). The
    /// rules are in [`crate::dtype`]: halves round to nearest even and overflow to ±inf,
    /// floats truncate into integers and saturate, NaN becomes 0 in an integer.
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        if !self.is_contiguous() {
            return self.contiguous()?.cast(dtype);
        }
        let n = self.device().check_output_of("cast", self.shape(), dtype)?;
        dtype::words("cast", dtype, n)?;
        let spec = CastSpec {
            from: self.dtype(),
            to: dtype,
            n,
        };
        let storage = self.device().op(&spec).cast(self.storage(), spec)?;
        let out = Tensor::new_typed(self.device().clone(), storage, self.shape().to_vec(), dtype);
        out.verified("cast", [self], Tol::Exact, move |t| t[0].cast(dtype))
    }

    /// Another name for [`Tensor::cast`].
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        self.cast(dtype)
    }

    /// This tensor as row-major f32 for a float op named `op`: itself when it is, a
    /// converted (or copied-out) tensor when f16, bf16 or a view, an error naming the op
    /// when an integer.
    pub(crate) fn floats(&self, op: &'static str) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(dtype::unsupported(op, self.dtype(), "float"));
        }
        match self.dtype() {
            DType::F32 => self.contiguous(),
            d if d.is_float() => self.cast(DType::F32),
            d => Err(dtype::unsupported(op, d, "float")),
        }
    }

    /// Whether a float op must convert: `Some(dtype of the result)` when any input is not
    /// f32 or is a view (an error when one is an integer), `None` when all are row-major f32.
    pub(crate) fn promotion(op: &'static str, inputs: &[&Tensor]) -> Result<Option<DType>> {
        let mut out = DType::F32;
        let mut all_f32 = true;
        for (i, t) in inputs.iter().enumerate() {
            let d = t.dtype();
            all_f32 &= d == DType::F32 && t.is_contiguous();
            out = if i == 0 {
                common_float(op, d, d)?
            } else {
                common_float(op, out, d)?
            };
        }
        Ok((!all_f32).then_some(out))
    }

    /// A float op on row-major f32 copies of its inputs when any is f16, bf16 or a view, the
    /// result converted back to their dtype: `Some(result)`; `None` when every input is
    /// row-major f32 (the op goes on); an error naming `op` when one is an integer.
    pub(crate) fn promoted(
        op: &'static str,
        inputs: &[&Tensor],
        f: impl FnOnce(&[&Tensor]) -> Result<Tensor>,
    ) -> Result<Option<Tensor>> {
        let Some(dtype) = Tensor::promotion(op, inputs)? else {
            return Ok(None);
        };
        let floats = inputs
            .iter()
            .map(|t| t.floats(op))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = floats.iter().collect();
        f(&refs)?.cast(dtype).map(Some)
    }

    /// Checks that an input of an op that reads integers (`what`, such as "ids") is i32 or
    /// u32.
    pub(crate) fn expect_integer(&self, op: &'static str, what: &str) -> Result<()> {
        match self.dtype() {
            DType::I32 | DType::U32 => Ok(()),
            d => Err(Error::InvalidArgument {
                op,
                reason: format!("{what} must be a u32 or i32 tensor, not {d}"),
            }),
        }
    }
}

impl crate::Device {
    /// `[0, 1, .., n - 1]` as a tensor of `dtype` (integers exact; floats as f32 rounds them
    /// beyond 2^24, then as the dtype does: f16 holds every integer up to 2048 exactly).
    pub fn arange(&self, n: usize, dtype: DType) -> Result<Tensor> {
        self.check_output_of("arange", &[n], dtype)?;
        match dtype {
            DType::I32 => {
                let top = i32::try_from(n).map_err(|_| Error::InvalidArgument {
                    op: "arange",
                    reason: format!("{n} values do not fit i32"),
                })?;
                self.tensor_of(&(0..top).collect::<Vec<i32>>(), &[n])
            }
            DType::U32 => {
                let top = u32::try_from(n).map_err(|_| Error::InvalidArgument {
                    op: "arange",
                    reason: format!("{n} values do not fit u32"),
                })?;
                self.tensor_of(&(0..top).collect::<Vec<u32>>(), &[n])
            }
            _ => {
                let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
                self.tensor(&values, &[n])?.cast(dtype)
            }
        }
    }
}
