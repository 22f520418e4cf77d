//! `Tensor` in JS (`QuantTensor` is in tensor_quant.rs): each op is a method that enqueues and
//! returns a new tensor at once; `read()` is the one that waits (a Promise).

use js_sys::{Array, Promise};
use wasm_bindgen::convert::TryFromJsValue;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::options::{self, AttentionOptions, Conv2dOptions, MatmulOptions, NormOptions};
use super::{js_error, property, usizes};
use crate::Tensor;

/// A tensor on its device. Ops return new tensors; `dispose()` frees this one's memory now
/// instead of when the garbage collector gets to it.
#[wasm_bindgen(js_name = Tensor)]
pub struct JsTensor {
    inner: Option<Tensor>,
}

type JsResult<T> = Result<T, JsError>;

impl JsTensor {
    pub(crate) fn new(t: Tensor) -> JsTensor {
        JsTensor { inner: Some(t) }
    }

    pub(crate) fn wrap(r: crate::Result<Tensor>) -> JsResult<JsTensor> {
        r.map(JsTensor::new).map_err(js_error)
    }

    pub(crate) fn get(&self) -> JsResult<&Tensor> {
        self.inner.as_ref().ok_or_else(|| {
            JsError::new("this tensor was disposed: dispose() a tensor only after its last use")
        })
    }

    pub(super) fn op(
        &self,
        f: impl FnOnce(&Tensor) -> crate::Result<Tensor>,
    ) -> JsResult<JsTensor> {
        JsTensor::wrap(f(self.get()?))
    }

    fn with(
        &self,
        other: &JsTensor,
        f: impl FnOnce(&Tensor, &Tensor) -> crate::Result<Tensor>,
    ) -> JsResult<JsTensor> {
        JsTensor::wrap(f(self.get()?, other.get()?))
    }
}

/// The tensor a JS value holds, without taking it from JS: `undefined`/`null` is `None`, a live
/// `Tensor` is `Some`, anything else an error naming `what`.
pub(crate) fn optional_tensor(value: &JsValue, what: &str) -> JsResult<Option<Tensor>> {
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    let not_a_tensor = || JsError::new(&format!("{what} must be a gpukit Tensor"));
    // Only a real Tensor: its prototype is Tensor's and it holds a wasm pointer. A look-alike
    // object (`{ _share: () => other }`) must not hand over another tensor.
    let proto = tensor_prototype();
    let own = js_sys::Object::get_prototype_of(value);
    let pointer = property(value, "__wbg_ptr").as_f64().unwrap_or(0.0);
    if !value.is_object() || JsValue::from(own) != proto || pointer == 0.0 {
        return Err(not_a_tensor());
    }
    // Tensor's own `_share` (not one the object defines) returns a second JS object for the
    // same tensor; that one is taken, the caller's stays valid.
    let share = property(&proto, "_share")
        .dyn_into::<js_sys::Function>()
        .map_err(|_| not_a_tensor())?;
    let shared = share.call0(value).map_err(|_| not_a_tensor())?;
    let t = JsTensor::try_from_js_value(shared).map_err(|_| not_a_tensor())?;
    t.inner
        .ok_or_else(|| JsError::new(&format!("{what} is a tensor that was disposed")))
        .map(Some)
}

/// `Tensor.prototype`, from a tensor made once for the purpose.
pub(crate) fn tensor_prototype() -> JsValue {
    thread_local! {
        static PROTO: JsValue = {
            let probe = JsValue::from(JsTensor { inner: None });
            JsValue::from(js_sys::Object::get_prototype_of(&probe))
        };
    }
    PROTO.with(Clone::clone)
}

/// Every tensor of a JS array (for concat).
pub(crate) fn tensors(value: &JsValue, what: &str) -> JsResult<Vec<Tensor>> {
    if !Array::is_array(value) {
        return Err(JsError::new(&format!("{what} must be an array of Tensors")));
    }
    Array::from(value)
        .iter()
        .enumerate()
        .map(|(i, v)| {
            optional_tensor(&v, &format!("{what}[{i}]"))?
                .ok_or_else(|| JsError::new(&format!("{what}[{i}] must be a gpukit Tensor")))
        })
        .collect()
}

fn pair(a: Tensor, b: Tensor) -> Array {
    Array::of2(&JsTensor::new(a).into(), &JsTensor::new(b).into())
}

#[wasm_bindgen(js_class = Tensor)]
impl JsTensor {
    /// The shape, outermost axis first.
    #[wasm_bindgen(getter, unchecked_return_type = "number[]")]
    pub fn shape(&self) -> JsResult<Array> {
        Ok(self
            .get()?
            .shape()
            .iter()
            .map(|&d| JsValue::from(d as f64))
            .collect())
    }

