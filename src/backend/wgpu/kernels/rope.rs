//! RoPE: one invocation per rotated pair.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::RopeLayout;
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct RopeParams {
    pairs: u32,
    dim: u32,
    seq: u32,
    _pad: u32,
}

impl WgpuBackend {
    pub(super) fn encode_rope(
        &self,
        x: &WgpuStorage,
        cos: &WgpuStorage,
        sin: &WgpuStorage,
        [n, seq, dim]: [usize; 3],
        layout: RopeLayout,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (xb, cb, sb) = (x.buffer()?, cos.buffer()?, sin.buffer()?);
        let (n, seq, dim) = (n as u64, seq as u64, dim as u64);
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n > 0 {
            s.check_binding("rope's input", n)?;
            let table = seq * dim / 2;
            let p = RopeParams {
                pairs: u32_of(n / 2, "rope pairs")?,
                dim: dim as u32,
                seq: seq as u32,
                _pad: 0,
            };
            let binds = [
                whole(xb, n),
                whole(cb, table),
                whole(sb, table),
                whole(&out, n),
            ];
            let kernel = Kernel::Rope {
                interleaved: layout == RopeLayout::Interleaved,
            };
            s.dispatch(
                &mut st,
                kernel,
                bytemuck::bytes_of(&p),
                &binds,
                (n / 2).div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }
}
