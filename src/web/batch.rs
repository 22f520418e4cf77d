//! The batch API in JS. Values are plain numbers (their place in the batch), so they can be
//! passed around freely; a number that is not a value of this batch is an error.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Float32Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::options::{self, BatchMatmulOptions, BatchNormOptions};
use super::tensor::JsTensor;
use super::{js_error, usizes};
use crate::batch::{Batch, BatchMatmul, BatchResult, Graph, Value};
use crate::{BinaryOp, ReduceOp, UnaryOp};

type JsResult<T> = Result<T, JsError>;

/// Recorded uploads and ops, run in one GPU round trip by `run()`.
#[wasm_bindgen(js_name = Batch)]
pub struct JsBatch {
    inner: Batch,
}

impl JsBatch {
    pub(crate) fn new(inner: Batch) -> JsBatch {
        JsBatch { inner }
    }

    fn v(&self, index: usize) -> JsResult<Value> {
        self.inner.value(index).map_err(js_error)
    }

    pub(super) fn value_at(&self, index: usize) -> JsResult<Value> {
        self.v(index)
    }

    pub(super) fn inner_mut(&mut self) -> &mut Batch {
        &mut self.inner
    }

    fn opt(&self, index: Option<usize>) -> JsResult<Option<Value>> {
        index.map(|i| self.v(i)).transpose()
    }

    fn unary(&mut self, op: UnaryOp, x: usize) -> JsResult<usize> {
        let x = self.v(x)?;
        done(self.inner.unary(op, x))
    }

    fn binary(&mut self, op: BinaryOp, a: usize, b: usize) -> JsResult<usize> {
        let (a, b) = (self.v(a)?, self.v(b)?);
        done(self.inner.binary(op, a, b))
    }

    fn reduce(&mut self, op: ReduceOp, x: usize, last: bool) -> JsResult<usize> {
        let x = self.v(x)?;
        done(if last {
            self.inner.reduce_last(op, x)
        } else {
            self.inner.reduce(op, x)
        })
    }

    fn norm(&mut self, x: usize, options: &JsValue, rms: bool) -> JsResult<usize> {
        let o: BatchNormOptions = options::parse(options, "batch norm options")?;
        let (x, w, b) = (self.v(x)?, self.opt(o.weight)?, self.opt(o.bias)?);
        let eps = o.eps.unwrap_or(options::DEFAULT_EPS);
        done(if rms {
            self.inner.rms_norm(x, w, b, eps)
        } else {
            self.inner.layer_norm(x, w, b, eps)
        })
    }
}

fn done(r: crate::Result<Value>) -> JsResult<usize> {
    r.map(Value::index).map_err(js_error)
}

fn values(list: &JsValue, what: &str) -> JsResult<Vec<usize>> {
    usizes(list, what)
}

#[wasm_bindgen(js_class = Batch)]
impl JsBatch {
    /// Records an upload of `data` with this shape; returns its value.
    pub fn upload(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Float32Array")] data: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> JsResult<usize> {
        let data = super::f32_data(data, "upload data")?;
        let shape = usizes(&shape, "shape")?;
        done(self.inner.upload(&data, &shape))
    }

    /// Uses an existing tensor (no copy).
    pub fn tensor(&mut self, t: &JsTensor) -> JsResult<usize> {
        done(self.inner.tensor(t.get()?))
    }

