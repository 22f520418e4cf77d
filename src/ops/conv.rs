//! conv2d (NCHW, implicit GEMM: the im2col matrix is never stored).

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Stride, padding, dilation and groups of [`Tensor::conv2d`] (height, width).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between windows.
    pub stride: [usize; 2],
    /// Zeros added on each side.
    pub padding: [usize; 2],
    /// Step between kernel taps.
    pub dilation: [usize; 2],
    /// Channel groups (1: every output sees every input channel; `c`: depthwise).
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: [1, 1],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }
}

/// Every size of one conv2d, as the backends receive them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConvSpec {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
    pub opts: Conv2dOptions,
}

pub(crate) fn out_size(
    op: &'static str,
    input: usize,
    k: usize,
    stride: usize,
    pad: usize,
    dil: usize,
) -> Result<usize> {
    use crate::shape::{add, mul};
    let span = add(op, mul(op, dil, k.max(1) - 1)?, 1)?;
    let padded = add(op, input, mul(op, 2, pad)?)?;
    if stride == 0 || dil == 0 || padded < span {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("a window of {span} (kernel {k}, dilation {dil}) with stride {stride} does not fit {input} + 2 x {pad} padding"),
        });
    }
    Ok((padded - span) / stride + 1)
}

pub(crate) fn nchw(op: &'static str, t: &Tensor) -> Result<[usize; 4]> {
    match *t.shape() {
        [n, c, h, w] => Ok([n, c, h, w]),
        _ => Err(Error::InvalidArgument {
            op,
            reason: format!("expected an NCHW tensor, got shape {:?}", t.shape()),
        }),
    }
}

impl Tensor {
    /// 2-D convolution of `self` (`[n, c, h, w]`) with `weight` (`[o, c / groups, kh, kw]`) and
    /// an optional `bias` of `o` values: `[n, o, oh, ow]`.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        opts: Conv2dOptions,
    ) -> Result<Tensor> {
        let mut inputs = vec![self, weight];
        inputs.extend(bias);
        if let Some(out) = Tensor::promoted("conv2d", &inputs, |t| {
            t[0].conv2d(t[1], bias.map(|_| t[2]), opts)
        })? {
            return Ok(out);
        }
        let [n, c, h, w] = nchw("conv2d", self)?;
        let [o, cg, kh, kw] = nchw("conv2d", weight)?;
        let g = opts.groups;
        if g == 0 || c % g != 0 || o % g != 0 || cg != c / g {
            return Err(Error::shape(
                "conv2d",
                self.shape(),
                weight.shape(),
                "(the weight is [o, c / groups, kh, kw] with c and o multiples of groups)",
            ));
        }
        if cg == 0 || kh == 0 || kw == 0 {
            return Err(Error::InvalidArgument {
                op: "conv2d",
                reason: format!(
                    "the weight {:?} has no input channels or no kernel taps",
                    weight.shape()
                ),
            });
        }
        self.same_device(weight, "conv2d")?;
        if let Some(b) = bias {
            self.same_device(b, "conv2d")?;
            if b.len() != o {
                return Err(Error::shape(
                    "conv2d bias",
                    b.shape(),
                    &[o],
                    "(one bias per output channel)",
                ));
            }
        }
        let oh = out_size(
            "conv2d",
            h,
            kh,
            opts.stride[0],
            opts.padding[0],
            opts.dilation[0],
        )?;
        let ow = out_size(
            "conv2d",
            w,
            kw,
            opts.stride[1],
            opts.padding[1],
            opts.dilation[1],
        )?;
        let spec = ConvSpec {
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            oh,
            ow,
            opts,
        };
        self.device().check_output("conv2d", &[n, o, oh, ow])?;
        let storage = self.device().op(&spec).conv2d(
            self.storage(),
            weight.storage(),
            bias.map(Tensor::storage),
            spec,
        )?;
        let out = self.with_storage(storage, vec![n, o, oh, ow]);
        let mut inputs = vec![self, weight];
        inputs.extend(bias);
        out.verified_many("conv2d", &inputs, Tol::Accumulate, move |t| {
            t[0].conv2d(t[1], t.get(2).copied(), opts)
        })
    }
}

impl OpSpec for ConvSpec {
    fn name(&self) -> &'static str {
        "conv2d"
    }

    /// Each output element is a dot product over its group's channels and the kernel taps.
    fn work(&self) -> Work {
        let depth = (self.c / self.opts.groups.max(1)) * self.kh * self.kw;
        let out = (self.n * self.o * self.oh * self.ow) as f64;
        Work::Flops(2.0 * out * depth as f64)
    }
}
