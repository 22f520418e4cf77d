//! softmax and log_softmax along the last axis, numerically stable (the row maximum is
//! subtracted first) and computed without any round trip to the host.
//!
//! # NaN and infinity
//! A NaN in a row makes the whole row NaN. `-inf` entries get probability 0. A row whose
//! maximum is `+inf`, or whose entries are all `-inf`, is NaN (as `exp(inf - inf)` is).

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

impl Tensor {
    /// `exp(x - max) / sum(exp(x - max))` along the last axis.
    pub fn softmax(&self) -> Result<Tensor> {
        self.softmax_impl(false)
    }

    /// `x - max - log(sum(exp(x - max)))` along the last axis.
    pub fn log_softmax(&self) -> Result<Tensor> {
        self.softmax_impl(true)
    }

    fn softmax_impl(&self, log: bool) -> Result<Tensor> {
        let op = if log { "log_softmax" } else { "softmax" };
        let Some((&cols, lead)) = self.shape().split_last() else {
            return Err(Error::InvalidArgument {
                op,
                reason: "a tensor of shape [] has no last axis; reshape it to [1] first".into(),
            });
        };
        if let Some(out) = Tensor::promoted(op, &[self], |t| t[0].softmax_impl(log))? {
            return Ok(out);
        }
        let rows = lead.iter().product();
        self.device().check_output(op, self.shape())?;
        let spec = SoftmaxSpec { rows, cols, log };
        let storage = self.device().op(&spec).softmax(self.storage(), spec)?;
        let out = self.with_storage(storage, self.shape().to_vec());
        out.verified(op, [self], Tol::Accumulate, move |t| t[0].softmax_impl(log))
    }
}

/// softmax (or log_softmax) of each of `rows` rows of `cols` elements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SoftmaxSpec {
    pub rows: usize,
    pub cols: usize,
    pub log: bool,
}

impl OpSpec for SoftmaxSpec {
    fn name(&self) -> &'static str {
        if self.log {
            "log_softmax"
        } else {
            "softmax"
        }
    }

    fn work(&self) -> Work {
        Work::elements(self.rows * self.cols, 3)
    }
}
