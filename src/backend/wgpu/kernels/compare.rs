//! Comparisons and integer arithmetic: one invocation per element (compare.wgsl).

use bytemuck::{Pod, Zeroable};

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::compare::CompareSpec;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CompareParams {
    n: u32,
    la: u32,
    lb: u32,
    op: u32,
    kind: u32,
    _pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_compare(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        spec: CompareSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let n = spec.n as u64;
        let (la, lb) = (spec.a_len.max(1) as u64, spec.b_len.max(1) as u64);
        for (what, len) in [
            ("a comparison's operand", la),
            ("a comparison's operand", lb),
        ] {
            s.check_binding(what, len)?;
        }
        s.check_binding("a comparison's output", n)?;
        let p = CompareParams {
            n: u32_of(n, "compared elements")?,
            la: la as u32,
            lb: lb as u32,
            op: spec.op.code(),
            kind: spec.kind.code(),
            _pad: [0; 3],
        };
        let (ab, bb) = (a.buffer()?, b.buffer()?);
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        let binds = [whole(ab, la), whole(bb, lb), whole(&out, n)];
        s.dispatch(
            &mut st,
            Kernel::Compare,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        )?;
        Ok(s.storage(out))
    }
}
