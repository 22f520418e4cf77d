//! Conversions between dtypes: one invocation per output word (cast.wgsl).

use bytemuck::{Pod, Zeroable};

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::cast::CastSpec;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CastParams {
    n: u32,
    from: u32,
    to: u32,
    words: u32,
}

impl WgpuBackend {
    pub(super) fn encode_cast(&self, x: &WgpuStorage, spec: CastSpec) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let n = spec.n as u64;
        let in_words = (n * spec.from.size() as u64).div_ceil(4);
        let words = (n * spec.to.size() as u64).div_ceil(4);
        s.check_binding("a cast's input", in_words)?;
        s.check_binding("a cast's output", words)?;
        let p = CastParams {
            n: u32_of(n, "cast elements")?,
            from: spec.from.code(),
            to: spec.to.code(),
            words: words as u32,
        };
        let xb = x.buffer()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, words * 4)?;
        let binds = [whole(xb, in_words), whole(&out, words)];
        s.dispatch(
            &mut st,
            Kernel::Cast,
            bytemuck::bytes_of(&p),
            &binds,
            words.div_ceil(WG),
        )?;
        Ok(s.storage(out))
    }
}
