//! The Tensor methods of dtypes: the dtype, conversions, typed reads, comparisons and device
//! ids (one more `impl` block of the JS `Tensor` class).

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::js_error;
use super::tensor::JsTensor;
use crate::{CompareOp, DType};

type JsResult<T> = Result<T, JsError>;

/// A dtype named by a JS string.
pub(crate) fn dtype(value: &JsValue, what: &str) -> JsResult<DType> {
    super::string(value, what)?.parse().map_err(js_error)
}

#[wasm_bindgen(js_class = Tensor)]
impl JsTensor {
    /// The element type: "f32", "f16", "bf16", "i32" or "u32".
    #[wasm_bindgen(
        getter,
        unchecked_return_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\""
    )]
    pub fn dtype(&self) -> JsResult<String> {
        Ok(self.get()?.dtype().name().to_string())
    }

    /// The values as another dtype (halves round to nearest even and overflow to ±inf; floats
    /// truncate into integers and saturate, NaN to 0).
    pub fn cast(
        &self,
        #[wasm_bindgen(unchecked_param_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\"")]
        to: &JsValue,
    ) -> JsResult<JsTensor> {
        let to = dtype(to, "cast: dtype")?;
        self.op(|t| t.cast(to))
    }

    /// Copies the data out in its own dtype: a Float32Array (f32), Float16Array (f16, where the
    /// runtime has one, typed as an array-like view since TypeScript's libraries may lack it; a
    /// Uint16Array of the bits elsewhere), Uint16Array of the bits (bf16),
    /// Int32Array (i32) or Uint32Array (u32).
    #[wasm_bindgen(
        js_name = readTyped,
        unchecked_return_type = "Promise<Float32Array | Uint16Array | Int32Array | Uint32Array | (ArrayBufferView & ArrayLike<number>)>"
    )]
    pub fn read_typed(&self) -> JsResult<Promise> {
        let t = self.get()?.clone();
        Ok(future_to_promise(async move {
            let words = t.read_words().await.map_err(js_error)?;
            typed_array(t.dtype(), &words, t.len())
        }))
    }

    /// Compares with NumPy broadcasting: "equal", "not_equal", "less", "less_equal",
    /// "greater" or "greater_equal"; a u32 tensor of 1 where it holds, 0 elsewhere.
    pub fn compare(
        &self,
        #[wasm_bindgen(
            unchecked_param_type = "\"equal\" | \"not_equal\" | \"less\" | \"less_equal\" | \"greater\" | \"greater_equal\""
        )]
        op: &JsValue,
        other: &JsTensor,
    ) -> JsResult<JsTensor> {
        let name = super::string(op, "compare: op")?;
        let op = CompareOp::ALL
            .into_iter()
            .find(|o| o.name() == name)
            .ok_or_else(|| js_error(format!("compare: unknown op {name:?}")))?;
        JsTensor::wrap(self.get()?.compare(op, other.get()?))
    }

    /// Attention over a packed QKV projection [batch, seq, (heads + 2 kvHeads) * d], read in
    /// place; returns [batch, seq, heads * d].
    #[wasm_bindgen(js_name = attentionPacked)]
    pub fn attention_packed(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] heads: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] kv_heads: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "AttentionOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let heads = super::index(heads, "attentionPacked: heads")?;
        let kv_heads = super::index(kv_heads, "attentionPacked: kvHeads")?;
        let o: super::options::AttentionOptions =
            super::options::parse(&options, "attention options")?;
        let lengths = super::tensor::optional_tensor(
            &super::property(&options, "lengths"),
            "attention options.lengths",
        )?;
        let opts = o.to_options(lengths.as_ref())?;
        JsTensor::wrap(self.get()?.attention_packed(heads, kv_heads, opts))
    }

    /// Rows of this [vocab, dim] table picked by a u32 (or i32) tensor of ids of any shape; an
    /// id out of range gives a NaN row.
    #[wasm_bindgen(js_name = embeddingIds)]
    pub fn embedding_ids(&self, ids: &JsTensor) -> JsResult<JsTensor> {
        JsTensor::wrap(self.get()?.embedding_ids(ids.get()?))
    }
}

/// `n` elements of `dtype` stored in `words` as the matching JS typed array (see
/// `Tensor.readTyped`).
pub(crate) fn typed_array(dtype: DType, words: &[f32], n: usize) -> Result<JsValue, JsValue> {
    use crate::dtype::to_elements;
    Ok(match dtype {
        DType::F32 => js_sys::Float32Array::from(&words[..n]).into(),
        DType::I32 => js_sys::Int32Array::from(to_elements::<i32>(words, n).as_slice()).into(),
        DType::U32 => js_sys::Uint32Array::from(to_elements::<u32>(words, n).as_slice()).into(),
        DType::F16 | DType::BF16 => {
            let bits: Vec<u16> = crate::dtype::unpack(words, n * 2)
                .chunks_exact(2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .collect();
            let array = js_sys::Uint16Array::from(bits.as_slice());
            let ctor = js_sys::Reflect::get(&js_sys::global(), &"Float16Array".into())?;
            match (dtype, ctor.dyn_into::<js_sys::Function>()) {
                (DType::F16, Ok(ctor)) => {
                    let args = js_sys::Array::of1(&array.buffer());
                    js_sys::Reflect::construct(&ctor, &args)?
                }
                _ => array.into(),
            }
        }
    })
}