    /// Number of elements.
    #[wasm_bindgen(getter)]
    pub fn length(&self) -> JsResult<usize> {
        Ok(self.get()?.len())
    }

    /// Whether `dispose()` was called.
    #[wasm_bindgen(getter)]
    pub fn disposed(&self) -> bool {
        self.inner.is_none()
    }

    /// Waits for everything this tensor depends on and copies it out.
    #[wasm_bindgen(unchecked_return_type = "Promise<Float32Array>")]
    pub fn read(&self) -> JsResult<Promise> {
        let t = self.get()?.clone();
        Ok(future_to_promise(async move {
            let v = t.read().await.map_err(js_error)?;
            Ok(js_sys::Float32Array::from(v.as_slice()).into())
        }))
    }

    /// The one value of a one-element tensor (a reduction's result).
    #[wasm_bindgen(js_name = readScalar, unchecked_return_type = "Promise<number>")]
    pub fn read_scalar(&self) -> JsResult<Promise> {
        let t = self.get()?.clone();
        Ok(future_to_promise(async move {
            let v = t.read_scalar().await.map_err(js_error)?;
            Ok(JsValue::from(v))
        }))
    }

    /// Frees this tensor's memory (as soon as the ops already enqueued that read it are done).
    /// Using it afterwards is an error; disposing twice is allowed.
    pub fn dispose(&mut self) {
        self.inner = None;
    }

    /// A second handle to the same tensor (used inside gpukit to read tensors from option
    /// objects without taking them from JS).
    #[wasm_bindgen(js_name = _share, skip_typescript)]
    pub fn share(&self) -> JsResult<JsTensor> {
        Ok(JsTensor::new(self.get()?.clone()))
    }

