//! Any tensor op in a batch: [`Batch::apply`] and the ops recorded through it.

use std::ops::Range;
use std::rc::Rc;

use super::{Batch, Op, Value};
use crate::backend::Storage;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::quant::{QuantMatmulOptions, QuantTensor};
use crate::ops::{AttentionOptions, Conv2dOptions, Pool2dOptions, RopeLayout};
use crate::tensor::Tensor;

/// The function of an `apply` node.
type ApplyFn = Rc<dyn Fn(&[&Tensor]) -> Result<Tensor>>;

/// A recorded tensor op: its name, inputs and function.
#[derive(Clone)]
pub(crate) struct Apply {
    pub(crate) name: &'static str,
    pub(crate) inputs: Vec<Value>,
    pub(crate) f: ApplyFn,
}

impl std::fmt::Debug for Apply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Apply({}, {:?})", self.name, self.inputs)
    }
}

impl Batch {
    /// Records any tensor op: `f` receives the tensors of `inputs` and returns one tensor
    /// computed from them. It runs once now on shape-only tensors, so a mistake is the op's
    /// own error at this call, and again on the data each time the batch runs.
    ///
    /// ```no_run
    /// # fn main() -> gpukit::Result<()> {
    /// let device = gpukit::Device::new_blocking()?;
    /// let mut batch = device.batch();
    /// let x = batch.upload(&[1.0; 12], &[3, 4])?;
    /// let y = batch.apply("permute", &[x], |t| t[0].permute(&[1, 0]))?;
    /// # Ok(()) }
    /// ```
    pub fn apply(
        &mut self,
        name: &'static str,
        inputs: &[Value],
        f: impl Fn(&[&Tensor]) -> Result<Tensor> + 'static,
    ) -> Result<Value> {
        let metas = inputs
            .iter()
            .map(|&v| {
                let node = self.node(v, name)?;
                Ok(Tensor::new_typed(
                    self.meta.clone(),
                    Storage::Meta,
                    node.shape.clone(),
                    node.dtype,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = metas.iter().collect();
        let out = f(&refs)?;
        if !out.device().same(&self.meta) {
            return Err(Error::InvalidArgument {
                op: name,
                reason: "the function must compute its result from its inputs (bring other \
                         tensors in with `batch.tensor`)"
                    .into(),
            });
        }
        self.push_apply(name, inputs, out.shape().to_vec(), out.dtype(), Rc::new(f))
    }

    pub(super) fn push_apply(
        &mut self,
        name: &'static str,
        inputs: &[Value],
        shape: Vec<usize>,
        dtype: DType,
        f: ApplyFn,
    ) -> Result<Value> {
        let op = Op::Apply(Apply {
            name,
            inputs: inputs.to_vec(),
            f,
        });
        self.push_typed(op, shape, None, dtype)
    }

    /// conv2d (see [`Tensor::conv2d`]).
    pub fn conv2d(
        &mut self,
        x: Value,
        weight: Value,
        bias: Option<Value>,
        opts: Conv2dOptions,
    ) -> Result<Value> {
        match bias {
            Some(b) => self.apply("conv2d", &[x, weight, b], move |t| {
                t[0].conv2d(t[1], Some(t[2]), opts)
            }),
            None => self.apply("conv2d", &[x, weight], move |t| {
                t[0].conv2d(t[1], None, opts)
            }),
        }
    }

    /// max_pool2d (see [`Tensor::max_pool2d`]).
    pub fn max_pool2d(&mut self, x: Value, opts: Pool2dOptions) -> Result<Value> {
        self.apply("max_pool2d", &[x], move |t| t[0].max_pool2d(opts))
    }

    /// avg_pool2d (see [`Tensor::avg_pool2d`]).
    pub fn avg_pool2d(&mut self, x: Value, opts: Pool2dOptions) -> Result<Value> {
        self.apply("avg_pool2d", &[x], move |t| t[0].avg_pool2d(opts))
    }

    /// Fused attention (see [`Tensor::attention`]); `key_lengths` as in [`AttentionOptions`].
    pub fn attention(
        &mut self,
        q: Value,
        k: Value,
        v: Value,
        causal: bool,
        key_lengths: Option<Vec<u32>>,
        scale: Option<f32>,
    ) -> Result<Value> {
        self.apply("attention", &[q, k, v], move |t| {
            let options = AttentionOptions {
                causal,
                key_lengths: key_lengths.as_deref(),
                lengths: None,
                scale,
                ..Default::default()
            };
            t[0].attention(t[1], t[2], options)
        })
    }

    /// Fused attention with the key lengths as a u32 value of the batch (an upload that a
    /// [`Graph`](super::Graph) replaces at each run; see [`AttentionOptions::lengths`]).
    pub fn attention_lengths(
        &mut self,
        [q, k, v]: [Value; 3],
        lengths: Value,
        causal: bool,
        scale: Option<f32>,
    ) -> Result<Value> {
        self.apply("attention", &[q, k, v, lengths], move |t| {
            let options = AttentionOptions {
                causal,
                key_lengths: None,
                lengths: Some(t[3]),
                scale,
                ..Default::default()
            };
            t[0].attention(t[1], t[2], options)
        })
    }

    /// Rows of an embedding table (see [`Tensor::embedding`]).
    pub fn embedding(&mut self, table: Value, ids: &[u32]) -> Result<Value> {
        let ids = ids.to_vec();
        self.apply("embedding", &[table], move |t| t[0].embedding(&ids))
    }

    /// Rows of an embedding table picked by a u32 value of the batch (see
    /// [`Tensor::embedding_ids`]): with ids uploaded by [`Batch::upload_of`], a
    /// [`Graph`](super::Graph) takes new ids at each run.
    pub fn embedding_ids(&mut self, table: Value, ids: Value) -> Result<Value> {
        self.apply("embedding", &[table, ids], |t| t[0].embedding_ids(t[1]))
    }

    /// The value converted to `dtype` (see [`Tensor::cast`]).
    pub fn cast(&mut self, x: Value, dtype: DType) -> Result<Value> {
        self.apply("cast", &[x], move |t| t[0].cast(dtype))
    }

    /// RoPE (see [`Tensor::rope`]).
    pub fn rope(&mut self, x: Value, cos: Value, sin: Value, layout: RopeLayout) -> Result<Value> {
        self.apply("rope", &[x, cos, sin], move |t| {
            t[0].rope(t[1], t[2], layout)
        })
    }

    /// argmax along the last axis (see [`Tensor::argmax_last`]).
    pub fn argmax_last(&mut self, x: Value) -> Result<Value> {
        self.apply("argmax_last", &[x], |t| t[0].argmax_last())
    }

    /// Reorders the axes (see [`Tensor::permute`]).
    pub fn permute(&mut self, x: Value, axes: &[usize]) -> Result<Value> {
        let axes = axes.to_vec();
        self.apply("permute", &[x], move |t| t[0].permute(&axes))
    }

    /// A range along one axis (see [`Tensor::slice`]).
    pub fn slice(&mut self, x: Value, axis: usize, range: Range<usize>) -> Result<Value> {
        self.apply("slice", &[x], move |t| t[0].slice(axis, range.clone()))
    }

    /// Joins along one axis (see [`Tensor::concat`]).
    pub fn concat(&mut self, parts: &[Value], axis: usize) -> Result<Value> {
        self.apply("concat", parts, move |t| Tensor::concat(t, axis))
    }

    /// `x x w^T` with a quantized weight on the batch's device (see
    /// [`Tensor::matmul_quant`]).
    pub fn matmul_quant(&mut self, x: Value, w: Rc<QuantTensor>) -> Result<Value> {
        self.matmul_quant_by(x, w)
    }

    /// [`Batch::matmul_quant`] with the weight behind any owning pointer (an `Arc` shared
    /// with a model).
    pub(crate) fn matmul_quant_by<W>(&mut self, x: Value, w: W) -> Result<Value>
    where
        W: std::ops::Deref<Target = QuantTensor> + 'static,
    {
        let shape = self.matmul_quant_shape(x, &w, "matmul_quant")?;
        let f: super::apply::ApplyFn = Rc::new(move |t: &[&Tensor]| t[0].matmul_quant(&w));
        self.push_apply("matmul_quant", &[x], shape, DType::F32, f)
    }

    /// SwiGLU over the halves of the last axis (see [`Tensor::swiglu`]).
    pub fn swiglu(&mut self, x: Value) -> Result<Value> {
        let mut shape = self.shape_of(x, "swiglu")?;
        match shape.last_mut() {
            Some(last) if *last % 2 == 0 => *last /= 2,
            _ => {
                return Err(Error::shape(
                    "swiglu",
                    &shape,
                    &[2],
                    "(the last axis holds two halves, so its length must be even)",
                ))
            }
        }
        let f: super::apply::ApplyFn = Rc::new(|t: &[&Tensor]| t[0].swiglu());
        self.push_apply("swiglu", &[x], shape, DType::F32, f)
    }

    /// `residual + x x w^T` in one kernel (see [`Tensor::matmul_quant_add`]).
    pub fn matmul_quant_add(
        &mut self,
        x: Value,
        w: Rc<QuantTensor>,
        residual: Value,
    ) -> Result<Value> {
        let options = QuantMatmulOptions {
            residual: Some(residual),
            ..Default::default()
        };
        self.matmul_quant_with_by(x, w, options)
    }

    /// `residual + rope(rms_norm(x, norm_weight, eps) x w^T)` (or `swiglu(x) x w^T`), each
    /// part optional, in one kernel, in the options' precision: [`Tensor::matmul_quant_with`]
    /// with the options' operands as values of this batch.
    pub fn matmul_quant_with(
        &mut self,
        x: Value,
        w: Rc<QuantTensor>,
        options: QuantMatmulOptions<Value>,
    ) -> Result<Value> {
        self.matmul_quant_with_by(x, w, options)
    }

    /// [`Batch::matmul_quant_with`] with the weight behind any owning pointer.
    pub(crate) fn matmul_quant_with_by<W>(
        &mut self,
        x: Value,
        w: W,
        options: QuantMatmulOptions<Value>,
    ) -> Result<Value>
    where
        W: std::ops::Deref<Target = QuantTensor> + 'static,
    {
        self.quant_product(x, w, options, None)
    }

    /// [`Batch::matmul_quant_with_by`] of one row that also writes the product's columns
    /// `from..` into the preallocated cache `cache` as its row `at` (see
    /// [`Tensor::matmul_quant_caching`]). Recorded after earlier readers of the cache and
    /// before later ones, as batches keep their order.
    #[cfg(feature = "models")]
    pub(crate) fn matmul_quant_cached_by<W>(
        &mut self,
        x: Value,
        w: W,
        options: QuantMatmulOptions<Value>,
        (cache, at): (Value, Value),
        from: usize,
    ) -> Result<Value>
    where
        W: std::ops::Deref<Target = QuantTensor> + 'static,
    {
        self.quant_product(x, w, options, Some((cache, at, from)))
    }

    fn quant_product<W>(
        &mut self,
        x: Value,
        w: W,
        options: QuantMatmulOptions<Value>,
        cache: Option<(Value, Value, usize)>,
    ) -> Result<Value>
    where
        W: std::ops::Deref<Target = QuantTensor> + 'static,
    {
        let op = "matmul_quant_with";
        let QuantMatmulOptions {
            rms_norm,
            residual,
            swiglu,
            rope,
            precision,
        } = options;
        let mut shape = self.shape_of(x, op)?;
        match shape.last_mut() {
            // The halves of a SwiGLU input are the weight's cols each.
            Some(k) if swiglu && *k % 2 == 0 => *k /= 2,
            _ => {}
        }
        let shape = self.matmul_quant_shape_of(shape, &w, op)?;
        if let Some(r) = residual {
            let got = self.shape_of(r, op)?;
            if got != shape {
                return Err(Error::shape(
                    op,
                    &got,
                    &shape,
                    "(the residual has the product's shape)",
                ));
            }
        }
        let mut inputs = vec![x];
        inputs.extend(residual);
        inputs.extend(rms_norm.map(|n| n.0));
        inputs.extend(rope.into_iter().flat_map(|r| [r.0, r.1]));
        inputs.extend(cache.into_iter().flat_map(|c| [c.0, c.1]));
        let (has_r, eps) = (residual.is_some(), rms_norm.map(|n| n.1));
        let layout = rope.map(|r| r.2);
        // The cache's operands follow the rope tables (models only: the core package leaves
        // the cached product out).
        #[cfg(feature = "models")]
        let (has_rope, from) = (usize::from(layout.is_some()), cache.map(|c| c.2));
        let f: super::apply::ApplyFn = Rc::new(move |t: &[&Tensor]| {
            // The inputs in order: x, then each present part.
            let at = 1 + usize::from(has_r) + usize::from(eps.is_some());
            let options = QuantMatmulOptions {
                residual: has_r.then(|| t[1]),
                rms_norm: eps.map(|e| (t[1 + usize::from(has_r)], e)),
                swiglu,
                rope: layout.map(|l| (t[at], t[at + 1], l)),
                precision,
            };
            #[cfg(feature = "models")]
            if let Some(from) = from {
                let c = at + 2 * has_rope;
                return t[0].matmul_quant_caching(&w, options, (t[c], t[c + 1]), from);
            }
            t[0].matmul_quant_with(&w, options)
        });
        self.push_apply(op, &inputs, shape, DType::F32, f)
    }

    /// The shape of `x x w^T`. The weight is real data, so the shape rule is checked here
    /// rather than on a shape-only tensor.
    fn matmul_quant_shape(
        &self,
        x: Value,
        w: &QuantTensor,
        op: &'static str,
    ) -> Result<Vec<usize>> {
        let shape = self.shape_of(x, op)?;
        self.matmul_quant_shape_of(shape, w, op)
    }

    fn matmul_quant_shape_of(
        &self,
        mut shape: Vec<usize>,
        w: &QuantTensor,
        op: &'static str,
    ) -> Result<Vec<usize>> {
        if !w.device.same(&self.device) {
            return Err(Error::DeviceMismatch { op });
        }
        match shape.last_mut() {
            Some(k) if *k == w.cols => *k = w.rows,
            _ => {
                return Err(Error::shape(
                    op,
                    &shape,
                    &w.shape(),
                    "(the last axis must equal the weight's cols)",
                ))
            }
        }
        Ok(shape)
    }

    /// Rows `ids` of a quantized table on the batch's device, dequantised (see
    /// [`QuantTensor::embedding_ids`]): a compiled graph takes new ids.
    pub fn embedding_quant(&mut self, ids: Value, w: Rc<QuantTensor>) -> Result<Value> {
        self.embedding_quant_by(ids, w)
    }

    /// [`Batch::embedding_quant`] with the table behind any owning pointer.
    pub(crate) fn embedding_quant_by<W>(&mut self, ids: Value, w: W) -> Result<Value>
    where
        W: std::ops::Deref<Target = QuantTensor> + 'static,
    {
        if !w.device.same(&self.device) {
            return Err(Error::DeviceMismatch { op: "embedding" });
        }
        let dtype = self.dtype(ids)?;
        if !matches!(dtype, DType::U32 | DType::I32) {
            return Err(crate::dtype::unsupported(
                "embedding",
                dtype,
                "u32 or i32 ids",
            ));
        }
        let mut shape = self.shape_of(ids, "embedding")?;
        shape.push(w.cols);
        let f: super::apply::ApplyFn = Rc::new(move |t: &[&Tensor]| w.embedding_ids(t[0]));
        self.push_apply("embedding", &[ids], shape, DType::F32, f)
    }
}
