//! 2-D max and average pooling (NCHW).

use crate::error::{Error, Result};
use crate::ops::conv::{nchw, out_size};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Window, stride and padding of a pooling op (height, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dOptions {
    /// Window size.
    pub kernel: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Padding on each side (at most half the window).
    pub padding: [usize; 2],
}

/// Every size of one pooling op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolSpec {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub opts: Pool2dOptions,
    pub max: bool,
}

impl Tensor {
    /// Max over each window (NaN if the window holds one); padding is skipped.
    pub fn max_pool2d(&self, opts: Pool2dOptions) -> Result<Tensor> {
        self.pool2d("max_pool2d", opts, true)
    }

    /// Mean over each window, padding counted as zeros.
    pub fn avg_pool2d(&self, opts: Pool2dOptions) -> Result<Tensor> {
        self.pool2d("avg_pool2d", opts, false)
    }

    fn pool2d(&self, op: &'static str, opts: Pool2dOptions, max: bool) -> Result<Tensor> {
        if let Some(out) = Tensor::promoted(op, &[self], |t| t[0].pool2d(op, opts, max))? {
            return Ok(out);
        }
        let [n, c, h, w] = nchw(op, self)?;
        let [kh, kw] = opts.kernel;
        if kh == 0 || kw == 0 || opts.padding[0] > kh / 2 || opts.padding[1] > kw / 2 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "kernel {:?} must be non-zero and padding {:?} at most half of it",
                    opts.kernel, opts.padding
                ),
            });
        }
        let oh = out_size(op, h, kh, opts.stride[0], opts.padding[0], 1)?;
        let ow = out_size(op, w, kw, opts.stride[1], opts.padding[1], 1)?;
        let spec = PoolSpec {
            planes: n * c,
            h,
            w,
            oh,
            ow,
            opts,
            max,
        };
        self.device().check_output(op, &[n, c, oh, ow])?;
        let storage = self.device().op(&spec).pool2d(self.storage(), spec)?;
        let out = self.with_storage(storage, vec![n, c, oh, ow]);
        let tol = if max { Tol::Exact } else { Tol::Accumulate };
        out.verified(op, [self], tol, move |t| t[0].pool2d(op, opts, max))
    }
}

impl OpSpec for PoolSpec {
    fn name(&self) -> &'static str {
        if self.max {
            "max_pool2d"
        } else {
            "avg_pool2d"
        }
    }

    /// Reads the input once and writes the output.
    fn work(&self) -> Work {
        let (input, out) = (
            self.planes * self.h * self.w,
            self.planes * self.oh * self.ow,
        );
        Work::Memory {
            elements: input,
            bytes: 4.0 * (input as f64 + out as f64),
        }
    }
}
