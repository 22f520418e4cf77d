//! Embedding lookups: one invocation per output word.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::embedding::{EmbeddingSpec, WriteRowsSpec};
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbeddingParams {
    n: u32,
    dim: u32,
    vocab: u32,
    offset: u32,
    /// write_rows: words from one source row to the next.
    stride: u32,
    pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_embedding(
        &self,
        table: &WgpuStorage,
        ids: &WgpuStorage,
        spec: EmbeddingSpec,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let (rows, dim) = (spec.count as u64, spec.dim as u64);
        let n = rows * dim;
        let table_len = spec.vocab as u64 * dim;
        if n > 0 {
            s.check_binding("the embedding table", table_len)?;
            s.check_binding("the embedding output", n)?;
        }
        let p = EmbeddingParams {
            n: u32_of(n, "embedding elements")?,
            dim: dim as u32,
            vocab: u32_of(spec.vocab as u64, "embedding rows")?,
            offset: 0,
            stride: 0,
            pad: [0; 3],
        };
        let (tb, ib) = (table.buffer()?, ids.buffer()?);
        let mut st = s.state();
        let out = s.alloc(&mut st, n * 4)?;
        let binds = [whole(tb, table_len), whole(ib, rows), whole(&out, n)];
        s.dispatch(
            &mut st,
            Kernel::Embedding,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        )?;
        Ok(s.storage(out))
    }

    /// See [`WriteRowsSpec`]: rows of `dst` rewritten in place from the row `at` names.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn encode_write_rows(
        &self,
        dst: &WgpuStorage,
        src: &WgpuStorage,
        at: &WgpuStorage,
        spec: WriteRowsSpec,
    ) -> Result<()> {
        let n = spec.rows as u64 * spec.width as u64;
        if n == 0 {
            return Ok(());
        }
        let s = self.begin()?;
        // The last row ends `width` words after it starts, `(rows - 1) * stride` from the first
        // (rows > 0 here; every term a product of host sizes that fit in memory).
        let src_len =
            (spec.rows as u64 - 1) * spec.stride as u64 + spec.width as u64 + spec.offset as u64;
        let dst_len = spec.capacity as u64 * spec.width as u64;
        s.check_binding("the rows written", src_len)?;
        s.check_binding("the tensor written into", dst_len)?;
        let p = EmbeddingParams {
            n: u32_of(n, "rows written")?,
            dim: spec.width as u32,
            vocab: u32_of(spec.capacity as u64, "rows of the tensor written into")?,
            offset: u32_of(spec.offset as u64, "the offset of the rows written")?,
            stride: u32_of(spec.stride as u64, "the stride of the rows written")?,
            pad: [0; 3],
        };
        let (sb, ab, db) = (src.buffer()?, at.buffer()?, dst.buffer()?);
        let mut st = s.state();
        let binds = [whole(sb, src_len), whole(ab, 1), whole(db, dst_len)];
        s.dispatch(
            &mut st,
            Kernel::WriteRows,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        )?;
        Ok(())
    }
}
