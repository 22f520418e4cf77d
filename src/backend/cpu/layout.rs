//! Strided copies on the CPU (permute, slice, concat).

use super::CpuStorage;
use crate::ops::layout::CopySpec;

/// Strided copies into a fresh buffer; the innermost axis moves as a run when both sides
/// are contiguous along it.
pub(super) fn copy(parts: &[&CpuStorage], specs: &[CopySpec], n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    for (src, spec) in parts.iter().zip(specs) {
        let rank = spec.shape.len();
        let total = spec.len();
        if total == 0 {
            continue;
        }
        if rank == 0 {
            out[spec.out_offset] = src.0[spec.src_offset];
            continue;
        }
        let inner = spec.shape[rank - 1];
        let unit = spec.src_strides[rank - 1] == 1 && spec.out_strides[rank - 1] == 1;
        for line in 0..total / inner {
            let (mut rem, mut from, mut to) = (line, spec.src_offset, spec.out_offset);
            for d in (0..rank - 1).rev() {
                let c = rem % spec.shape[d];
                rem /= spec.shape[d];
                from += c * spec.src_strides[d];
                to += c * spec.out_strides[d];
            }
            if unit {
                out[to..to + inner].copy_from_slice(&src.0[from..from + inner]);
            } else {
                for j in 0..inner {
                    out[to + j * spec.out_strides[rank - 1]] =
                        src.0[from + j * spec.src_strides[rank - 1]];
                }
            }
        }
    }
    out
}
