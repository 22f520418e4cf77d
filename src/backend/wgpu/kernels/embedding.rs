//! Embedding lookups: one invocation per output element.

use super::super::{WgpuBackend, WgpuStorage};
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use bytemuck::{Pod, Zeroable};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct EmbeddingParams {
    n: u32,
    dim: u32,
    _pad: [u32; 2],
}

impl WgpuBackend {
    pub(super) fn encode_embedding(
        &self,
        table: &WgpuStorage,
        ids: &[u32],
        dim: usize,
    ) -> Result<WgpuStorage> {
        let s = self.begin()?;
        let tb = table.buffer()?;
        let (rows, dim) = (ids.len() as u64, dim as u64);
        let n = rows * dim;
        // Rows up to the largest id are all the gather can touch (ids are checked on the host).
        let vocab_len = ids.iter().max().map_or(1, |&m| (u64::from(m) + 1) * dim);
        if n > 0 {
            s.check_binding("the embedding table", vocab_len)?;
            s.check_binding("the embedding output", n)?;
        }
        let p = EmbeddingParams {
            n: u32_of(n, "embedding elements")?,
            dim: dim as u32,
            _pad: [0; 2],
        };
        let ids_buf = s.upload_bytes(bytemuck::cast_slice(ids))?;
        let mut st = s.state();
        let out = match s.alloc(&mut st, n * 4) {
            Ok(out) => out,
            Err(e) => {
                st.retire_upload(ids_buf);
                return Err(e);
            }
        };
        let binds = [whole(tb, vocab_len), whole(&ids_buf, rows), whole(&out, n)];
        let recorded = s.dispatch(
            &mut st,
            Kernel::Embedding,
            bytemuck::bytes_of(&p),
            &binds,
            n.div_ceil(WG),
        );
        st.retire_upload(ids_buf);
        recorded?;
        Ok(s.storage(out))
    }
}
