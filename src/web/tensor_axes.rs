//! The Tensor methods of the axis-wise ops: broadcasting, reductions along one axis, mean
//! pooling with lengths, and splits (one more `impl` block of the JS `Tensor` class).

use js_sys::Array;
use wasm_bindgen::prelude::*;

use super::tensor::JsTensor;
use super::{js_error, usizes};

type JsResult<T> = Result<T, JsError>;

#[wasm_bindgen(js_class = Tensor)]
impl JsTensor {
    /// This tensor repeated to `shape` by NumPy's broadcasting rules.
    #[wasm_bindgen(js_name = broadcastTo)]
    pub fn broadcast_to(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> JsResult<JsTensor> {
        let shape = usizes(&shape, "shape")?;
        self.op(|t| t.broadcast_to(&shape))
    }
    /// Reduction along one axis: `op` is "sum", "mean", "max" or "min"; with `keepdim` the axis
    /// stays with size 1.
    #[wasm_bindgen(js_name = reduceAxis)]
    pub fn reduce_axis(
        &self,
        #[wasm_bindgen(unchecked_param_type = "\"sum\" | \"mean\" | \"max\" | \"min\"")]
        op: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "boolean | undefined")] keepdim: &JsValue,
    ) -> JsResult<JsTensor> {
        let op = match super::string(op, "reduceAxis: op")?.as_str() {
            "sum" => crate::ReduceOp::Sum,
            "mean" => crate::ReduceOp::Mean,
            "max" => crate::ReduceOp::Max,
            "min" => crate::ReduceOp::Min,
            other => {
                return Err(js_error(format!(
                    "reduceAxis: op must be \"sum\", \"mean\", \"max\" or \"min\", got {other:?}"
                )))
            }
        };
        let axis = super::index(axis, "reduceAxis: axis")?;
        let keepdim = super::flag(keepdim, "reduceAxis: keepdim")?;
        self.op(|t| t.reduce_axis(op, axis, keepdim))
    }
    /// Index (as a number) of the largest element along one axis.
    #[wasm_bindgen(js_name = argmaxAxis)]
    pub fn argmax_axis(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "boolean | undefined")] keepdim: &JsValue,
    ) -> JsResult<JsTensor> {
        let axis = super::index(axis, "argmaxAxis: axis")?;
        let keepdim = super::flag(keepdim, "argmaxAxis: keepdim")?;
        self.op(|t| t.argmax_axis(axis, keepdim))
    }
    /// Mean pooling of [batch, seq, ..] over the first `lengths[i]` positions of entry i. The
    /// lengths are numbers, or a u32/i32 Tensor on the device (not read back: a length past
    /// seq counts as seq, 0 gives NaN).
    #[wasm_bindgen(js_name = maskedMean)]
    pub fn masked_mean(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number[] | Uint32Array | Tensor")] lengths: JsValue,
    ) -> JsResult<JsTensor> {
        // Only an object has a prototype to ask for (`getPrototypeOf(null)` throws).
        if lengths.is_object()
            && JsValue::from(js_sys::Object::get_prototype_of(&lengths))
                == super::tensor::tensor_prototype()
        {
            let lens = super::tensor::optional_tensor(&lengths, "maskedMean: lengths")?
                .ok_or_else(|| js_error("maskedMean: lengths must be given"))?;
            return self.op(|t| t.masked_mean_by(&lens));
        }
        let lengths = usizes(&lengths, "maskedMean: lengths")?;
        let lengths = lengths
            .into_iter()
            .map(|l| {
                u32::try_from(l)
                    .map_err(|_| js_error(format!("maskedMean: length {l} is too large")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        self.op(|t| t.masked_mean(&lengths))
    }
    /// Parts of `sizes` elements along `axis` (adding up to its length).
    #[wasm_bindgen(unchecked_return_type = "Tensor[]")]
    pub fn split(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] sizes: JsValue,
    ) -> JsResult<Array> {
        let axis = super::index(axis, "split: axis")?;
        let sizes = usizes(&sizes, "split: sizes")?;
        let parts = self.get()?.split(axis, &sizes).map_err(js_error)?;
        Ok(parts
            .into_iter()
            .map(|t| JsValue::from(JsTensor::new(t)))
            .collect())
    }
    /// `n` nearly equal parts along `axis` (PyTorch's chunk).
    #[wasm_bindgen(unchecked_return_type = "Tensor[]")]
    pub fn chunk(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] n: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
    ) -> JsResult<Array> {
        let n = super::index(n, "chunk: n")?;
        let axis = super::index(axis, "chunk: axis")?;
        let parts = self.get()?.chunk(n, axis).map_err(js_error)?;
        Ok(parts
            .into_iter()
            .map(|t| JsValue::from(JsTensor::new(t)))
            .collect())
    }
}
