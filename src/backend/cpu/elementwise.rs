//! Elementwise ops on the CPU: unary, broadcasting binary and fused expressions, all through
//! one evaluator. Work is cut into blocks of [`BLOCK`] elements that stay in L1; blocks run on
//! rayon's threads natively. Each inner loop is a plain loop over slices that LLVM vectorises:
//! AVX2/FMA clones are chosen at run time on x86-64 (`multiversion`), NEON is the aarch64
//! baseline, and wasm32 gets 128-bit SIMD when built with `+simd128`.

use super::fused::{slots, BLOCK};
use super::par;
use super::vmath;
use crate::ops::{BinaryOp, UnaryOp};
use multiversion::multiversion;
use std::mem::MaybeUninit;

/// `out[i] = op(x[i])`.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
pub(super) fn unary(op: UnaryOp, x: &[f32], out: &mut [MaybeUninit<f32>]) {
    macro_rules! map {
        ($v:ident => $e:expr) => {
            for (o, &$v) in out.iter_mut().zip(x) {
                o.write($e);
            }
        };
    }
    match op {
        UnaryOp::Relu => map!(v => if v < 0.0 { 0.0 } else { v }),
        UnaryOp::LeakyRelu(a) => map!(v => if v < 0.0 { a * v } else { v }),
        UnaryOp::Elu(a) => map!(v => if v > 0.0 { v } else { a * (vmath::exp(v) - 1.0) }),
        UnaryOp::Sigmoid => map!(v => 1.0 / (1.0 + vmath::exp(-v))),
        UnaryOp::Tanh => map!(v => vmath::tanh(v)),
        UnaryOp::Silu => map!(v => v / (1.0 + vmath::exp(-v))),
        UnaryOp::Gelu => {
            map!(v => 0.5 * v * (1.0 + vmath::erf(v * std::f32::consts::FRAC_1_SQRT_2)))
        }
        UnaryOp::GeluTanh => {
            const K: f32 = 0.797_884_6; // sqrt(2 / pi)
            map!(v => 0.5 * v * (1.0 + vmath::tanh(K * (v + 0.044715 * v * v * v))))
        }
        UnaryOp::Clip { min, max } => {
            map!(v => if v < min { min } else if v > max { max } else { v })
        }
        UnaryOp::Scale(s) => map!(v => v * s),
        UnaryOp::Exp => map!(v => vmath::exp(v)),
        UnaryOp::Log => map!(v => vmath::ln(v)),
        UnaryOp::Sqrt => map!(v => v.sqrt()),
        UnaryOp::Neg => map!(v => -v),
        UnaryOp::Abs => map!(v => v.abs()),
    }
}

/// One side of a binary op within a block: a run of elements or one repeated value.
#[derive(Clone, Copy)]
pub(super) enum Side<'a> {
    Run(&'a [f32]),
    Splat(f32),
}

/// `out[i] = op(a[i], b[i])` with either side possibly one repeated value.
#[multiversion(targets(
    "x86_64+avx2+fma+avx512f+avx512bw+avx512dq+avx512vl",
    "x86_64+avx2+fma"
))]
pub(super) fn binary(op: BinaryOp, a: Side<'_>, b: Side<'_>, out: &mut [MaybeUninit<f32>]) {
    macro_rules! by_op {
        ($go:ident) => {
            match op {
                BinaryOp::Add => $go!(|x: f32, y: f32| x + y),
                BinaryOp::Sub => $go!(|x: f32, y: f32| x - y),
                BinaryOp::Mul => $go!(|x: f32, y: f32| x * y),
                BinaryOp::Div => $go!(|x: f32, y: f32| x / y),
            }
        };
    }
    // The loops are spelled out per case (no closures over `Side`) so each one vectorises.
    match (a, b) {
        (Side::Run(a), Side::Run(b)) => {
            macro_rules! go {
                ($f:expr) => {
                    for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                        o.write($f(x, y));
                    }
                };
            }
            by_op!(go)
        }
        (Side::Run(a), Side::Splat(y)) => {
            macro_rules! go {
                ($f:expr) => {
                    for (o, &x) in out.iter_mut().zip(a) {
                        o.write($f(x, y));
                    }
                };
            }
            by_op!(go)
        }
        (Side::Splat(x), Side::Run(b)) => {
            macro_rules! go {
                ($f:expr) => {
                    for (o, &y) in out.iter_mut().zip(b) {
                        o.write($f(x, y));
                    }
                };
            }
            by_op!(go)
        }
        (Side::Splat(x), Side::Splat(y)) => out.fill(MaybeUninit::new(op.apply(x, y))),
    }
}

