//! Elementwise ops: unary activations and math, and binary arithmetic with broadcasting.
//!
//! # NaN and infinity
//! Every op follows IEEE-754 arithmetic on the formula documented on its variant, so NaN in
//! gives NaN out (`relu(NaN)`, `clip(NaN)` and `abs(NaN)` are NaN too: comparisons never swallow
//! a NaN), `log(0) = -inf`, `log(x < 0) = NaN`, `sqrt(x < 0) = NaN`, `sigmoid(-inf) = 0`,
//! `tanh(±inf) = ±1`, and overflow gives ±inf. Denormal results may be flushed to zero on GPUs.

mod strided;

pub(crate) use strided::{swiglu_spec, StridedOp, StridedSpec};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::shape::broadcast;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// A unary elementwise operation. Parameters travel with the variant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UnaryOp {
    /// `x < 0 ? 0 : x`.
    Relu,
    /// `x < 0 ? alpha * x : x`.
    LeakyRelu(f32),
    /// `x > 0 ? x : alpha * (exp(x) - 1)`.
    Elu(f32),
    /// `1 / (1 + exp(-x))`.
    Sigmoid,
    /// `tanh(x)`.
    Tanh,
    /// `x / (1 + exp(-x))`, also called swish.
    Silu,
    /// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))`.
    Gelu,
    /// GELU with the tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// `x < min ? min : (x > max ? max : x)`; NaN stays NaN.
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound (>= min).
        max: f32,
    },
    /// `x * s`.
    Scale(f32),
    /// `exp(x)`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
}

/// The kind of a unary op without its parameters: the pipeline cache key and the shader's `OP`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub(crate) enum UnaryKind {
    Relu = 0,
    LeakyRelu = 1,
    Elu = 2,
    Sigmoid = 3,
    Tanh = 4,
    Silu = 5,
    Gelu = 6,
    GeluTanh = 7,
    Clip = 8,
    Scale = 9,
    Exp = 10,
    Log = 11,
    Sqrt = 12,
    Neg = 13,
    Abs = 14,
}

impl UnaryOp {
    /// Every op with representative parameters (used by tests, the CLI and benchmarks).
    pub const ALL: [UnaryOp; 15] = [
        UnaryOp::Relu,
        UnaryOp::LeakyRelu(0.01),
        UnaryOp::Elu(1.0),
        UnaryOp::Sigmoid,
        UnaryOp::Tanh,
        UnaryOp::Silu,
        UnaryOp::Gelu,
        UnaryOp::GeluTanh,
        UnaryOp::Clip {
            min: -0.5,
            max: 0.75,
        },
        UnaryOp::Scale(2.5),
        UnaryOp::Exp,
        UnaryOp::Log,
        UnaryOp::Sqrt,
        UnaryOp::Neg,
        UnaryOp::Abs,
    ];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Relu => "relu",
            UnaryOp::LeakyRelu(_) => "leaky_relu",
            UnaryOp::Elu(_) => "elu",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Silu => "silu",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Clip { .. } => "clip",
            UnaryOp::Scale(_) => "scale",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
        }
    }

    pub(crate) fn kind(self) -> UnaryKind {
        match self {
            UnaryOp::Relu => UnaryKind::Relu,
            UnaryOp::LeakyRelu(_) => UnaryKind::LeakyRelu,
            UnaryOp::Elu(_) => UnaryKind::Elu,
            UnaryOp::Sigmoid => UnaryKind::Sigmoid,
            UnaryOp::Tanh => UnaryKind::Tanh,
            UnaryOp::Silu => UnaryKind::Silu,
            UnaryOp::Gelu => UnaryKind::Gelu,
            UnaryOp::GeluTanh => UnaryKind::GeluTanh,
            UnaryOp::Clip { .. } => UnaryKind::Clip,
            UnaryOp::Scale(_) => UnaryKind::Scale,
            UnaryOp::Exp => UnaryKind::Exp,
            UnaryOp::Log => UnaryKind::Log,
            UnaryOp::Sqrt => UnaryKind::Sqrt,
            UnaryOp::Neg => UnaryKind::Neg,
            UnaryOp::Abs => UnaryKind::Abs,
        }
    }

    /// The op's two scalar parameters, as the shaders receive them.
    pub(crate) fn params(self) -> [f32; 2] {
        match self {
            UnaryOp::LeakyRelu(a) | UnaryOp::Elu(a) | UnaryOp::Scale(a) => [a, 0.0],
            UnaryOp::Clip { min, max } => [min, max],
            _ => [0.0, 0.0],
        }
    }

    /// Rejects parameters that have no meaning.
    pub(crate) fn validate(self) -> Result<()> {
        match self {
            UnaryOp::Clip { min, max } if min.is_nan() || max.is_nan() || min > max => {
                Err(Error::InvalidArgument {
                    op: "clip",
                    reason: format!(
                        "bounds must be numbers with min <= max, got min={min}, max={max}"
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    /// The op on one f32, exactly as documented (the CPU backend's kernel).
    pub(crate) fn apply(self, x: f32) -> f32 {
        match self {
            UnaryOp::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            UnaryOp::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            UnaryOp::Elu(a) => {
                if x > 0.0 {
                    x
                } else {
                    a * x.exp_m1()
                }
            }
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Gelu => 0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2)),
            UnaryOp::GeluTanh => {
                const K: f32 = 0.797_884_6; // sqrt(2 / pi)
                0.5 * x * (1.0 + (K * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::Clip { min, max } => {
                if x < min {
                    min
                } else if x > max {
                    max
                } else {
                    x
                }
            }
            UnaryOp::Scale(s) => x * s,
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
        }
    }
}

/// erf(x) by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), the same formula the
/// shaders use, so every backend agrees.
pub(crate) fn erf(x: f32) -> f32 {
    let t = 1.0 / (1.0 + 0.327_591_1 * x.abs());
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_72 + t * (1.421_413_8 + t * (-1.453_152_1 + t * 1.061_405_4))));
    let y = 1.0 - poly * (-x * x).exp();
    if x.is_nan() {
        x
    } else {
        y.copysign(x)
    }
}

/// A binary elementwise operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum BinaryOp {
    /// `a + b`.
    Add = 0,
    /// `a - b`.
    Sub = 1,
    /// `a * b`.
    Mul = 2,
    /// `a / b` (IEEE: `x / 0 = ±inf`, `0 / 0 = NaN`).
    Div = 3,
}

impl BinaryOp {
    /// Every binary op.
    pub const ALL: [BinaryOp; 4] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];

    /// The op's name.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        }
    }

    /// The op on two f32 values (the CPU backend's kernel).
    pub(crate) fn apply(self, a: f32, b: f32) -> f32 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
        }
    }
}

