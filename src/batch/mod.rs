//! The batch API: record uploads and ops, then run them all with one submission and one read
//! back; or compile them into a [`Graph`] that runs again with new inputs.
//!
//! ```no_run
//! # async fn demo() -> gpukit::Result<()> {
//! let device = gpukit::Device::new().await?;
//! let mut batch = device.batch();
//! let x = batch.upload(&[1.0, -2.0, 3.0, -4.0], &[4])?;
//! let y = batch.relu(x)?;
//! let y = batch.scale(y, 2.0)?;
//! let z = batch.add(y, y)?;
//! let z = batch.sigmoid(z)?;
//! batch.output(z)?;
//! let result = batch.run().await?; // one fused kernel, one submit, one read back
//! println!("{:?} (peak {} bytes)", result.get(z)?, result.peak_bytes);
//! # Ok(()) }
//! ```
//!
//! Shapes are checked when an op is recorded, so a mistake is reported by the call that made
//! it. At run time:
//! - **Fusion.** A chain of elementwise ops (unary ops, scale, clip, binary ops with
//!   broadcasting) whose intermediate results nothing else reads becomes one generated kernel
//!   over up to four inputs: one pass over memory. A bias add and a relu/gelu/silu after a
//!   matmul move into the matmul's epilogue.
//! - **Memory planner.** A value's buffer returns to the batch once its last reader is
//!   encoded, and later ops of the batch reuse it; [`BatchResult::peak_bytes`] reports the
//!   footprint.
//! - **One submission.** Everything is encoded into one command encoder and every output is
//!   copied into one staging buffer, mapped once.
//!
//! [`Batch::compile`] captures the encoded dispatches: [`Graph::run`] writes new input data
//! and encodes the same pipelines and bind groups again, with no shape checks, no planning, no
//! bind group or pipeline creation (like a CUDA graph). On the CPU backend a graph re-runs its
//! plan.
//!
//! Every op can be recorded. Elementwise ops, matmul/linear, softmax, reductions, dot, norms,
//! reshape and transpose have their own nodes (they take part in fusion); conv2d, pooling,
//! attention, embedding, rope, argmax, permute, slice, concat and the quantized matmul are
//! recorded through [`Batch::apply`], which takes any tensor op: it runs the op on shape-only
//! tensors when it is recorded (so the op's own checks report mistakes at the call) and on the
//! real data when the batch runs.

use std::sync::atomic::{AtomicU64, Ordering};

mod apply;
mod graph;
mod plan;

use graph::Output;
pub use graph::{BatchResult, Graph};

use crate::device::Device;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::ops::matmul::dims;
use crate::ops::{Activation, BinaryOp, Precision, ReduceOp, UnaryOp};
use crate::shape::broadcast;
use crate::tensor::Tensor;

/// A value recorded in a batch: a handle, valid only in the batch that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Value {
    batch: u64,
    index: usize,
}

impl Value {
    /// Its place in the batch's record (the number the JS API hands out).
    #[cfg_attr(native, allow(dead_code))]
    pub(crate) fn index(self) -> usize {
        self.index
    }
}

/// How a recorded matmul reads its operands and what it fuses after the product.
#[derive(Debug, Clone, Copy, Default)]
pub struct BatchMatmul {
    /// A is stored as `[.., k, m]`.
    pub transpose_a: bool,
    /// B is stored as `[.., n, k]`.
    pub transpose_b: bool,
    /// A row of `n` values added to every output row.
    pub bias: Option<Value>,
    /// Applied after the bias.
    pub activation: Option<Activation>,
    /// See [`Precision`].
    pub precision: Precision,
}

#[derive(Debug, Clone)]
enum Op {
    /// Data uploaded at record time and replaceable in a graph.
    Input,
    /// A device tensor the batch reads.
    Tensor,
    Unary(UnaryOp, Value),
    Binary(BinaryOp, Value, Value),
    Matmul(Value, Value, BatchMatmul),
    Softmax {
        x: Value,
        log: bool,
    },
    Reduce {
        op: ReduceOp,
        x: Value,
        last: bool,
    },
    Dot(Value, Value),
    Norm {
        x: Value,
        weight: Option<Value>,
        bias: Option<Value>,
        eps: f32,
        rms: bool,
    },
    Reshape(Value),
    /// Any tensor op, run through the tensor API (see [`Batch::apply`]).
    Apply(apply::Apply),
    Transpose(Value, usize, usize),
}