/// Applies `op` to every element of `v` in place (matmul and conv epilogues).
pub(super) fn unary_in_place(op: UnaryOp, v: &mut [f32]) {
    // A short run (a product's column panel, row by row) copies through a small buffer, not
    // a block-sized one that would be zeroed every call.
    const SHORT: usize = 64;
    if v.len() <= SHORT {
        let mut tmp = [0.0f32; SHORT];
        let t = &mut tmp[..v.len()];
        t.copy_from_slice(v);
        unary(op, t, slots(v));
        return;
    }
    par::chunks_mut(v, par::GRAIN, |_, chunk| {
        let mut tmp = [0.0f32; BLOCK];
        for block in chunk.chunks_mut(BLOCK) {
            let t = &mut tmp[..block.len()];
            t.copy_from_slice(block);
            unary(op, t, slots(block));
        }
    });
}

/// `out[i] = c[i % lc] != 0 ? a[i % la] : b[i % lb]` (NaN counts as true).
pub(super) fn where_select(x: [&[f32]; 3], lens: [usize; 3], n: usize) -> Vec<f32> {
    let at = |j: usize, i: usize| x[j][if lens[j] == n { i } else { i % lens[j] }];
    (0..n)
        .map(|i| {
            let c = at(0, i);
            if c != 0.0 || c.is_nan() {
                at(1, i)
            } else {
                at(2, i)
            }
        })
        .collect()
}

/// Fills `out` with the elements `start..start + out.len()` (row-major over `shape`) of an
/// operand read at `offset + c . strides` of `src`: a run along the last axis at a time.
pub(super) fn gather(
    src: &[f32],
    shape: &[usize],
    strides: &[usize],
    offset: usize,
    start: usize,
    out: &mut [f32],
) {
    let Some(last) = shape.len().checked_sub(1) else {
        out.fill(src[offset]);
        return;
    };
    let mut c = [0usize; crate::ops::layout::MAX_RANK];
    let mut rem = start;
    let mut at = offset;
    for d in (0..shape.len()).rev() {
        c[d] = rem % shape[d];
        rem /= shape[d];
        at += c[d] * strides[d];
    }
    let (len, step) = (shape[last], strides[last]);
    let mut i = 0;
    while i < out.len() {
        let run = (len - c[last]).min(out.len() - i);
        if step == 1 {
            out[i..i + run].copy_from_slice(&src[at..at + run]);
        } else {
            for (j, o) in out[i..i + run].iter_mut().enumerate() {
                *o = src[at + j * step];
            }
        }
        i += run;
        c[last] += run;
        at += run * step;
        if c[last] < len {
            continue;
        }
        // Carry into the axes before the last one.
        at -= len * step;
        c[last] = 0;
        for d in (0..last).rev() {
            c[d] += 1;
            at += strides[d];
            if c[d] < shape[d] {
                break;
            }
            at -= shape[d] * strides[d];
            c[d] = 0;
        }
    }
}

/// A unary or binary op over operands read through strides (see `StridedSpec`): each block of
/// the output gathers its operands into buffers that stay in L1, then runs the dense loop.
pub(super) fn strided(
    a: &[f32],
    b: Option<&[f32]>,
    s: &crate::ops::elementwise::StridedSpec,
) -> Vec<f32> {
    use crate::ops::elementwise::StridedOp;
    let mut out: Vec<f32> = Vec::with_capacity(s.n);
    par::chunks_mut(
        &mut out.spare_capacity_mut()[..s.n],
        par::GRAIN,
        |start, chunk| {
            let (mut ta, mut tb) = ([0.0f32; BLOCK], [0.0f32; BLOCK]);
            for (k, block) in chunk.chunks_mut(BLOCK).enumerate() {
                let (i0, len) = (start + k * BLOCK, block.len());
                let ta = &mut ta[..len];
                gather(a, &s.shape, &s.a.strides, s.a.offset, i0, ta);
                match (s.op, b.zip(s.b.as_ref())) {
                    (StridedOp::Binary(op), Some((b, sb))) => {
                        let tb = &mut tb[..len];
                        gather(b, &s.shape, &sb.strides, sb.offset, i0, tb);
                        binary(op, Side::Run(ta), Side::Run(tb), block);
                    }
                    (StridedOp::Swiglu, Some((b, sb))) => {
                        let tb = &mut tb[..len];
                        gather(b, &s.shape, &sb.strides, sb.offset, i0, tb);
                        // Element by element: a SwiGLU between products is not the hot loop.
                        for ((o, &x), &y) in block.iter_mut().zip(ta.iter()).zip(tb.iter()) {
                            o.write(x / (1.0 + (-x).exp()) * y);
                        }
                    }
                    (StridedOp::Unary(op), _) => unary(op, ta, block),
                    // The ops layer gives a binary op both operands.
                    // The ops layer gives a binary op both operands.
                    (StridedOp::Binary(_) | StridedOp::Swiglu, None) => {
                        block.fill(std::mem::MaybeUninit::new(f32::NAN))
                    }
                }
            }
        },
    );
    // SAFETY: the chunks cover `0..n`, and every block is written by one arm above.
    unsafe { out.set_len(s.n) };
    out
}