    /// The same data with another shape of the same length (no copy).
    pub fn reshape(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> JsResult<JsTensor> {
        let shape = usizes(&shape, "shape")?;
        self.op(|t| t.reshape(&shape))
    }

    pub fn relu(&self) -> JsResult<JsTensor> {
        self.op(Tensor::relu)
    }
    #[wasm_bindgen(js_name = leakyRelu)]
    pub fn leaky_relu(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] alpha: &JsValue,
    ) -> JsResult<JsTensor> {
        let alpha = super::number(alpha, "leaky_relu: alpha")?;
        self.op(|t| t.leaky_relu(alpha))
    }
    pub fn elu(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] alpha: &JsValue,
    ) -> JsResult<JsTensor> {
        let alpha = super::number(alpha, "elu: alpha")?;
        self.op(|t| t.elu(alpha))
    }
    pub fn sigmoid(&self) -> JsResult<JsTensor> {
        self.op(Tensor::sigmoid)
    }
    pub fn tanh(&self) -> JsResult<JsTensor> {
        self.op(Tensor::tanh)
    }
    pub fn silu(&self) -> JsResult<JsTensor> {
        self.op(Tensor::silu)
    }
    pub fn gelu(&self) -> JsResult<JsTensor> {
        self.op(Tensor::gelu)
    }
    #[wasm_bindgen(js_name = geluTanh)]
    pub fn gelu_tanh(&self) -> JsResult<JsTensor> {
        self.op(Tensor::gelu_tanh)
    }
    pub fn clip(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] min: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] max: &JsValue,
    ) -> JsResult<JsTensor> {
        let min = super::bound(min, "clip: min")?;
        let max = super::bound(max, "clip: max")?;
        self.op(|t| t.clip(min, max))
    }
    pub fn scale(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] s: &JsValue,
    ) -> JsResult<JsTensor> {
        let s = super::number(s, "scale: s")?;
        self.op(|t| t.scale(s))
    }
    pub fn exp(&self) -> JsResult<JsTensor> {
        self.op(Tensor::exp)
    }
    pub fn log(&self) -> JsResult<JsTensor> {
        self.op(Tensor::log)
    }
    pub fn sqrt(&self) -> JsResult<JsTensor> {
        self.op(Tensor::sqrt)
    }
    pub fn neg(&self) -> JsResult<JsTensor> {
        self.op(Tensor::neg)
    }
    pub fn abs(&self) -> JsResult<JsTensor> {
        self.op(Tensor::abs)
    }

    /// `onTrue` where this condition is not zero (NaN counts as true), else `onFalse`; the
    /// three broadcast together.
    #[wasm_bindgen(js_name = "where")]
    pub fn where_cond(&self, on_true: &JsTensor, on_false: &JsTensor) -> JsResult<JsTensor> {
        JsTensor::wrap(self.get()?.where_cond(on_true.get()?, on_false.get()?))
    }

    /// Elementwise, with NumPy broadcasting.
    pub fn add(&self, other: &JsTensor) -> JsResult<JsTensor> {
        self.with(other, Tensor::add)
    }
    pub fn sub(&self, other: &JsTensor) -> JsResult<JsTensor> {
        self.with(other, Tensor::sub)
    }
    pub fn mul(&self, other: &JsTensor) -> JsResult<JsTensor> {
        self.with(other, Tensor::mul)
    }
    pub fn div(&self, other: &JsTensor) -> JsResult<JsTensor> {
        self.with(other, Tensor::div)
    }

    /// Softmax along the last axis.
    pub fn softmax(&self) -> JsResult<JsTensor> {
        self.op(Tensor::softmax)
    }
    #[wasm_bindgen(js_name = logSoftmax)]
    pub fn log_softmax(&self) -> JsResult<JsTensor> {
        self.op(Tensor::log_softmax)
    }

    /// Reductions over every element: shape [].
    pub fn sum(&self) -> JsResult<JsTensor> {
        self.op(Tensor::sum)
    }
    pub fn mean(&self) -> JsResult<JsTensor> {
        self.op(Tensor::mean)
    }
    pub fn max(&self) -> JsResult<JsTensor> {
        self.op(Tensor::max)
    }
    pub fn min(&self) -> JsResult<JsTensor> {
        self.op(Tensor::min)
    }
    /// Reductions along the last axis.
    #[wasm_bindgen(js_name = sumLast)]
    pub fn sum_last(&self) -> JsResult<JsTensor> {
        self.op(Tensor::sum_last)
    }
    #[wasm_bindgen(js_name = meanLast)]
    pub fn mean_last(&self) -> JsResult<JsTensor> {
        self.op(Tensor::mean_last)
    }
    #[wasm_bindgen(js_name = maxLast)]
    pub fn max_last(&self) -> JsResult<JsTensor> {
        self.op(Tensor::max_last)
    }
    #[wasm_bindgen(js_name = minLast)]
    pub fn min_last(&self) -> JsResult<JsTensor> {
        self.op(Tensor::min_last)
    }
    /// Dot product of two tensors of the same length: shape [].
    pub fn dot(&self, other: &JsTensor) -> JsResult<JsTensor> {
        self.with(other, Tensor::dot)
    }

    /// Matrix product (2-D, or batched with a broadcast batch axis), with optional transposes,
    /// bias and activation fused into the one kernel.
    pub fn matmul(
        &self,
        other: &JsTensor,
        #[wasm_bindgen(unchecked_optional_param_type = "MatmulOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let o: MatmulOptions = options::parse(&options, "matmul options")?;
        let bias = optional_tensor(&property(&options, "bias"), "matmul options.bias")?;
        let opts = crate::MatmulOptions {
            transpose_a: o.transpose_a,
            transpose_b: o.transpose_b,
            bias: bias.as_ref(),
            activation: o.activation.map(Into::into),
            precision: o.precision.into(),
            tile: None,
        };
        self.with(other, |a, b| a.matmul_with(b, opts))
    }

    /// A linear layer, `activation(x · weightᵀ + bias)`, with `weight` stored [out, in].
    pub fn linear(
        &self,
        weight: &JsTensor,
        #[wasm_bindgen(unchecked_optional_param_type = "Tensor | null")] bias: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "ActivationName | null")]
        activation: JsValue,
    ) -> JsResult<JsTensor> {
        let bias = optional_tensor(&bias, "linear bias")?;
        let activation = match activation.as_string() {
            Some(name) => Some(activation_by_name(&name)?),
            None if activation.is_undefined() || activation.is_null() => None,
            None => return Err(JsError::new("linear activation must be a string")),
        };
        self.with(weight, |x, w| x.linear(w, bias.as_ref(), activation))
    }

    /// Layer normalisation along the last axis.
    #[wasm_bindgen(js_name = layerNorm)]
    pub fn layer_norm(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "NormOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let (w, b, eps) = norm_options(&options)?;
        self.op(|t| t.layer_norm(w.as_ref(), b.as_ref(), eps))
    }

    /// RMS normalisation along the last axis.
    #[wasm_bindgen(js_name = rmsNorm)]
    pub fn rms_norm(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "NormOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let (w, b, eps) = norm_options(&options)?;
        self.op(|t| t.rms_norm(w.as_ref(), b.as_ref(), eps))
    }

    /// Reorders the axes.
    pub fn permute(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number[]")] axes: JsValue,
    ) -> JsResult<JsTensor> {
        let axes = usizes(&axes, "axes")?;
        self.op(|t| t.permute(&axes))
    }
    /// Swaps two axes.
    pub fn transpose(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] a: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] b: &JsValue,
    ) -> JsResult<JsTensor> {
        let a = super::index(a, "transpose: a")?;
        let b = super::index(b, "transpose: b")?;
        self.op(|t| t.transpose(a, b))
    }
    /// Elements `start..end` along `axis`.
    pub fn slice(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] start: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] end: &JsValue,
    ) -> JsResult<JsTensor> {
        let axis = super::index(axis, "slice: axis")?;
        let start = super::index(start, "slice: start")?;
        let end = super::index(end, "slice: end")?;
        self.op(|t| t.slice(axis, start..end))
    }

    /// Rows of this [vocab, dim] table picked by token ids: [ids.length, dim].
    pub fn embedding(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array")] ids: JsValue,
    ) -> JsResult<JsTensor> {
        let ids = usizes(&ids, "ids")?;
        let ids: Vec<u32> = ids.into_iter().map(|i| i as u32).collect();
        self.op(|t| t.embedding(&ids))
    }

    /// Rotary position embedding with tables from `gpu.ropeTables`.
    pub fn rope(
        &self,
        cos: &JsTensor,
        sin: &JsTensor,
        #[wasm_bindgen(unchecked_param_type = "RopeLayoutName")] layout: &JsValue,
    ) -> JsResult<JsTensor> {
        let layout = super::string(layout, "rope: layout")?;
        let layout = options::rope_layout(&layout)?;
        JsTensor::wrap(self.get()?.rope(cos.get()?, sin.get()?, layout))
    }

    /// The `k` largest elements of each row and their indices (as floats), largest first.
    #[wasm_bindgen(unchecked_return_type = "[Tensor, Tensor]")]
    pub fn topk(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] k: &JsValue,
    ) -> JsResult<Array> {
        let k = super::index(k, "topk: k")?;
        let (values, indices) = self.get()?.topk_last(k).map_err(js_error)?;
        Ok(pair(values, indices))
    }

    /// The index (as a float) of each row's largest element.
    pub fn argmax(&self) -> JsResult<JsTensor> {
        self.op(Tensor::argmax_last)
    }

    /// Fused scaled dot-product attention: q [b, hq, sq, d], k [b, hkv, sk, d],
    /// v [b, hkv, sk, dv]; multi-head and grouped-query, optional causal and padding masks.
    pub fn attention(
        &self,
        k: &JsTensor,
        v: &JsTensor,
        #[wasm_bindgen(unchecked_optional_param_type = "AttentionOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let o: AttentionOptions = options::parse(&options, "attention options")?;
        let lengths = optional_tensor(&property(&options, "lengths"), "attention options.lengths")?;
        let opts = o.to_options(lengths.as_ref())?;
        JsTensor::wrap(self.get()?.attention(k.get()?, v.get()?, opts))
    }

    /// 2-D convolution (NCHW): weight [o, c / groups, kh, kw].
    pub fn conv2d(
        &self,
        weight: &JsTensor,
        #[wasm_bindgen(unchecked_optional_param_type = "Conv2dOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let o: Conv2dOptions = options::parse(&options, "conv2d options")?;
        let bias = optional_tensor(&property(&options, "bias"), "conv2d options.bias")?;
        let opts = crate::Conv2dOptions::from(&o);
        self.with(weight, |x, w| x.conv2d(w, bias.as_ref(), opts))
    }

    #[wasm_bindgen(js_name = maxPool2d)]
    pub fn max_pool2d(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Pool2dOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let o: options::Pool2dOptions = options::parse(&options, "maxPool2d options")?;
        let opts = o.resolve()?;
        self.op(|t| t.max_pool2d(opts))
    }

    #[wasm_bindgen(js_name = avgPool2d)]
    pub fn avg_pool2d(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Pool2dOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let o: options::Pool2dOptions = options::parse(&options, "avgPool2d options")?;
        let opts = o.resolve()?;
        self.op(|t| t.avg_pool2d(opts))
    }
}

fn activation_by_name(name: &str) -> JsResult<crate::Activation> {
    serde_json::from_value::<options::ActivationName>(serde_json::Value::String(name.into()))
        .map(Into::into)
        .map_err(|_| {
            JsError::new(&format!(
                "unknown activation {name:?}: expected \"relu\", \"gelu\", \"geluTanh\" or \"silu\""
            ))
        })
}

fn norm_options(options: &JsValue) -> JsResult<(Option<Tensor>, Option<Tensor>, f32)> {
    let o: NormOptions = options::parse(options, "norm options")?;
    let weight = optional_tensor(&property(options, "weight"), "norm options.weight")?;
    let bias = optional_tensor(&property(options, "bias"), "norm options.bias")?;
    Ok((weight, bias, o.eps.unwrap_or(options::DEFAULT_EPS)))
}
