//! Top-k of rows: a radix selection in one dispatch for 2 <= k <= 1024 (rows up to 174,762
//! columns), a long row's arg-max split over workgroups then merged, otherwise k selection
//! rounds split into dispatches of a bounded number of visits.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel};
use crate::error::Result;
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct TopKParams {
    rows: u32,
    cols: u32,
    k: u32,
    r0: u32,
    r1: u32,
    /// `TopKSplit`: chunks a row, elements a chunk.
    chunks: u32,
    chunk: u32,
    _pad: u32,
}

/// Elements one topk workgroup visits per dispatch, at most: rounds are split across dispatches
/// so that no workgroup runs long.
const TOPK_VISITS_PER_DISPATCH: u64 = 1 << 20;

/// Elements of a long row a `TopKSplit` workgroup takes (four an invocation).
const ARGMAX_CHUNK: u64 = 1024;

/// The largest k topk.wgsl's radix selection takes (its candidates in workgroup memory).
const TOPK_SELECT_MAX_K: u64 = 1024;

impl WgpuBackend {
    pub(super) fn encode_topk(
        &self,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(WgpuStorage, WgpuStorage)> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let (rows, cols, k) = (rows as u64, cols as u64, k as u64);
        let mut st = s.state();
        let values = s.alloc(&mut st, rows * k * 4)?;
        let indices = s.alloc(&mut st, rows * k * 4)?;
        let (values, indices) = (s.storage(values), s.storage(indices));
        if rows * k > 0 {
            s.check_binding("topk's input", rows * cols)?;
            let rows32 = u32_of(rows, "topk rows")?;
            let per_dispatch = (TOPK_VISITS_PER_DISPATCH / cols.max(1)).max(1);
            let binds = [
                whole(xb, rows * cols),
                whole(values.buffer()?, rows * k),
                whole(indices.buffer()?, rows * k),
            ];
            // A long row's arg-max: chunks over workgroups, then a merge (one workgroup a row
            // walking 49152 logits took 81 us on an H200; the split 2 x 6).
            let chunks = cols.div_ceil(ARGMAX_CHUNK);
            // Natively: the browser package leaves the two entry points out.
            if cfg!(native) && k == 1 && cols > 2 * ARGMAX_CHUNK && chunks <= 65535 && rows <= 65535
            {
                let scratch_len = rows * chunks * 2;
                s.check_binding("arg-max's partial results", scratch_len)?;
                let scratch = s.alloc(&mut st, scratch_len * 4)?;
                let p = TopKParams {
                    rows: rows32,
                    cols: cols as u32,
                    k: 1,
                    chunks: chunks as u32,
                    chunk: ARGMAX_CHUNK as u32,
                    ..TopKParams::zeroed()
                };
                let partial_binds = [
                    whole(xb, rows * cols),
                    whole(&scratch, scratch_len),
                    whole(indices.buffer()?, rows),
                ];
                let kernel = Kernel::TopKSplit { merge: false };
                let grid = [chunks as u32, rows32, 1];
                s.dispatch_grid(
                    &mut st,
                    kernel,
                    bytemuck::bytes_of(&p),
                    &partial_binds,
                    grid,
                )?;
                let merge_binds = [
                    whole(&scratch, scratch_len),
                    whole(values.buffer()?, rows),
                    whole(indices.buffer()?, rows),
                ];
                let kernel = Kernel::TopKSplit { merge: true };
                s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &merge_binds, rows)?;
                st.retire(scratch);
                return Ok((values, indices));
            }
            // Radix selection: at most six passes over a row in one dispatch, whatever k.
            if (2..=TOPK_SELECT_MAX_K).contains(&k) && 6 * cols <= TOPK_VISITS_PER_DISPATCH {
                let p = TopKParams {
                    rows: rows32,
                    cols: cols as u32,
                    k: k as u32,
                    r0: 0,
                    r1: k as u32,
                    ..TopKParams::zeroed()
                };
                let kernel = Kernel::TopKSelect;
                s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, rows)?;
                return Ok((values, indices));
            }
            let mut r0 = 0;
            while r0 < k {
                let r1 = (r0 + per_dispatch).min(k);
                let p = TopKParams {
                    rows: rows32,
                    cols: cols as u32,
                    k: k as u32,
                    r0: r0 as u32,
                    r1: r1 as u32,
                    ..TopKParams::zeroed()
                };
                s.dispatch(&mut st, Kernel::TopK, bytemuck::bytes_of(&p), &binds, rows)?;
                r0 = r1;
            }
        }
        Ok((values, indices))
    }
}