    /// Marks a value to be read back by `run()`.
    pub fn output(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<()> {
        let x = super::index(x, "output: x")?;
        let x = self.v(x)?;
        self.inner.output(x).map_err(js_error)
    }

    /// The shape of a value.
    #[wasm_bindgen(unchecked_return_type = "number[]")]
    pub fn shape(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<Array> {
        let x = super::index(x, "shape: x")?;
        let shape = self.inner.shape(self.v(x)?).map_err(js_error)?;
        Ok(shape.iter().map(|&d| JsValue::from(d as f64)).collect())
    }

    pub fn relu(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "relu: x")?;
        self.unary(UnaryOp::Relu, x)
    }
    pub fn sigmoid(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "sigmoid: x")?;
        self.unary(UnaryOp::Sigmoid, x)
    }
    pub fn tanh(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "tanh: x")?;
        self.unary(UnaryOp::Tanh, x)
    }
    pub fn gelu(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "gelu: x")?;
        self.unary(UnaryOp::Gelu, x)
    }
    pub fn silu(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "silu: x")?;
        self.unary(UnaryOp::Silu, x)
    }
    pub fn exp(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "exp: x")?;
        self.unary(UnaryOp::Exp, x)
    }
    pub fn scale(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] s: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "scale: x")?;
        let s = super::number(s, "scale: s")?;
        self.unary(UnaryOp::Scale(s), x)
    }
    pub fn clip(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] min: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] max: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "clip: x")?;
        let min = super::bound(min, "clip: min")?;
        let max = super::bound(max, "clip: max")?;
        self.unary(UnaryOp::Clip { min, max }, x)
    }
    pub fn add(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "add: a")?;
        let b = super::index(b, "add: b")?;
        self.binary(BinaryOp::Add, a, b)
    }
    pub fn sub(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "sub: a")?;
        let b = super::index(b, "sub: b")?;
        self.binary(BinaryOp::Sub, a, b)
    }
    pub fn mul(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "mul: a")?;
        let b = super::index(b, "mul: b")?;
        self.binary(BinaryOp::Mul, a, b)
    }
    pub fn div(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "div: a")?;
        let b = super::index(b, "div: b")?;
        self.binary(BinaryOp::Div, a, b)
    }

    /// Matrix product; `bias` in the options is a value of this batch.
    pub fn matmul(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "BatchMatmulOptions")] options: JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "matmul: a")?;
        let b = super::index(b, "matmul: b")?;
        let o: BatchMatmulOptions = options::parse(&options, "batch matmul options")?;
        let m = BatchMatmul {
            transpose_a: o.transpose_a,
            transpose_b: o.transpose_b,
            bias: self.opt(o.bias)?,
            activation: o.activation.map(Into::into),
            precision: o.precision.into(),
        };
        let (a, b) = (self.v(a)?, self.v(b)?);
        done(self.inner.matmul_with(a, b, m))
    }

    pub fn softmax(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "softmax: x")?;
        let x = self.v(x)?;
        done(self.inner.softmax(x))
    }
    #[wasm_bindgen(js_name = logSoftmax)]
    pub fn log_softmax(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "log_softmax: x")?;
        let x = self.v(x)?;
        done(self.inner.log_softmax(x))
    }
    pub fn sum(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "sum: x")?;
        self.reduce(ReduceOp::Sum, x, false)
    }
    pub fn mean(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "mean: x")?;
        self.reduce(ReduceOp::Mean, x, false)
    }
    pub fn max(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "max: x")?;
        self.reduce(ReduceOp::Max, x, false)
    }
    pub fn min(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "min: x")?;
        self.reduce(ReduceOp::Min, x, false)
    }
    #[wasm_bindgen(js_name = sumLast)]
    pub fn sum_last(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "sum_last: x")?;
        self.reduce(ReduceOp::Sum, x, true)
    }
    #[wasm_bindgen(js_name = maxLast)]
    pub fn max_last(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "max_last: x")?;
        self.reduce(ReduceOp::Max, x, true)
    }
    pub fn dot(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let a = super::index(a, "dot: a")?;
        let b = super::index(b, "dot: b")?;
        let (a, b) = (self.v(a)?, self.v(b)?);
        done(self.inner.dot(a, b))
    }
    #[wasm_bindgen(js_name = layerNorm)]
    pub fn layer_norm(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "BatchNormOptions")] options: JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "layer_norm: x")?;
        self.norm(x, &options, false)
    }
    #[wasm_bindgen(js_name = rmsNorm)]
    pub fn rms_norm(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "BatchNormOptions")] options: JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "rms_norm: x")?;
        self.norm(x, &options, true)
    }
    pub fn reshape(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "reshape: x")?;
        let shape = usizes(&shape, "shape")?;
        let x = self.v(x)?;
        done(self.inner.reshape(x, &shape))
    }
    pub fn transpose(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "transpose: x")?;
        let a = super::index(a, "transpose: a")?;
        let b = super::index(b, "transpose: b")?;
        let x = self.v(x)?;
        done(self.inner.transpose(x, a, b))
    }
    pub fn permute(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] axes: JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "permute: x")?;
        let axes = usizes(&axes, "axes")?;
        let x = self.v(x)?;
        done(self.inner.permute(x, &axes))
    }
    pub fn slice(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] start: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] end: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "slice: x")?;
        let axis = super::index(axis, "slice: axis")?;
        let start = super::index(start, "slice: start")?;
        let end = super::index(end, "slice: end")?;
        let x = self.v(x)?;
        done(self.inner.slice(x, axis, start..end))
    }
    pub fn concat(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number[]")] parts: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
    ) -> JsResult<usize> {
        let axis = super::index(axis, "concat: axis")?;
        let parts = values(&parts, "concat parts")?
            .into_iter()
            .map(|i| self.v(i))
            .collect::<JsResult<Vec<_>>>()?;
        done(self.inner.concat(&parts, axis))
    }
    pub fn argmax(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<usize> {
        let x = super::index(x, "argmax: x")?;
        let x = self.v(x)?;
        done(self.inner.argmax_last(x))
    }

    /// Runs everything recorded (one submit, one wait) and reads the outputs. The batch can
    /// run again.
    #[wasm_bindgen(unchecked_return_type = "Promise<BatchResult>")]
    pub fn run(&self) -> Promise {
        let batch = self.inner.clone();
        future_to_promise(async move {
            let result = batch.run().await.map_err(js_error)?;
            Ok(JsBatchResult { inner: result }.into())
        })
    }

    /// Plans the batch once (fusion, buffer reuse and, on WebGPU, a recorded command list) for
    /// running many times with new upload data.
    pub fn compile(&self) -> JsResult<JsGraph> {
        let graph = self.inner.clone().compile().map_err(js_error)?;
        Ok(JsGraph {
            inner: Rc::new(RefCell::new(graph)),
            batch: self.inner.clone(),
        })
    }
}

