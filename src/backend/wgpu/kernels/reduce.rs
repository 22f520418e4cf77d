//! Reductions and the dot product: partial results per chunk of a row, finished on the device.

use super::super::{Shared, State, WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel};
use crate::error::Result;
use crate::ops::ReduceOp;
use bytemuck::{Pod, Zeroable};

/// Columns one reduction or softmax workgroup covers before the row is split into chunks.
pub(super) const CHUNK: u64 = 4096;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
pub(super) struct RowParams {
    pub(super) rows: u32,
    pub(super) cols: u32,
    pub(super) chunks: u32,
    pub(super) chunk_len: u32,
    /// `scale` (f32 bits) for reductions, element count for softmax.
    pub(super) extra: u32,
    pub(super) _pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_reduce(
        &self,
        op: ReduceOp,
        x: &WgpuStorage,
        rows: usize,
        cols: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let xb = x.buffer()?;
        let mut st = s.state();
        let out = s.alloc(&mut st, rows as u64 * 4)?;
        if rows > 0 && cols == 0 {
            s.clear(&mut st, &out);
        } else if rows > 0 {
            let scale = if op == ReduceOp::Mean {
                1.0 / cols as f32
            } else {
                1.0
            };
            s.reduce_rows(
                &mut st,
                Kernel::ReducePartial { op, dot: false },
                op,
                (xb, xb),
                rows as u64,
                cols as u64,
                scale,
                &out,
            )?;
        }
        Ok(s.storage(out))
    }

    pub(super) fn encode_dot(
        &self,
        a: &WgpuStorage,
        b: &WgpuStorage,
        n: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (ab, bb) = (a.buffer()?, b.buffer()?);
        let mut st = s.state();
        let out = s.alloc(&mut st, 4)?;
        if n == 0 {
            s.clear(&mut st, &out);
        } else {
            let kernel = Kernel::ReducePartial {
                op: ReduceOp::Sum,
                dot: true,
            };
            s.reduce_rows(
                &mut st,
                kernel,
                ReduceOp::Sum,
                (ab, bb),
                1,
                n as u64,
                1.0,
                &out,
            )?;
        }
        Ok(s.storage(out))
    }
}

impl Shared {
    /// Reduces `rows` rows of `cols` elements (two passes when a row spans several chunks).
    #[allow(clippy::too_many_arguments)]
    fn reduce_rows(
        &self,
        st: &mut State,
        partial: Kernel,
        op: ReduceOp,
        (a, b): (&wgpu::Buffer, &wgpu::Buffer),
        rows: u64,
        cols: u64,
        scale: f32,
        out: &wgpu::Buffer,
    ) -> Result<()> {
        let n = rows * cols;
        self.check_binding("a reduction's input", n)?;
        let chunks = cols.div_ceil(CHUNK);
        let params = |rows: u64, cols: u64, chunks: u64, scale: f32| {
            bytemuck::bytes_of(&RowParams {
                rows: rows as u32,
                cols: cols as u32,
                chunks: chunks as u32,
                chunk_len: CHUNK as u32,
                extra: scale.to_bits(),
                _pad: [0; 3],
            })
            .to_vec()
        };
        u32_of(rows * chunks, "reduction workgroups")?;
        let inputs = [whole(a, n), whole(b, n)];
        if chunks == 1 {
            let binds = [inputs[0], inputs[1], whole(out, rows)];
            return self.dispatch(st, partial, &params(rows, cols, 1, scale), &binds, rows);
        }
        let partials = self.alloc(st, rows * chunks * 4)?;
        let binds = [inputs[0], inputs[1], whole(&partials, rows * chunks)];
        self.dispatch(
            st,
            partial,
            &params(rows, cols, chunks, 1.0),
            &binds,
            rows * chunks,
        )?;
        let p = whole(&partials, rows * chunks);
        let binds = [p, p, whole(out, rows)];
        self.dispatch(
            st,
            Kernel::ReduceFinish(op),
            &params(rows, cols, chunks, scale),
            &binds,
            rows,
        )?;
        st.retire(partials);
        Ok(())
    }
}
