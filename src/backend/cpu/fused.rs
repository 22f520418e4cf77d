//! Fused elementwise expressions on the CPU, and the evaluator that unary and binary ops share:
//! work is cut into blocks of [`BLOCK`] elements that stay in L1, run on rayon's threads
//! natively; each node of the tree runs the block kernels of `elementwise` over one block.

use super::elementwise::{binary, unary, Side};
use super::par;
use super::CpuStorage;
use crate::backend::Operand;
use crate::ops::fused::Expr;
use std::mem::MaybeUninit;

/// Elements per evaluation block: a few such buffers stay in L1.
pub(super) const BLOCK: usize = 1024;

/// Reusable block buffers, so evaluating a tree allocates once per thread task.
struct Buffers(Vec<Vec<f32>>);

impl Buffers {
    fn take(&mut self, len: usize) -> Vec<f32> {
        let mut b = self.0.pop().unwrap_or_default();
        b.resize(len, 0.0);
        b
    }

    fn give(&mut self, b: Vec<f32>) {
        self.0.push(b);
    }
}

/// Views initialised floats as slots to overwrite (the kernels write every slot they get).
pub(super) fn slots(v: &mut [f32]) -> &mut [MaybeUninit<f32>] {
    // SAFETY: MaybeUninit<f32> has f32's layout, and everything written through the view is
    // an initialised f32, so the floats stay initialised.
    unsafe { &mut *(v as *mut [f32] as *mut [MaybeUninit<f32>]) }
}

/// Copies elements `i0..i0 + out.len()` of an operand that repeats every `len` elements.
fn gather(src: &[f32], len: usize, i0: usize, out: &mut [MaybeUninit<f32>]) {
    let mut from = i0 % len;
    let mut done = 0;
    while done < out.len() {
        let run = (len - from).min(out.len() - done);
        for (o, &v) in out[done..done + run].iter_mut().zip(&src[from..from + run]) {
            o.write(v);
        }
        done += run;
        from = 0;
    }
}

/// The value of a leaf or subtree over one block, borrowing the input where it can.
fn side<'a>(
    e: &Expr,
    inputs: &'a [Operand<'_, CpuStorage>],
    i0: usize,
    n: usize,
    bufs: &mut Buffers,
    held: &'a mut Option<Vec<f32>>,
) -> Side<'a> {
    if let Expr::Input(j) = e {
        let (s, len) = inputs[*j];
        if len == 1 {
            return Side::Splat(s.0[0]);
        }
        if i0 % len + n <= len {
            return Side::Run(&s.0[i0 % len..i0 % len + n]);
        }
    }
    let mut b = bufs.take(n);
    eval(e, inputs, i0, slots(&mut b), bufs);
    Side::Run(held.insert(b))
}

/// Writes elements `i0..i0 + out.len()` of `e` into every slot of `out`.
fn eval(
    e: &Expr,
    inputs: &[Operand<'_, CpuStorage>],
    i0: usize,
    out: &mut [MaybeUninit<f32>],
    bufs: &mut Buffers,
) {
    let n = out.len();
    match e {
        Expr::Input(j) => {
            let (s, len) = inputs[*j];
            gather(&s.0, len, i0, out);
        }
        Expr::Unary(op, x) => {
            let mut held = None;
            match side(x, inputs, i0, n, bufs, &mut held) {
                Side::Run(v) => unary(*op, v, out),
                Side::Splat(v) => out.fill(MaybeUninit::new(op.apply(v))),
            }
            if let Some(b) = held {
                bufs.give(b);
            }
        }
        Expr::Binary(op, a, b) => {
            let (mut ha, mut hb) = (None, None);
            let sa = side(a, inputs, i0, n, bufs, &mut ha);
            let sb = side(b, inputs, i0, n, bufs, &mut hb);
            binary(*op, sa, sb, out);
            for b in [ha, hb].into_iter().flatten() {
                bufs.give(b);
            }
        }
    }
}

/// Evaluates `e` for elements `0..n`. The output is not zeroed first: `eval` writes every
/// element (zeroing cost as much as an add, in wasm more).
pub(super) fn evaluate(e: &Expr, inputs: &[Operand<'_, CpuStorage>], n: usize) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(n);
    par::chunks_mut(
        &mut out.spare_capacity_mut()[..n],
        par::GRAIN,
        |start, chunk| {
            let mut bufs = Buffers(Vec::new());
            for (b, block) in chunk.chunks_mut(BLOCK).enumerate() {
                eval(e, inputs, start + b * BLOCK, block, &mut bufs);
            }
        },
    );
    // SAFETY: the chunks cover `0..n`, and `eval` writes every slot of the block it gets.
    unsafe { out.set_len(n) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{BinaryOp, UnaryOp};

    /// sigmoid(relu(x) * 2 + row) - scalar, over blocks and thread tasks, against the scalar
    /// ops applied one by one.
    #[test]
    fn fused_tree_matches_the_ops_one_by_one() {
        let leaf = |j| Box::new(Expr::Input(j));
        let e = Expr::Binary(
            BinaryOp::Sub,
            Box::new(Expr::Unary(
                UnaryOp::Sigmoid,
                Box::new(Expr::Binary(
                    BinaryOp::Add,
                    Box::new(Expr::Unary(
                        UnaryOp::Scale(2.0),
                        Box::new(Expr::Unary(UnaryOp::Relu, leaf(0))),
                    )),
                    leaf(1),
                )),
            )),
            leaf(2),
        );
        let n = 3 * par::GRAIN + 77;
        let row_len = 1000; // not a divisor of BLOCK: rows wrap inside blocks
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 2001) as f32 / 100.0 - 10.0)
            .collect();
        let row: Vec<f32> = (0..row_len).map(|i| (i as f32).sin()).collect();
        let (xs, rs, ss) = (
            CpuStorage(x.clone()),
            CpuStorage(row.clone()),
            CpuStorage(vec![0.25]),
        );
        let got = evaluate(&e, &[(&xs, n), (&rs, row_len), (&ss, 1)], n);
        for i in 0..n {
            let want = UnaryOp::Sigmoid.apply(x[i].max(0.0) * 2.0 + row[i % row_len]) - 0.25;
            assert!(
                (got[i] - want).abs() <= 1e-6,
                "element {i}: {} vs {want}",
                got[i]
            );
        }
    }
}