impl Tensor {
    /// Applies a unary op; enqueues the work and returns at once.
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        op.validate()?;
        if Tensor::reads_strided(&[self], self.shape(), false) {
            let out = self.strided(StridedOp::Unary(op), None, self.shape().to_vec())?;
            return out.verified(op.name(), [self], Tol::Elementwise, move |t| t[0].unary(op));
        }
        if let Some(out) = Tensor::promoted(op.name(), &[self], |t| t[0].unary(op))? {
            return Ok(out);
        }
        self.device().check_output(op.name(), self.shape())?;
        let spec = UnarySpec { op, n: self.len() };
        let storage = self.device().op(&spec).unary(self.storage(), spec)?;
        let out = self.with_storage(storage, self.shape().to_vec());
        out.verified(op.name(), [self], Tol::Elementwise, move |t| t[0].unary(op))
    }

    /// `where(self, on_true, on_false)`: `on_true` where this condition is not zero (NaN
    /// counts as true, as in NumPy), else `on_false`; the three broadcast together by NumPy's
    /// rules.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        self.same_device(on_true, "where")?;
        self.same_device(on_false, "where")?;
        if ![self, on_true, on_false].iter().all(|t| t.is_contiguous()) {
            let (c, a, b) = (
                self.contiguous()?,
                on_true.contiguous()?,
                on_false.contiguous()?,
            );
            return c.where_cond(&a, &b);
        }
        // The condition is tested as a float (an integer is nonzero exactly when its f32 is);
        // the branches share a dtype, which 32-bit kernels select as bits.
        if self.dtype() != DType::F32 {
            return self.cast(DType::F32)?.where_cond(on_true, on_false);
        }
        if on_true.dtype() != on_false.dtype() {
            return Err(Error::InvalidArgument {
                op: "where",
                reason: format!(
                    "the branches are {} and {} (cast one to the other's dtype)",
                    on_true.dtype(),
                    on_false.dtype()
                ),
            });
        }
        let branch = on_true.dtype();
        if branch.size() == 2 {
            let (a, b) = (on_true.cast(DType::F32)?, on_false.cast(DType::F32)?);
            return self.where_cond(&a, &b)?.cast(branch);
        }
        let ab = broadcast("where", on_true.shape(), on_false.shape())?;
        let shape = broadcast("where", self.shape(), &ab.shape)?.shape;
        let n = self.device().check_output("where", &shape)?;
        // Each operand is read by repetition, or expanded to the output's shape first.
        let fit = |t: &Tensor| -> Result<(Option<Tensor>, usize)> {
            let b = broadcast("where", t.shape(), &shape)?;
            if b.expand_a {
                Ok((Some(t.broadcast_to(&shape)?.contiguous()?), n))
            } else {
                Ok((None, b.a_len))
            }
        };
        let (c, a, b) = (fit(self)?, fit(on_true)?, fit(on_false)?);
        let spec = WhereSpec {
            n,
            lens: [c.1, a.1, b.1],
        };
        let storage = self.device().op(&spec).where_select(
            c.0.as_ref().unwrap_or(self).storage(),
            a.0.as_ref().unwrap_or(on_true).storage(),
            b.0.as_ref().unwrap_or(on_false).storage(),
            spec,
        )?;
        let out = Tensor::new_typed(self.device().clone(), storage, shape, branch);
        out.verified_many("where", &[self, on_true, on_false], Tol::Exact, |t| {
            t[0].where_cond(t[1], t[2])
        })
    }

    /// Applies a binary op with broadcasting (see [`BinaryOp`]); shapes that do not broadcast
    /// give [`Error::ShapeMismatch`] naming both.
    pub fn binary(&self, op: BinaryOp, rhs: &Tensor) -> Result<Tensor> {
        self.same_device(rhs, op.name())?;
        if !self.dtype().is_float() || !rhs.dtype().is_float() {
            return self.binary_int(op, rhs);
        }
        let bc = broadcast(op.name(), self.shape(), rhs.shape())?;
        // Views, and operands that broadcast other than by repetition, are read in place.
        if Tensor::reads_strided(&[self, rhs], &bc.shape, bc.expand_a || bc.expand_b) {
            let out = self.strided(StridedOp::Binary(op), Some(rhs), bc.shape)?;
            return out.verified(op.name(), [self, rhs], Tol::Elementwise, move |t| {
                t[0].binary(op, t[1])
            });
        }
        if let Some(out) = Tensor::promoted(op.name(), &[self, rhs], |t| t[0].binary(op, t[1]))? {
            return Ok(out);
        }
        let n = self.device().check_output(op.name(), &bc.shape)?;
        // Past MAX_RANK axes, operands no repeat describes are materialised at the output's
        // shape first.
        let expanded = |t: &Tensor, expand: bool| -> Result<Option<Tensor>> {
            expand
                .then(|| t.broadcast_to(&bc.shape)?.contiguous())
                .transpose()
        };
        let (ea, eb) = (expanded(self, bc.expand_a)?, expanded(rhs, bc.expand_b)?);
        let (lhs, rhs_in) = (ea.as_ref().unwrap_or(self), eb.as_ref().unwrap_or(rhs));
        let spec = BinarySpec {
            op,
            n,
            a_len: bc.a_len,
            b_len: bc.b_len,
        };
        let storage = self
            .device()
            .op(&spec)
            .binary(lhs.storage(), rhs_in.storage(), spec)?;
        let out = self.with_storage(storage, bc.shape);
        out.verified(op.name(), [self, rhs], Tol::Elementwise, move |t| {
            t[0].binary(op, t[1])
        })
    }

    /// `x < 0 ? 0 : x`.
    pub fn relu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Relu)
    }
    /// `x < 0 ? alpha x : x`.
    pub fn leaky_relu(&self, alpha: f32) -> Result<Tensor> {
        self.unary(UnaryOp::LeakyRelu(alpha))
    }
    /// `x > 0 ? x : alpha (exp(x) - 1)`.
    pub fn elu(&self, alpha: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Elu(alpha))
    }
    /// The logistic function.
    pub fn sigmoid(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sigmoid)
    }
    /// Hyperbolic tangent.
    pub fn tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Tanh)
    }
    /// `x sigmoid(x)`.
    pub fn silu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }
    /// Another name for [`Tensor::silu`].
    pub fn swish(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Silu)
    }
    /// Exact (erf) GELU.
    pub fn gelu(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Gelu)
    }
    /// GELU, tanh approximation.
    pub fn gelu_tanh(&self) -> Result<Tensor> {
        self.unary(UnaryOp::GeluTanh)
    }
    /// Clamps into `[min, max]`; NaN stays NaN. `min > max` or a NaN bound is an error.
    pub fn clip(&self, min: f32, max: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Clip { min, max })
    }
    /// Multiplies by a constant.
    pub fn scale(&self, s: f32) -> Result<Tensor> {
        self.unary(UnaryOp::Scale(s))
    }
    /// `e^x`.
    pub fn exp(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Exp)
    }
    /// Natural logarithm.
    pub fn log(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Log)
    }
    /// Square root.
    pub fn sqrt(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Sqrt)
    }
    /// Negation.
    pub fn neg(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Neg)
    }
    /// Absolute value.
    pub fn abs(&self) -> Result<Tensor> {
        self.unary(UnaryOp::Abs)
    }
    /// `self + rhs`, with NumPy broadcasting.
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Add, rhs)
    }
    /// `self - rhs`, with NumPy broadcasting.
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Sub, rhs)
    }
    /// `self * rhs`, with NumPy broadcasting.
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Mul, rhs)
    }
    /// `self / rhs`, with NumPy broadcasting.
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(BinaryOp::Div, rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rules() {
        let b = broadcast("add", &[2, 3], &[3]).unwrap();
        assert_eq!((b.shape, b.a_len, b.b_len), (vec![2, 3], 6, 3));
        let b = broadcast("add", &[1], &[4, 5]).unwrap();
        assert_eq!((b.shape, b.a_len, b.b_len), (vec![4, 5], 1, 20));
        let b = broadcast("add", &[1, 5], &[4, 5]).unwrap();
        assert_eq!((b.shape, b.a_len, b.b_len), (vec![4, 5], 5, 20));
        assert!(broadcast("add", &[2, 3], &[2]).is_err());
        assert!(broadcast("add", &[2, 3], &[3, 2]).is_err());
        assert!(broadcast("add", &[3], &[2, 1, 3]).is_ok());
        // NumPy's general cases: tails repeat, anything else is expanded.
        let b = broadcast("add", &[3, 12, 4], &[12, 4]).unwrap();
        assert_eq!(
            (b.a_len, b.b_len, b.expand_a, b.expand_b),
            (144, 48, false, false)
        );
        let b = broadcast("div", &[3, 4], &[3, 1]).unwrap();
        assert_eq!(
            (b.shape.clone(), b.expand_a, b.expand_b),
            (vec![3, 4], false, true)
        );
        assert_eq!(b.b_len, 12);
        let b = broadcast("mul", &[2, 1, 3], &[4, 1]).unwrap();
        assert_eq!(
            (b.shape.clone(), b.expand_a, b.expand_b),
            (vec![2, 4, 3], true, true)
        );
        let b = broadcast("add", &[0, 1], &[1, 5]).unwrap();
        assert_eq!((b.shape.clone(), b.a_len), (vec![0, 5], 0));
        assert!(broadcast("add", &[0], &[2]).is_err());
        let e = broadcast("sub", &[2, 3], &[4]).unwrap_err();
        assert!(
            e.to_string().contains("[2, 3]") && e.to_string().contains("[4]"),
            "{e}"
        );
    }

    #[test]
    fn erf_matches_known_values() {
        for (x, want) in [
            (0.0f32, 0.0f32),
            (0.5, 0.520_499_9),
            (1.0, 0.842_700_8),
            (-2.0, -0.995_322_3),
            (4.0, 1.0),
        ] {
            assert!(
                (erf(x) - want).abs() < 2e-7,
                "erf({x}) = {} want {want}",
                erf(x)
            );
        }
        assert!(erf(f32::NAN).is_nan());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(f32::NEG_INFINITY), -1.0);
    }
}

/// One unary op over `n` elements.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UnarySpec {
    pub op: UnaryOp,
    pub n: usize,
}

impl OpSpec for UnarySpec {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 2)
    }
}

/// One broadcasting binary op: `out[i] = op(a[i % a_len], b[i % b_len])` for `i < n` (`a_len`
/// is `n` for a full operand, the row length for a row, 1 for a scalar).
#[derive(Debug, Clone, Copy)]
pub(crate) struct BinarySpec {
    pub op: BinaryOp,
    pub n: usize,
    pub a_len: usize,
    pub b_len: usize,
}

impl OpSpec for BinarySpec {
    fn name(&self) -> &'static str {
        self.op.name()
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 3)
    }
}

/// `where(cond, a, b)` over `n` elements: operand `j` is read at `i % lens[j]` (cond, a, b).
#[derive(Debug, Clone, Copy)]
pub(crate) struct WhereSpec {
    pub n: usize,
    pub lens: [usize; 3],
}

impl OpSpec for WhereSpec {
    fn name(&self) -> &'static str {
        "where"
    }

    fn work(&self) -> Work {
        Work::elements(self.n, 4)
    }
}
