//! Embedding lookups on the CPU: one row copy per id.

use super::par;

pub(super) fn embedding(table: &[f32], ids: &[u32], dim: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; ids.len() * dim];
    par::rows_mut(&mut out, dim, |r0, block| {
        for (r, row) in block.chunks_exact_mut(dim).enumerate() {
            let id = ids[r0 + r] as usize;
            row.copy_from_slice(&table[id * dim..(id + 1) * dim]);
        }
    });
    out
}
