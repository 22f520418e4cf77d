//! softmax and log_softmax along the last axis, numerically stable (the row maximum is
//! subtracted first) and computed without any round trip to the host.
//!
//! # NaN and infinity
//! A NaN in a row makes the whole row NaN. `-inf` entries get probability 0. A row whose
//! maximum is `+inf`, or whose entries are all `-inf`, is NaN (as `exp(inf - inf)` is).

use crate::error::{Error, Result};
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
        let rows = lead.iter().product();
        self.device().check_output(op, self.shape())?;
        let storage = self
            .device()
            .op(
                if log { "log_softmax" } else { "softmax" },
                crate::profile::Work::elements(self.len(), 3),
            )
            .softmax(self.storage(), rows, cols, log)?;
        let out = self.with_storage(storage, self.shape().to_vec());
        out.verified(op, [self], Tol::Accumulate, move |t| t[0].softmax_impl(log))
    }
}
