//! 2-D max and average pooling: one invocation per output element.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::pool::PoolSpec;
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PoolParams {
    planes: u32,
    h: u32,
    w: u32,
    oh: u32,
    ow: u32,
    kh: u32,
    kw: u32,
    sh: u32,
    sw: u32,
    ph: u32,
    pw: u32,
    _pad: u32,
}

impl WgpuBackend {
    pub(super) fn encode_pool2d(&self, x: &WgpuStorage, c: PoolSpec) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let o = c.opts;
        let (in_len, out_len) = (
            (c.planes * c.h * c.w) as u64,
            (c.planes * c.oh * c.ow) as u64,
        );
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len > 0 {
            s.check_binding("a pooling input", in_len)?;
            let v = |x: usize| u32_of(x as u64, "a pooling size");
            let p = PoolParams {
                planes: v(c.planes)?,
                h: v(c.h)?,
                w: v(c.w)?,
                oh: v(c.oh)?,
                ow: v(c.ow)?,
                kh: v(o.kernel[0])?,
                kw: v(o.kernel[1])?,
                sh: v(o.stride[0])?,
                sw: v(o.stride[1])?,
                ph: v(o.padding[0])?,
                pw: v(o.padding[1])?,
                _pad: 0,
            };
            let binds = [whole(xb, in_len.max(1)), whole(&out, out_len)];
            s.dispatch(
                &mut st,
                Kernel::Pool2d { max: c.max },
                bytemuck::bytes_of(&p),
                &binds,
                out_len.div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }
}
