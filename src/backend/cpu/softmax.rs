//! Softmax and log-softmax of rows on the CPU.

use super::par;
use super::reduce::{extreme, sum, LANES};
use super::vmath;
use multiversion::multiversion;

/// Softmax (or log-softmax) of each row, in place in `out` (which holds a copy of the input).
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
fn softmax_row(row: &mut [f32], log: bool) {
    let m = extreme(row, true);
    if log {
        let mut acc = [0.0f64; LANES];
        let chunks = row.chunks_exact(LANES);
        let rest = chunks.remainder();
        for c in chunks {
            for l in 0..LANES {
                acc[l] += vmath::exp(c[l] - m) as f64;
            }
        }
        let s =
            acc.iter().sum::<f64>() + rest.iter().map(|&v| vmath::exp(v - m) as f64).sum::<f64>();
        let ls = (s as f32).ln();
        row.iter_mut().for_each(|v| *v = *v - m - ls);
    } else {
        row.iter_mut().for_each(|v| *v = vmath::exp(*v - m));
        let s = sum(row) as f32;
        row.iter_mut().for_each(|v| *v /= s);
    }
}

pub(super) fn softmax(x: &[f32], rows: usize, cols: usize, log: bool) -> Vec<f32> {
    let mut out = x[..rows * cols].to_vec();
    par::rows_mut(&mut out, cols, |_, block| {
        for row in block.chunks_exact_mut(cols) {
            softmax_row(row, log);
        }
    });
    out
}
