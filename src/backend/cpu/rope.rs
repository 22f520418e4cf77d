//! RoPE on the CPU: rows rotated in place by their position's cos and sin.

use super::par;
use crate::ops::RopeLayout;

pub(super) fn rope(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    [n, seq, dim]: [usize; 3],
    layout: RopeLayout,
) -> Vec<f32> {
    let mut out = x[..n].to_vec();
    let half = dim / 2;
    par::rows_mut(&mut out, dim, |r0, block| {
        for (r, v) in block.chunks_exact_mut(dim.max(1)).enumerate() {
            let t = ((r0 + r) % seq) * half;
            let (c, s) = (&cos[t..t + half], &sin[t..t + half]);
            match layout {
                RopeLayout::HalfSplit => {
                    let (lo, hi) = v.split_at_mut(half);
                    for j in 0..half {
                        let (x0, x1) = (lo[j], hi[j]);
                        lo[j] = x0 * c[j] - x1 * s[j];
                        hi[j] = x0 * s[j] + x1 * c[j];
                    }
                }
                RopeLayout::Interleaved => {
                    for (j, pair) in v.chunks_exact_mut(2).take(half).enumerate() {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0 * c[j] - x1 * s[j];
                        pair[1] = x0 * s[j] + x1 * c[j];
                    }
                }
            }
        }
    });
    out
}
