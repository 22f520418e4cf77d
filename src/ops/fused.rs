//! Fused elementwise expressions: a chain (or tree) of unary and binary ops over up to
//! [`MAX_INPUTS`] inputs, evaluated in one pass over memory. The batch API builds them from
//! recorded elementwise ops; the wgpu backend turns each into one generated WGSL kernel and the
//! CPU backend evaluates it block by block.

use crate::ops::OpSpec;
use crate::ops::{BinaryOp, UnaryOp};
use crate::profile::Work;
use crate::tensor::Tensor;

/// Inputs one fused kernel reads (the bind group layouts go up to four).
pub(crate) const MAX_INPUTS: usize = 4;

/// Ops one fused kernel computes at most. It bounds the depth of every expression, so the
/// code that walks one (kernel generation, keys, the CPU evaluator) recurses at most this
/// deep, and a generated kernel stays small enough to compile quickly.
pub(crate) const MAX_FUSED_OPS: usize = 64;

/// An elementwise expression. `Input(j)` reads input `j` at `i % len_j` (full, row or scalar).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Expr {
    Input(usize),
    Unary(UnaryOp, Box<Expr>),
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
}

impl Expr {
    /// An exact key of the expression (ops, parameters as bits, inputs), for caching the
    /// kernel generated from it.
    pub(crate) fn key(&self, out: &mut Vec<u32>) {
        match self {
            Expr::Input(j) => out.extend([0, *j as u32]),
            Expr::Unary(op, x) => {
                let [p0, p1] = op.params();
                out.extend([1, op.kind() as u32, p0.to_bits(), p1.to_bits()]);
                x.key(out);
            }
            Expr::Binary(op, a, b) => {
                out.extend([2, *op as u32]);
                a.key(out);
                b.key(out);
            }
        }
    }
}

/// Runs `expr` over `inputs` on their device as one kernel: a batch's fused node, and
/// verification's CPU copy of one. Input `j` is read at `i % inputs[j].len()`.
pub(crate) fn run(
    expr: &Expr,
    inputs: &[&Tensor],
    n: usize,
    shape: Vec<usize>,
) -> crate::error::Result<Tensor> {
    let Some(first) = inputs.first() else {
        return Err(crate::error::Error::InvalidArgument {
            op: "fused",
            reason: "a fused kernel needs an input".into(),
        });
    };
    first.device().check_output("fused", &shape)?;
    let storages: Vec<&crate::backend::Storage> = inputs.iter().map(|t| t.storage()).collect();
    let spec = FusedSpec {
        expr,
        n,
        lens: inputs.iter().map(|t| t.len().max(1)).collect(),
    };
    let storage = first.device().op(&spec).fused(&storages, &spec)?;
    let out = first.with_storage(storage, shape);
    let (expr, rerun_shape) = (expr.clone(), out.shape().to_vec());
    out.verified_many("fused", inputs, crate::verify::Tol::Elementwise, move |t| {
        run(&expr, t, n, rerun_shape.clone())
    })
}

/// How a kernel language spells the pieces of a generated fused kernel.
pub(crate) struct Syntax {
    /// A statement binding `name` to `value`.
    pub declare: fn(name: &str, value: &str) -> String,
    /// A call of the unary op with this kind code on `x`, with its two parameters.
    pub unary: fn(kind: u32, x: &str, p0: f32, p1: f32) -> String,
    /// The binary op on `a` and `b`.
    pub binary: fn(op: BinaryOp, a: &str, b: &str) -> String,
}

/// Appends the statements computing `e` (one per op, named `t0`, `t1`, ...) to `body` and
/// returns the name of its value; input `j` is `x{j}`.
pub(crate) fn emit(e: &Expr, syntax: &Syntax, body: &mut String, next: &mut usize) -> String {
    let value = match e {
        Expr::Input(j) => return format!("x{j}"),
        Expr::Unary(op, x) => {
            let x = emit(x, syntax, body, next);
            let [p0, p1] = op.params();
            (syntax.unary)(op.kind() as u32, &x, p0, p1)
        }
        Expr::Binary(op, a, b) => {
            let (a, b) = (emit(a, syntax, body, next), emit(b, syntax, body, next));
            (syntax.binary)(*op, &a, &b)
        }
    };
    let name = format!("t{next}");
    *next += 1;
    body.push_str(&(syntax.declare)(&name, &value));
    name
}

/// A fused expression over `n` elements; input `j` is read at `i % lens[j]`.
pub(crate) struct FusedSpec<'a> {
    pub expr: &'a Expr,
    pub n: usize,
    pub lens: Vec<usize>,
}

impl OpSpec for FusedSpec<'_> {
    fn name(&self) -> &'static str {
        "fused"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, self.lens.len() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_tell_apart_ops_parameters_and_inputs() {
        let key = |e: &Expr| {
            let mut k = Vec::new();
            e.key(&mut k);
            k
        };
        let scale = |s: f32, j: usize| Expr::Unary(UnaryOp::Scale(s), Box::new(Expr::Input(j)));
        assert_eq!(key(&scale(2.0, 0)), key(&scale(2.0, 0)));
        assert_ne!(key(&scale(2.0, 0)), key(&scale(2.5, 0)));
        assert_ne!(key(&scale(2.0, 0)), key(&scale(2.0, 1)));
        let add = |a, b| Expr::Binary(BinaryOp::Add, Box::new(a), Box::new(b));
        let sub = |a, b| Expr::Binary(BinaryOp::Sub, Box::new(a), Box::new(b));
        assert_ne!(
            key(&add(Expr::Input(0), Expr::Input(1))),
            key(&sub(Expr::Input(0), Expr::Input(1)))
        );
        assert_ne!(
            key(&add(Expr::Input(0), Expr::Input(1))),
            key(&add(Expr::Input(1), Expr::Input(0)))
        );
    }
}
