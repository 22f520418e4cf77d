//! The op suite, written once, one file per op family. Each function takes the device to test;
//! `tests/ops.rs` (and the Node and browser harnesses) instantiate every function in
//! `with_suite_tests!` for every backend. Inputs are seeded random data (never zeros), the edge
//! values in `EDGES`, and the sizes in `SIZES`; every result is compared with the f64 oracle
//! within the op's tolerance.

use super::oracle::{self, Tol};
use super::{check, Rng, EDGES, SHAPE_2D, SIZES};
use gpukit::{
    AttentionOptions, BinaryOp, Device, Error, MatmulOptions, Precision, ReduceOp, Tensor, UnaryOp,
};

mod attention;
mod attention_halves;
mod batch;
mod batch_quant;
mod cast;
mod compare;
mod conv;
mod device;
mod elementwise;
mod elementwise_strided;
mod embedding;
mod errors;
mod fused;
mod group;
mod layout;
mod load;
mod matmul;
mod norm;
mod pool;
mod quant;
mod quant_prompt;
mod random;
mod reduce;
mod rope;
mod softmax;
mod topk;

pub use attention::*;
pub use attention_halves::*;
pub use batch::*;
pub use batch_quant::*;
pub use cast::*;
pub use compare::*;
pub use conv::*;
pub use device::*;
pub use elementwise::*;
pub use elementwise_strided::*;
pub use embedding::*;
pub use errors::*;
pub use fused::*;
pub use group::*;
pub use layout::*;
pub use load::*;
pub use matmul::*;
pub use norm::*;
pub use pool::*;
pub use quant::*;
pub use quant_prompt::*;
pub use random::*;
pub use reduce::*;
pub use rope::*;
pub use softmax::*;
pub use topk::*;

fn shapes() -> Vec<Vec<usize>> {
    let mut s: Vec<Vec<usize>> = SIZES.iter().map(|&n| vec![n]).collect();
    s.push(SHAPE_2D.to_vec());
    s
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Coordinates of flat index `i` in `shape` (row-major).
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

fn flat(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &d)| acc * d + x)
}

fn exact(v: &[f32]) -> Vec<(f64, Tol)> {
    v.iter()
        .map(|&x| {
            (
                x as f64,
                Tol {
                    atol: 0.0,
                    rtol: 0.0,
                },
            )
        })
        .collect()
}

fn assert_close(what: &str, got: &[f32], want: &[f32], rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= rtol * w.abs().max(1.0) || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: {g} vs {w}");
    }
}

pub(crate) fn same_bits_or_close(ctx: &str, got: &[f32], want: &[f32], rtol: f32) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g.is_finite() && w.is_finite() && (g - w).abs() <= rtol * (1.0 + w.abs()));
        assert!(ok, "{ctx}: [{i}] got {g:e}, eager gives {w:e}");
    }
}
