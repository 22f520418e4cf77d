//! Normalisation along the last axis: layernorm and rmsnorm, each with an optional weight
//! (scale) and bias (shift) of one value per column.
//!
//! `layer_norm`: `(x - mean) / sqrt(var + eps) * weight + bias`, with the biased variance
//! (divided by the row length), as PyTorch computes it.
//! `rms_norm`: `x / sqrt(mean(x^2) + eps) * weight + bias`.
//! A NaN in a row makes the row NaN. Statistics accumulate in f32 on GPUs (two passes over the
//! row, so the variance does not cancel); the op suite allows 2e-5.

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Which normalisation, over rows of what length.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct NormSpec {
    pub rms: bool,
    pub rows: usize,
    pub cols: usize,
    pub eps: f32,
}

impl Tensor {
    /// Layer normalisation along the last axis.
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        self.norm("layer_norm", false, weight, bias, eps)
    }

    /// RMS normalisation along the last axis (as in llama).
    pub fn rms_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        self.norm("rms_norm", true, weight, bias, eps)
    }

    fn norm(
        &self,
        op: &'static str,
        rms: bool,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let Some((&cols, lead)) = self.shape().split_last() else {
            return Err(Error::InvalidArgument {
                op,
                reason: "a tensor of shape [] has no last axis".into(),
            });
        };
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("eps must be finite and >= 0, got {eps}"),
            });
        }
        for t in [weight, bias].into_iter().flatten() {
            self.same_device(t, op)?;
            if t.len() != cols {
                return Err(Error::shape(
                    op,
                    t.shape(),
                    &[cols],
                    "(weight and bias have one value per column)",
                ));
            }
        }
        let mut inputs = vec![self];
        inputs.extend(weight);
        inputs.extend(bias);
        if let Some(out) = Tensor::promoted(op, &inputs, |t| {
            let w = weight.map(|_| t[1]);
            let b = bias.map(|_| t[1 + usize::from(weight.is_some())]);
            t[0].norm(op, rms, w, b, eps)
        })? {
            // The result has x's dtype whatever the weight's and bias's.
            return out.cast(self.dtype());
        }
        let spec = NormSpec {
            rms,
            rows: lead.iter().product(),
            cols,
            eps,
        };
        let name = spec.name();
        self.device().check_output(name, self.shape())?;
        let storage = self.device().op(&spec).norm(
            self.storage(),
            weight.map(Tensor::storage),
            bias.map(Tensor::storage),
            spec,
        )?;
        let out = self.with_storage(storage, self.shape().to_vec());
        let (has_w, has_b) = (weight.is_some(), bias.is_some());
        out.verified_many(name, &inputs, Tol::Accumulate, move |t| {
            let w = has_w.then(|| t[1]);
            let b = has_b.then(|| t[1 + usize::from(has_w)]);
            t[0].norm(op, rms, w, b, eps)
        })
    }
}

impl OpSpec for NormSpec {
    fn name(&self) -> &'static str {
        if self.rms {
            "rms_norm"
        } else {
            "layer_norm"
        }
    }

    fn work(&self) -> Work {
        Work::elements(self.rows * self.cols, 2)
    }
}
