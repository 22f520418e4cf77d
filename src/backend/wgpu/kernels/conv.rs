//! conv2d: the tiled matmul kernel with B's tile gathered from the input (implicit im2col);
//! groups run along grid z.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel};
use crate::error::{Error, Result};
use crate::ops::conv::ConvSpec;
use bytemuck::{Pod, Zeroable};

/// Rows and columns of the output tile of one conv2d workgroup (shaders/conv.wgsl).
const CONV_TILE: u64 = 64;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct ConvParams {
    n: u32,
    c: u32,
    h: u32,
    w: u32,
    o: u32,
    kh: u32,
    kw: u32,
    oh: u32,
    ow: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    dh: u32,
    dw: u32,
    cg: u32,
    og: u32,
    _pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_conv2d(
        &self,
        x: &WgpuStorage,
        w: &WgpuStorage,
        bias: Option<&WgpuStorage>,
        c: ConvSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, wb) = (x.buffer()?, w.buffer()?);
        let bb = bias.map(WgpuStorage::buffer).transpose()?;
        let o = c.opts;
        let g = o.groups as u64;
        let [n, ch, h, wd, oc, kh, kw, oh, ow] =
            [c.n, c.c, c.h, c.w, c.o, c.kh, c.kw, c.oh, c.ow].map(|v| v as u64);
        let out_len = n * oc * oh * ow;
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        let (x_len, w_len) = (n * ch * h * wd, oc * (ch / g) * kh * kw);
        // The ops layer rejects empty kernels and channels, so only an empty output is left.
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        for (what, len) in [
            ("conv2d's input", x_len),
            ("conv2d's weight", w_len),
            ("conv2d's output", out_len),
        ] {
            s.check_binding(what, len)?;
        }
        let v = |x: usize| u32_of(x as u64, "a conv2d size");
        let p = ConvParams {
            n: v(c.n)?,
            c: v(c.c)?,
            h: v(c.h)?,
            w: v(c.w)?,
            o: v(c.o)?,
            kh: v(c.kh)?,
            kw: v(c.kw)?,
            oh: v(c.oh)?,
            ow: v(c.ow)?,
            sh: v(o.stride[0])?,
            sw: v(o.stride[1])?,
            ph: v(o.padding[0])?,
            pw: v(o.padding[1])?,
            dh: v(o.dilation[0])?,
            dw: v(o.dilation[1])?,
            cg: v(c.c / o.groups)?,
            og: v(c.o / o.groups)?,
            _pad: [0; 3],
        };
        let binds = [
            whole(xb, x_len),
            whole(wb, w_len),
            bb.map_or(whole(wb, w_len), |b| whole(b, oc)),
            whole(&out, out_len),
        ];
        let grid = [
            (n * oh * ow).div_ceil(CONV_TILE),
            (oc / g).div_ceil(CONV_TILE),
            g,
        ];
        let max = u64::from(s.limits.max_compute_workgroups_per_dimension);
        if let Some(&over) = grid.iter().find(|&&x| x > max) {
            return Err(Error::LimitExceeded {
                what: format!("a conv2d grid of {grid:?} workgroups"),
                limit: "max_compute_workgroups_per_dimension",
                needed: over,
                max,
            });
        }
        let kernel = Kernel::Conv2d { bias: bb.is_some() };
        s.dispatch_grid(
            &mut st,
            kernel,
            bytemuck::bytes_of(&p),
            &binds,
            grid.map(|x| x as u32),
        )?;
        Ok(s.storage(out))
    }
}
