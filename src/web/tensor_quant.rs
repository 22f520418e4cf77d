//! `QuantTensor` in JS, and the Tensor method that multiplies by one (one more `impl` block of
//! the JS `Tensor` class).

use js_sys::Array;
use wasm_bindgen::prelude::*;

use super::options;
use super::property;
use super::tensor::{optional_tensor, JsTensor};
use crate::{QuantTensor, Tensor};

type JsResult<T> = Result<T, JsError>;

#[wasm_bindgen(js_class = Tensor)]
impl JsTensor {
    /// `self` [.., k] times the quantized weight [n, k] transposed: [.., n], with what
    /// `options` fuses around it (see `QuantMatmulOptions`).
    #[wasm_bindgen(js_name = matmulQuant)]
    pub fn matmul_quant(
        &self,
        weight: &JsQuantTensor,
        #[wasm_bindgen(unchecked_optional_param_type = "QuantMatmulOptions")] options: JsValue,
    ) -> JsResult<JsTensor> {
        let what = "matmulQuant options";
        let fail = |key: &str, want: &str, v: &JsValue| {
            JsError::new(&format!(
                "{what}: {key} must be {want}, got {}",
                super::describe(v)
            ))
        };
        let tensor = |v: &JsValue, key: &str| -> JsResult<Tensor> {
            optional_tensor(v, &format!("{what}: {key}"))?
                .ok_or_else(|| fail(key, "a gpukit Tensor", v))
        };
        let (mut norm, mut residual, mut rope) = (None, None, None);
        let mut opts = crate::QuantMatmulOptions::<&Tensor>::default();
        for (key, v) in entries(
            &options,
            what,
            &["rmsNorm", "residual", "swiglu", "rope", "precision"],
        )? {
            match key.as_str() {
                "rmsNorm" => {
                    entries(&v, "rmsNorm", &["weight", "eps"])?;
                    let eps = property(&v, "eps");
                    let eps = match eps.as_f64() {
                        _ if eps.is_undefined() => options::DEFAULT_EPS,
                        Some(e) if e.is_finite() && e >= 0.0 => e as f32,
                        _ => return Err(fail("rmsNorm.eps", "a number >= 0", &eps)),
                    };
                    norm = Some((tensor(&property(&v, "weight"), "rmsNorm.weight")?, eps));
                }
                "residual" => residual = Some(tensor(&v, "residual")?),
                "swiglu" => {
                    opts.swiglu = v.as_bool().ok_or_else(|| fail("swiglu", "a boolean", &v))?
                }
                "rope" => {
                    entries(&v, "rope", &["cos", "sin", "layout"])?;
                    let layout = property(&v, "layout");
                    let layout = match layout.as_string() {
                        _ if layout.is_undefined() => crate::RopeLayout::Interleaved,
                        Some(name) => options::rope_layout(&name)?,
                        None => return Err(fail("rope.layout", "a string", &layout)),
                    };
                    let (cos, sin) = (property(&v, "cos"), property(&v, "sin"));
                    rope = Some((tensor(&cos, "rope.cos")?, tensor(&sin, "rope.sin")?, layout));
                }
                _ => {
                    let name = v
                        .as_string()
                        .ok_or_else(|| fail("precision", "a string", &v))?;
                    opts.precision = options::precision_by_name(&name)?;
                }
            }
        }
        opts.rms_norm = norm.as_ref().map(|(w, eps)| (w, *eps));
        opts.residual = residual.as_ref();
        opts.rope = rope.as_ref().map(|(c, s, l)| (c, s, *l));
        JsTensor::wrap(self.get()?.matmul_quant_with(&weight.inner, opts))
    }
}

/// The keys and values of an options object (none for `undefined` or `null`), each key one of
/// `known`.
fn entries(v: &JsValue, what: &str, known: &[&str]) -> JsResult<Vec<(String, JsValue)>> {
    if v.is_undefined() || v.is_null() {
        return Ok(Vec::new());
    }
    // (The same check as `options::parse`'s, kept apart: sharing it grew the gzipped wasm by
    // 700 bytes.)
    if !v.is_object() {
        return Err(JsError::new(&format!(
            "{what} must be an object, got {}",
            super::describe(v)
        )));
    }
    let mut out = Vec::new();
    for key in js_sys::Object::keys(v.unchecked_ref::<js_sys::Object>()).iter() {
        let key = key.as_string().unwrap_or_default();
        if !known.contains(&key.as_str()) {
            return Err(JsError::new(&format!(
                "{what}: unknown key {key:?} (expected {})",
                known.join(", ")
            )));
        }
        out.push((key.clone(), property(v, &key)));
    }
    Ok(out)
}

/// A GGUF-quantized weight matrix (Q8_0, Q4_0 or Q4_1), dequantized inside the kernels.
#[wasm_bindgen(js_name = QuantTensor)]
pub struct JsQuantTensor {
    pub(crate) inner: QuantTensor,
}

#[wasm_bindgen(js_class = QuantTensor)]
impl JsQuantTensor {
    /// [rows, cols].
    #[wasm_bindgen(getter, unchecked_return_type = "number[]")]
    pub fn shape(&self) -> Array {
        self.inner
            .shape()
            .iter()
            .map(|&d| JsValue::from(d as f64))
            .collect()
    }

    /// The f32 values.
    pub fn dequantize(&self) -> JsResult<JsTensor> {
        JsTensor::wrap(self.inner.dequantize())
    }

    /// Rows picked by a u32 (or i32) tensor of ids of any shape, dequantised on the device:
    /// `[...ids.shape, cols]` f32 (an embedding table kept quantized). An id out of range gives
    /// a NaN row.
    #[wasm_bindgen(js_name = embeddingIds)]
    pub fn embedding_ids(&self, ids: &JsTensor) -> JsResult<JsTensor> {
        JsTensor::wrap(self.inner.embedding_ids(ids.get()?))
    }
}