/// The outputs of a batch run.
#[wasm_bindgen(js_name = BatchResult)]
pub struct JsBatchResult {
    inner: BatchResult,
}

#[wasm_bindgen(js_class = BatchResult)]
impl JsBatchResult {
    /// The data of an output value.
    pub fn get(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<Float32Array> {
        let x = super::index(x, "get: x")?;
        Ok(Float32Array::from(
            self.inner.output_at(x).map_err(js_error)?,
        ))
    }

    /// The data of an output value in its own dtype (as `Tensor.readTyped` gives it): u32
    /// indices of `argmax` and `topk` exactly, f16 values as a Float16Array where the runtime
    /// has one.
    #[wasm_bindgen(
        js_name = getTyped,
        unchecked_return_type = "Float32Array | Uint16Array | Int32Array | Uint32Array | (ArrayBufferView & ArrayLike<number>)"
    )]
    pub fn get_typed(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
    ) -> JsResult<JsValue> {
        let x = super::index(x, "getTyped: x")?;
        let (dtype, words, n) = self.inner.typed_at(x).map_err(js_error)?;
        super::tensor_dtype::typed_array(dtype, words, n)
            .map_err(|e| js_error(format!("getTyped: {e:?}")))
    }

    /// Kernels the run encoded (after fusion).
    #[wasm_bindgen(getter)]
    pub fn kernels(&self) -> usize {
        self.inner.kernels
    }

    /// Recorded ops that fusion folded into other kernels.
    #[wasm_bindgen(getter, js_name = fusedOps)]
    pub fn fused_ops(&self) -> usize {
        self.inner.fused_ops
    }

    /// Bytes of intermediates and outputs at the peak of the run.
    #[wasm_bindgen(getter, js_name = peakBytes)]
    pub fn peak_bytes(&self) -> f64 {
        self.inner.peak_bytes as f64
    }
}

/// A compiled batch: `run(inputs)` replays it with new data for some of its uploads.
#[wasm_bindgen(js_name = Graph)]
pub struct JsGraph {
    inner: Rc<RefCell<Graph>>,
    batch: Batch,
}

impl JsGraph {
    pub(super) fn value_at(&self, index: usize) -> JsResult<Value> {
        self.batch.value(index).map_err(js_error)
    }

    pub(super) fn graph(&self) -> &Rc<RefCell<Graph>> {
        &self.inner
    }
}

#[wasm_bindgen(js_class = Graph)]
impl JsGraph {
    /// Runs again; `inputs` pairs upload values with new data of the same length.
    // The borrow is held across the run on purpose: a second run() before the first finishes
    // finds it taken and gets an error instead of interleaving with it.
    #[allow(clippy::await_holding_refcell_ref)]
    #[wasm_bindgen(unchecked_return_type = "Promise<BatchResult>")]
    pub fn run(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "Array<[number, Float32Array]>")]
        inputs: JsValue,
    ) -> JsResult<Promise> {
        let mut pairs: Vec<(Value, Vec<f32>)> = Vec::new();
        if !(inputs.is_undefined() || inputs.is_null()) {
            if !Array::is_array(&inputs) {
                return Err(JsError::new(
                    "graph inputs must be an array of [value, data] pairs",
                ));
            }
            for (i, pair) in Array::from(&inputs).iter().enumerate() {
                let bad =
                    || JsError::new(&format!("graph inputs[{i}] must be [value, Float32Array]"));
                let pair: Array = pair.dyn_into().map_err(|_| bad())?;
                let index = usizes(&Array::of1(&pair.get(0)), "graph input value")?;
                let data: Float32Array = pair.get(1).dyn_into().map_err(|_| bad())?;
                pairs.push((self.batch.value(index[0]).map_err(js_error)?, data.to_vec()));
            }
        }
        let graph = self.inner.clone();
        Ok(future_to_promise(async move {
            let mut graph = graph.try_borrow_mut().map_err(|_| {
                JsError::new("this graph is already running: await the last run() first")
            })?;
            let refs: Vec<(Value, &[f32])> =
                pairs.iter().map(|(v, d)| (*v, d.as_slice())).collect();
            let result = graph.run(&refs).await.map_err(js_error)?;
            Ok(JsBatchResult { inner: result }.into())
        }))
    }
}
