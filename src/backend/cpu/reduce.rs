//! Reductions and dot products on the CPU. Sums accumulate in f64 across eight independent
//! lanes, which LLVM turns into SIMD (a single running sum cannot be vectorised without
//! reordering the additions, which it may not do on its own).

use super::par;
use crate::ops::ReduceOp;
use multiversion::multiversion;

pub(super) const LANES: usize = 8;

/// Sum of `x` in f64.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
pub(super) fn sum(x: &[f32]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for l in 0..LANES {
            acc[l] += c[l] as f64;
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&v| v as f64).sum::<f64>()
}

/// Dot product in f64.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (ca, cb) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..LANES {
            acc[l] += x[l] as f64 * y[l] as f64;
        }
    }
    acc.iter().sum::<f64>()
        + ra.iter()
            .zip(rb)
            .map(|(&x, &y)| x as f64 * y as f64)
            .sum::<f64>()
}

/// Largest (or smallest) element; NaN if any element is NaN.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
pub(super) fn extreme(x: &[f32], largest: bool) -> f32 {
    // `a` wins when it beats the running value or is NaN; a NaN running value never loses,
    // because no comparison with it is true.
    macro_rules! fold {
        ($beats:expr, $init:expr) => {{
            let mut acc = [$init; LANES];
            let chunks = x.chunks_exact(LANES);
            let rest = chunks.remainder();
            for c in chunks {
                for l in 0..LANES {
                    let a = c[l];
                    acc[l] = if $beats(a, acc[l]) || a.is_nan() {
                        a
                    } else {
                        acc[l]
                    };
                }
            }
            acc.iter().chain(rest).fold(
                $init,
                |m, &a| if $beats(a, m) || a.is_nan() { a } else { m },
            )
        }};
    }
    if largest {
        fold!(|a: f32, m: f32| a > m, f32::NEG_INFINITY)
    } else {
        fold!(|a: f32, m: f32| a < m, f32::INFINITY)
    }
}

/// One reduction per row of `cols` elements.
pub(super) fn reduce(op: ReduceOp, x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; rows];
    if cols == 0 {
        return out;
    }
    // Rows per task such that each task reads about GRAIN elements.
    let per_task = (par::GRAIN / cols).max(1);
    par::chunks_mut(&mut out, per_task, |r0, o| {
        for (r, slot) in o.iter_mut().enumerate() {
            let row = &x[(r0 + r) * cols..(r0 + r + 1) * cols];
            *slot = match op {
                ReduceOp::Sum => sum(row) as f32,
                ReduceOp::Mean => (sum(row) / cols as f64) as f32,
                ReduceOp::Max => extreme(row, true),
                ReduceOp::Min => extreme(row, false),
            };
        }
    });
    out
}
