//! Comparisons of any dtype (a u32 mask of 0 and 1) and integer arithmetic: the elementwise
//! ops that work on a dtype's own values rather than on f32.
//!
//! Float comparisons follow IEEE: NaN is unequal to everything, itself included, and neither
//! less nor greater; -0 equals +0. Integer add, sub and mul wrap (two's complement), as
//! `wrapping_add` does; i32 and u32 compare as signed and unsigned numbers.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::elementwise::BinaryOp;
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::shape::broadcast;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// A comparison; its result is a u32 tensor of 1 where it holds and 0 elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompareOp {
    /// `a == b`.
    Equal,
    /// `a != b` (true when either is NaN).
    NotEqual,
    /// `a < b`.
    Less,
    /// `a <= b`.
    LessEqual,
    /// `a > b`.
    Greater,
    /// `a >= b`.
    GreaterEqual,
}

impl CompareOp {
    /// Every comparison.
    pub const ALL: [CompareOp; 6] = [
        CompareOp::Equal,
        CompareOp::NotEqual,
        CompareOp::Less,
        CompareOp::LessEqual,
        CompareOp::Greater,
        CompareOp::GreaterEqual,
    ];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Equal => "equal",
            CompareOp::NotEqual => "not_equal",
            CompareOp::Less => "less",
            CompareOp::LessEqual => "less_equal",
            CompareOp::Greater => "greater",
            CompareOp::GreaterEqual => "greater_equal",
        }
    }
}

/// What a kernel of this family computes: integer arithmetic (codes 0-2) or a comparison
/// (codes 3-8), as the kernels number them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WordOp {
    Arith(BinaryOp),
    Compare(CompareOp),
}

impl WordOp {
    pub(crate) fn code(self) -> u32 {
        match self {
            WordOp::Arith(op) => op as u32,
            WordOp::Compare(op) => {
                3 + CompareOp::ALL.iter().position(|&c| c == op).unwrap_or(0) as u32
            }
        }
    }

    fn name(self) -> &'static str {
        match self {
            WordOp::Arith(op) => op.name(),
            WordOp::Compare(op) => op.name(),
        }
    }

    /// The op on two elements' bits of `kind` (the CPU backend's kernel).
    pub(crate) fn apply(self, kind: DType, a: u32, b: u32) -> u32 {
        use std::cmp::Ordering;
        let order = match kind {
            DType::I32 => Some((a as i32).cmp(&(b as i32))),
            DType::U32 => Some(a.cmp(&b)),
            _ => f32::from_bits(a).partial_cmp(&f32::from_bits(b)),
        };
        match self {
            WordOp::Arith(BinaryOp::Add) => a.wrapping_add(b),
            WordOp::Arith(BinaryOp::Sub) => a.wrapping_sub(b),
            WordOp::Arith(_) => a.wrapping_mul(b),
            WordOp::Compare(op) => u32::from(match op {
                CompareOp::Equal => order == Some(Ordering::Equal),
                CompareOp::NotEqual => order != Some(Ordering::Equal),
                CompareOp::Less => order == Some(Ordering::Less),
                CompareOp::LessEqual => matches!(order, Some(Ordering::Less | Ordering::Equal)),
                CompareOp::Greater => order == Some(Ordering::Greater),
                CompareOp::GreaterEqual => {
                    matches!(order, Some(Ordering::Greater | Ordering::Equal))
                }
            }),
        }
    }
}

/// `out[i] = op(a[i % a_len], b[i % b_len])` over 32-bit elements of `kind` (f32, i32 or u32).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CompareSpec {
    pub op: WordOp,
    pub kind: DType,
    pub n: usize,
    pub a_len: usize,
    pub b_len: usize,
}

impl OpSpec for CompareSpec {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 3)
    }
}

impl Tensor {
    /// Compares elementwise with NumPy broadcasting: a u32 tensor of 1 where `self op rhs`
    /// holds, 0 elsewhere (a mask for [`Tensor::where_cond`]). Both operands share a dtype;
    /// f16 and bf16 compare as the f32 values they hold.
    pub fn compare(&self, op: CompareOp, rhs: &Tensor) -> Result<Tensor> {
        let (a, b) = match (self.dtype(), rhs.dtype()) {
            (x, y) if x == y && x.size() == 4 => (self.clone(), rhs.clone()),
            (x, y) if x.is_float() && y.is_float() => {
                (self.cast(DType::F32)?, rhs.cast(DType::F32)?)
            }
            (x, y) => return Err(mixed(op.name(), x, y)),
        };
        a.word_op(WordOp::Compare(op), &b, DType::U32)
    }

    /// `self == rhs` (see [`Tensor::compare`]).
    pub fn equal(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::Equal, rhs)
    }

    /// `self != rhs`.
    pub fn not_equal(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::NotEqual, rhs)
    }

    /// `self < rhs`.
    pub fn less(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::Less, rhs)
    }

    /// `self <= rhs`.
    pub fn less_equal(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::LessEqual, rhs)
    }

    /// `self > rhs`.
    pub fn greater(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::Greater, rhs)
    }

    /// `self >= rhs`.
    pub fn greater_equal(&self, rhs: &Tensor) -> Result<Tensor> {
        self.compare(CompareOp::GreaterEqual, rhs)
    }

    /// add, sub or mul of two integer tensors of one dtype (wrapping); div of integers and
    /// integers mixed with floats are errors.
    pub(crate) fn binary_int(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        let (x, y) = (self.dtype(), rhs.dtype());
        if x != y {
            return Err(mixed(op.name(), x, y));
        }
        if op == BinaryOp::Div {
            return Err(Error::InvalidArgument {
                op: "div",
                reason: format!("div takes float tensors, not {x} (cast both to f32 first)"),
            });
        }
        self.word_op(WordOp::Arith(op), rhs, x)
    }

    fn word_op(&self, op: WordOp, rhs: &Tensor, out: DType) -> Result<Tensor> {
        if !self.is_contiguous() || !rhs.is_contiguous() {
            return self.contiguous()?.word_op(op, &rhs.contiguous()?, out);
        }
        let name = op.name();
        self.same_device(rhs, name)?;
        let bc = broadcast(name, self.shape(), rhs.shape())?;
        let n = self.device().check_output_of(name, &bc.shape, out)?;
        let expanded = |t: &Tensor, expand: bool| -> Result<Option<Tensor>> {
            expand
                .then(|| t.broadcast_to(&bc.shape)?.contiguous())
                .transpose()
        };
        let (ea, eb) = (expanded(self, bc.expand_a)?, expanded(rhs, bc.expand_b)?);
        let (a, b) = (ea.as_ref().unwrap_or(self), eb.as_ref().unwrap_or(rhs));
        let spec = CompareSpec {
            op,
            kind: self.dtype(),
            n,
            a_len: bc.a_len,
            b_len: bc.b_len,
        };
        let storage = self
            .device()
            .op(&spec)
            .compare(a.storage(), b.storage(), spec)?;
        let result = Tensor::new_typed(self.device().clone(), storage, bc.shape, out);
        result.verified(name, [self, rhs], Tol::Exact, move |t| {
            t[0].word_op(op, t[1], out)
        })
    }
}

fn mixed(op: &'static str, a: DType, b: DType) -> Error {
    Error::InvalidArgument {
        op,
        reason: format!("the operands are {a} and {b} (cast one to the other's dtype)"),
    }
}
