//! Comparisons and integer arithmetic on the CPU, on the elements' bits.

use super::par;
use crate::ops::compare::CompareSpec;

pub(super) fn compare(a: &[f32], b: &[f32], s: CompareSpec) -> Vec<f32> {
    let mut out = vec![0f32; s.n];
    par::chunks_mut(&mut out, par::GRAIN, |start, chunk| {
        for (j, o) in chunk.iter_mut().enumerate() {
            let i = start + j;
            let (x, y) = (a[i % s.a_len].to_bits(), b[i % s.b_len].to_bits());
            *o = f32::from_bits(s.op.apply(s.kind, x, y));
        }
    });
    out
}
