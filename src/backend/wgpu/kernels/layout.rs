//! The strided copy behind permute, slice and concat.

use bytemuck::{Pod, Zeroable};

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::layout::{CopySpec, LayoutSpec, MAX_RANK};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    n: u32,
    rank: u32,
    in_offset: u32,
    out_offset: u32,
    shape: [u32; MAX_RANK],
    in_strides: [u32; MAX_RANK],
    out_strides: [u32; MAX_RANK],
}

/// Elements of the source a strided copy can reach (one past the furthest).
fn src_extent(spec: &CopySpec) -> u64 {
    let far: usize = spec
        .shape
        .iter()
        .zip(&spec.src_strides)
        .map(|(&d, &s)| d.saturating_sub(1) * s)
        .sum();
    (spec.src_offset + far + 1) as u64
}

impl WgpuBackend {
    pub(super) fn encode_copy(
        &self,
        parts: &[&WgpuStorage],
        layout: &LayoutSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let n = layout.n as u64;
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        s.check_binding("a layout op's output", n)?;
        // Elements no part writes are zero (a pooled buffer holds old data).
        let covered: usize = layout.parts.iter().map(CopySpec::len).sum();
        if (covered as u64) < n {
            s.clear(&mut st, &out);
        }
        for (src, spec) in parts.iter().zip(&layout.parts) {
            let len = spec.len() as u64;
            if len == 0 {
                continue;
            }
            let src_len = src_extent(spec);
            s.check_binding("a layout op's input", src_len)?;
            let mut p = CopyParams {
                n: u32_of(len, "a layout op's elements")?,
                rank: spec.shape.len() as u32,
                in_offset: spec.src_offset as u32,
                out_offset: spec.out_offset as u32,
                shape: [0; MAX_RANK],
                in_strides: [0; MAX_RANK],
                out_strides: [0; MAX_RANK],
            };
            for d in 0..spec.shape.len() {
                p.shape[d] = spec.shape[d] as u32;
                p.in_strides[d] = spec.src_strides[d] as u32;
                p.out_strides[d] = spec.out_strides[d] as u32;
            }
            let binds = [whole(src.buffer()?, src_len), whole(&out, n)];
            s.dispatch(
                &mut st,
                Kernel::Copy,
                bytemuck::bytes_of(&p),
                &binds,
                len.div_ceil(WG),
            )?;
        }
        Ok(s.storage(out))
    }
}
