//! layer norm and RMS norm: one workgroup per row.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel};
use crate::error::Result;
use crate::ops::norm::NormSpec;
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct NormParams {
    rows: u32,
    cols: u32,
    eps: f32,
    _pad: u32,
}

impl WgpuBackend {
    pub(super) fn encode_norm(
        &self,
        x: &WgpuStorage,
        weight: Option<&WgpuStorage>,
        bias: Option<&WgpuStorage>,
        spec: NormSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let w = weight.map(WgpuStorage::buffer).transpose()?;
        let b = bias.map(WgpuStorage::buffer).transpose()?;
        let (rows, cols) = (spec.rows as u64, spec.cols as u64);
        let n = rows * cols;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        if n == 0 {
            return Ok(s.storage(out));
        }
        s.check_binding("a normalisation's input", n)?;
        let p = NormParams {
            rows: u32_of(rows, "normalised rows")?,
            cols: cols as u32,
            eps: spec.eps,
            _pad: 0,
        };
        // Absent weight or bias: the shader never reads them; x stands in.
        let binds = [
            whole(xb, n),
            w.map_or(whole(xb, n), |w| whole(w, cols)),
            b.map_or(whole(xb, n), |b| whole(b, cols)),
            whole(&out, n),
        ];
        let kernel = Kernel::Norm {
            rms: spec.rms,
            weight: w.is_some(),
            bias: b.is_some(),
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, rows)?;
        Ok(s.storage(out))
    }
}
