//! Layer norm and RMS norm of rows on the CPU, accumulating in f64 lanes.

use super::par;
use super::reduce::{sum, LANES};
use crate::ops::norm::NormSpec;
use multiversion::multiversion;

/// Sum of squared distances from `mean`, in f64.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
fn squares(x: &[f32], mean: f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            let d = c[l] as f64 - mean;
            acc[l] += d * d;
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>()
}

/// Layer or RMS norm of one row into `out`.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
fn norm_row(x: &[f32], out: &mut [f32], w: Option<&[f32]>, b: Option<&[f32]>, rms: bool, eps: f32) {
    let n = x.len() as f64;
    let mean = if rms { 0.0 } else { sum(x) / n };
    let inv = 1.0 / (squares(x, mean) / n + eps as f64).sqrt();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = ((v as f64 - mean) * inv) as f32;
    }
    if let Some(w) = w {
        out.iter_mut().zip(w).for_each(|(o, &w)| *o *= w);
    }
    if let Some(b) = b {
        out.iter_mut().zip(b).for_each(|(o, &b)| *o += b);
    }
}

pub(super) fn norm(x: &[f32], w: Option<&[f32]>, b: Option<&[f32]>, spec: NormSpec) -> Vec<f32> {
    let (rows, cols) = (spec.rows, spec.cols);
    let mut out = vec![0.0f32; rows * cols];
    par::rows_mut(&mut out, cols, |r0, block| {
        for (r, o) in block.chunks_exact_mut(cols).enumerate() {
            let row = &x[(r0 + r) * cols..(r0 + r + 1) * cols];
            norm_row(row, o, w, b, spec.rms, spec.eps);
        }
    });
    out
}