impl Op {
    fn inputs(&self) -> Vec<Value> {
        match self {
            Op::Input | Op::Tensor => vec![],
            Op::Unary(_, x)
            | Op::Softmax { x, .. }
            | Op::Reduce { x, .. }
            | Op::Reshape(x)
            | Op::Transpose(x, ..) => vec![*x],
            Op::Apply(a) => a.inputs.clone(),
            Op::Binary(_, a, b) | Op::Dot(a, b) => vec![*a, *b],
            Op::Matmul(a, b, o) => [Some(*a), Some(*b), o.bias].into_iter().flatten().collect(),
            Op::Norm {
                x, weight, bias, ..
            } => [Some(*x), *weight, *bias].into_iter().flatten().collect(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Op::Input => "upload",
            Op::Tensor => "tensor",
            Op::Unary(..) => "unary",
            Op::Binary(..) => "binary",
            Op::Matmul(..) => "matmul",
            Op::Softmax { .. } => "softmax",
            Op::Reduce { .. } => "reduce",
            Op::Dot(..) => "dot",
            Op::Norm { .. } => "norm",
            Op::Reshape(_) => "reshape",
            Op::Transpose(..) => "transpose",
            Op::Apply(a) => a.name,
        }
    }
}

#[derive(Debug, Clone)]
struct Node {
    op: Op,
    shape: Vec<usize>,
    dtype: DType,
    /// Inputs and tensors: the data (kept for the whole batch).
    tensor: Option<Tensor>,
}

impl Node {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// Recorded uploads and ops; see the module docs.
#[derive(Clone)]
pub struct Batch {
    device: Device,
    /// A shape-only device: `apply` runs each op on it when recorded, so the op's own checks
    /// report mistakes at the call.
    meta: Device,
    id: u64,
    nodes: Vec<Node>,
    outputs: Vec<Value>,
}

static NEXT_BATCH: AtomicU64 = AtomicU64::new(1);

impl Device {
    /// An empty batch on this device.
    pub fn batch(&self) -> Batch {
        Batch {
            device: self.clone(),
            meta: Device::meta(),
            id: NEXT_BATCH.fetch_add(1, Ordering::Relaxed),
            nodes: Vec::new(),
            outputs: Vec::new(),
        }
    }
}

impl Batch {
    /// The value recorded `index`-th in this batch (the JS API hands values out as numbers).
    #[cfg_attr(native, allow(dead_code))]
    pub(crate) fn value(&self, index: usize) -> Result<Value> {
        if index < self.nodes.len() {
            Ok(Value {
                batch: self.id,
                index,
            })
        } else {
            Err(Error::InvalidArgument {
                op: "batch",
                reason: format!(
                    "value {index} is not one of this batch's {} values",
                    self.nodes.len()
                ),
            })
        }
    }

    fn node(&self, v: Value, op: &'static str) -> Result<&Node> {
        if v.batch != self.id {
            return Err(Error::InvalidArgument {
                op,
                reason: "the value belongs to another batch".into(),
            });
        }
        self.nodes.get(v.index).ok_or(Error::InvalidArgument {
            op,
            reason: "unknown value".into(),
        })
    }

    fn shape_of(&self, v: Value, op: &'static str) -> Result<Vec<usize>> {
        Ok(self.node(v, op)?.shape.clone())
    }

    /// The dtype of a value.
    pub fn dtype(&self, v: Value) -> Result<DType> {
        Ok(self.node(v, "dtype")?.dtype)
    }

