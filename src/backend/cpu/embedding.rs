//! Embedding lookups on the CPU: one row copy per id.

use super::par;
use crate::ops::embedding::{EmbeddingSpec, MISSING_ROW};

/// Rows of `s.dim` words picked by the ids' bits; an id at or above `s.vocab` gives a row of
/// [`MISSING_ROW`] words (NaN in every float dtype).
pub(super) fn embedding(table: &[f32], ids: &[f32], s: EmbeddingSpec) -> Vec<f32> {
    let dim = s.dim;
    let mut out = vec![0.0f32; s.count * dim];
    par::rows_mut(&mut out, dim, |r0, block| {
        for (r, row) in block.chunks_exact_mut(dim).enumerate() {
            let id = ids[r0 + r].to_bits() as usize;
            if id < s.vocab {
                row.copy_from_slice(&table[id * dim..(id + 1) * dim]);
            } else {
                row.fill(f32::from_bits(MISSING_ROW));
            }
        }
    });
    out
}