    /// Records a node: an upload or tensor in its own dtype, a reshape or transpose in its
    /// input's, any other op in f32 (its inputs must be f32: ops on other dtypes are recorded
    /// through [`Batch::apply`], [`Batch::cast`] included).
    fn push(&mut self, op: Op, shape: Vec<usize>, tensor: Option<Tensor>) -> Result<Value> {
        let dtype = match (&op, &tensor) {
            (_, Some(t)) => t.dtype(),
            (Op::Reshape(x) | Op::Transpose(x, ..), None) => self.node(*x, op.name())?.dtype,
            _ => {
                for v in op.inputs() {
                    let d = self.node(v, op.name())?.dtype;
                    if d != DType::F32 {
                        return Err(Error::InvalidArgument {
                            op: op.name(),
                            reason: format!(
                                "this batch op takes f32 values, not {d} (record `batch.cast` \
                                 first, or the op through `batch.apply`)"
                            ),
                        });
                    }
                }
                DType::F32
            }
        };
        self.push_typed(op, shape, tensor, dtype)
    }

    /// Records a node of `dtype`. A value the batch computes must be able to exist on the
    /// device: its shape is checked as an op's output is (see `Device::check_output`).
    fn push_typed(
        &mut self,
        op: Op,
        shape: Vec<usize>,
        tensor: Option<Tensor>,
        dtype: DType,
    ) -> Result<Value> {
        if tensor.is_none() {
            self.device.check_output_of(op.name(), &shape, dtype)?;
        }
        self.nodes.push(Node {
            op,
            shape,
            dtype,
            tensor,
        });
        Ok(Value {
            batch: self.id,
            index: self.nodes.len() - 1,
        })
    }

    /// The shape of a value.
    pub fn shape(&self, v: Value) -> Result<&[usize]> {
        Ok(&self.node(v, "shape")?.shape)
    }

    /// Host data to upload; in a [`Graph`] its data can be replaced at each run.
    pub fn upload(&mut self, data: &[f32], shape: &[usize]) -> Result<Value> {
        let t = self.device.tensor(data, shape)?;
        self.push(Op::Input, shape.to_vec(), Some(t))
    }

    /// Little-endian bytes of `dtype` (any alignment) to upload in that dtype, as
    /// [`Device::tensor_from_bytes`] reads them; in a [`Graph`]
    /// [`Graph::set_input_bytes`] replaces them at each run.
    pub fn upload_bytes(&mut self, bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Value> {
        let t = self.device.tensor_from_bytes(bytes, dtype, shape)?;
        self.push(Op::Input, shape.to_vec(), Some(t))
    }

    /// Host data of any [`Element`] type (u32 token ids, f16 values) to upload in its dtype;
    /// in a [`Graph`] [`Graph::set_input`] replaces it at each run.
    pub fn upload_of<T: Element>(&mut self, data: &[T], shape: &[usize]) -> Result<Value> {
        let t = self.device.tensor_of(data, shape)?;
        self.push(Op::Input, shape.to_vec(), Some(t))
    }

    /// A device tensor (of this batch's device) for the batch to read.
    pub fn tensor(&mut self, t: &Tensor) -> Result<Value> {
        if !t.device().same(&self.device) {
            return Err(Error::DeviceMismatch { op: "batch tensor" });
        }
        // Fused kernels read a tensor's storage as row-major data: a view is copied out.
        let t = t.contiguous()?;
        self.push(Op::Tensor, t.shape().to_vec(), Some(t))
    }

    /// Marks a value to be read back by `run`.
    pub fn output(&mut self, v: Value) -> Result<()> {
        self.node(v, "output")?;
        if !self.outputs.contains(&v) {
            self.outputs.push(v);
        }
        Ok(())
    }

    /// `op(x)` elementwise.
    pub fn unary(&mut self, op: UnaryOp, x: Value) -> Result<Value> {
        op.validate()?;
        let shape = self.shape_of(x, op.name())?;
        self.push(Op::Unary(op, x), shape, None)
    }

    /// `op(a, b)` elementwise, with NumPy broadcasting. An operand that no repeat describes
    /// (`[3, 1]` against `[3, 384]`) is expanded by a recorded `broadcast_to` first, so fused
    /// kernels read every input by repetition.
    pub fn binary(&mut self, op: BinaryOp, a: Value, b: Value) -> Result<Value> {
        let (sa, sb) = (self.shape_of(a, op.name())?, self.shape_of(b, op.name())?);
        let bc = broadcast(op.name(), &sa, &sb)?;
        // The shapes are known to broadcast, so the node is recorded without a trial run.
        let mut expand = |v: Value, yes: bool| -> Result<Value> {
            if !yes {
                return Ok(v);
            }
            let shape = bc.shape.clone();
            let f = std::rc::Rc::new(move |t: &[&Tensor]| t[0].broadcast_to(&shape));
            self.push_apply("broadcast_to", &[v], bc.shape.clone(), DType::F32, f)
        };
        let (a, b) = (expand(a, bc.expand_a)?, expand(b, bc.expand_b)?);
        self.push(Op::Binary(op, a, b), bc.shape, None)
    }

    /// relu.
    pub fn relu(&mut self, x: Value) -> Result<Value> {
        self.unary(UnaryOp::Relu, x)
    }
    /// sigmoid.
    pub fn sigmoid(&mut self, x: Value) -> Result<Value> {
        self.unary(UnaryOp::Sigmoid, x)
    }
    /// tanh.
    pub fn tanh(&mut self, x: Value) -> Result<Value> {
        self.unary(UnaryOp::Tanh, x)
    }
    /// gelu (erf).
    pub fn gelu(&mut self, x: Value) -> Result<Value> {
        self.unary(UnaryOp::Gelu, x)
    }
    /// silu (swish).
    pub fn silu(&mut self, x: Value) -> Result<Value> {
        self.unary(UnaryOp::Silu, x)
    }
    /// `x * s`.
    pub fn scale(&mut self, x: Value, s: f32) -> Result<Value> {
        self.unary(UnaryOp::Scale(s), x)
    }
    /// Clamps to `[min, max]`.
    pub fn clip(&mut self, x: Value, min: f32, max: f32) -> Result<Value> {
        self.unary(UnaryOp::Clip { min, max }, x)
    }
    /// `a + b`.
    pub fn add(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(BinaryOp::Add, a, b)
    }
    /// `a - b`.
    pub fn sub(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(BinaryOp::Sub, a, b)
    }
    /// `a * b`.
    pub fn mul(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(BinaryOp::Mul, a, b)
    }
    /// `a / b`.
    pub fn div(&mut self, a: Value, b: Value) -> Result<Value> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `a x b`.
    pub fn matmul(&mut self, a: Value, b: Value) -> Result<Value> {
        self.matmul_with(a, b, BatchMatmul::default())
    }

    /// `act(op(a) x op(b) + bias)`, like [`Tensor::matmul_with`].
    pub fn matmul_with(&mut self, a: Value, b: Value, o: BatchMatmul) -> Result<Value> {
        let (sa, sb) = (self.shape_of(a, "matmul")?, self.shape_of(b, "matmul")?);
        let (d, shape) = dims(&sa, &sb, o.transpose_a, o.transpose_b)?;
        if let Some(bias) = o.bias {
            let sc = self.shape_of(bias, "matmul bias")?;
            if sc.iter().product::<usize>() != d.n {
                return Err(Error::shape(
                    "matmul bias",
                    &sc,
                    &[d.n],
                    "(the bias has one value per output column)",
                ));
            }
        }
        self.push(Op::Matmul(a, b, o), shape, None)
    }

    /// A linear layer, `act(x x weight^T + bias)` with `weight` stored `[out, in]`.
    pub fn linear(
        &mut self,
        x: Value,
        weight: Value,
        bias: Option<Value>,
        activation: Option<Activation>,
    ) -> Result<Value> {
        let o = BatchMatmul {
            transpose_b: true,
            bias,
            activation,
            ..BatchMatmul::default()
        };
        self.matmul_with(x, weight, o)
    }

    fn last_axis(&self, x: Value, op: &'static str) -> Result<Vec<usize>> {
        let shape = self.shape_of(x, op)?;
        if shape.is_empty() {
            return Err(Error::InvalidArgument {
                op,
                reason: "a tensor of shape [] has no last axis".into(),
            });
        }
        Ok(shape)
    }

    /// softmax along the last axis.
    pub fn softmax(&mut self, x: Value) -> Result<Value> {
        let shape = self.last_axis(x, "softmax")?;
        self.push(Op::Softmax { x, log: false }, shape, None)
    }

    /// log_softmax along the last axis.
    pub fn log_softmax(&mut self, x: Value) -> Result<Value> {
        let shape = self.last_axis(x, "log_softmax")?;
        self.push(Op::Softmax { x, log: true }, shape, None)
    }

    /// A reduction of every element, to shape `[]`.
    pub fn reduce(&mut self, op: ReduceOp, x: Value) -> Result<Value> {
        self.node(x, "reduce")?;
        self.push(Op::Reduce { op, x, last: false }, vec![], None)
    }

    /// A reduction along the last axis.
    pub fn reduce_last(&mut self, op: ReduceOp, x: Value) -> Result<Value> {
        let mut shape = self.last_axis(x, "reduce_last")?;
        shape.pop();
        self.push(Op::Reduce { op, x, last: true }, shape, None)
    }

    /// `sum(a * b)` of two tensors of equal length, to shape `[]`.
    pub fn dot(&mut self, a: Value, b: Value) -> Result<Value> {
        let (sa, sb) = (self.shape_of(a, "dot")?, self.shape_of(b, "dot")?);
        if sa.iter().product::<usize>() != sb.iter().product::<usize>() {
            return Err(Error::shape("dot", &sa, &sb, "(equal lengths)"));
        }
        self.push(Op::Dot(a, b), vec![], None)
    }

    fn norm(
        &mut self,
        x: Value,
        weight: Option<Value>,
        bias: Option<Value>,
        eps: f32,
        rms: bool,
    ) -> Result<Value> {
        let op = if rms { "rms_norm" } else { "layer_norm" };
        let shape = self.last_axis(x, op)?;
        let cols = shape[shape.len() - 1];
        for p in [weight, bias].into_iter().flatten() {
            let sp = self.shape_of(p, op)?;
            if sp.iter().product::<usize>() != cols {
                return Err(Error::shape(
                    op,
                    &shape,
                    &sp,
                    "(weight and bias have one value per column)",
                ));
            }
        }
        let node = Op::Norm {
            x,
            weight,
            bias,
            eps,
            rms,
        };
        self.push(node, shape, None)
    }

    /// layer_norm of each row, then `* weight + bias`.
    pub fn layer_norm(
        &mut self,
        x: Value,
        weight: Option<Value>,
        bias: Option<Value>,
        eps: f32,
    ) -> Result<Value> {
        self.norm(x, weight, bias, eps, false)
    }

    /// rms_norm of each row, then `* weight + bias`.
    pub fn rms_norm(
        &mut self,
        x: Value,
        weight: Option<Value>,
        bias: Option<Value>,
        eps: f32,
    ) -> Result<Value> {
        self.norm(x, weight, bias, eps, true)
    }

    /// The same data in another shape of the same length.
    pub fn reshape(&mut self, x: Value, shape: &[usize]) -> Result<Value> {
        let s = self.shape_of(x, "reshape")?;
        if crate::shape::numel("reshape", &s)? != crate::shape::numel("reshape", shape)? {
            return Err(Error::shape("reshape", &s, shape, "(equal element counts)"));
        }
        self.push(Op::Reshape(x), shape.to_vec(), None)
    }

    /// Swaps two axes.
    pub fn transpose(&mut self, x: Value, a: usize, b: usize) -> Result<Value> {
        let mut s = self.shape_of(x, "transpose")?;
        if a >= s.len() || b >= s.len() {
            return Err(Error::InvalidArgument {
                op: "transpose",
                reason: format!("axes {a} and {b} of a rank-{} tensor", s.len()),
            });
        }
        s.swap(a, b);
        self.push(Op::Transpose(x, a, b), s, None)
    }
}

pub(crate) fn missing() -> Error {
    Error::InvalidArgument {
        op: "batch",
        reason: "an output was not computed".into(),
    }
}
