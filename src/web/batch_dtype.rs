//! The Batch and Graph methods of dtypes: typed uploads, casts, device ids, and new typed data
//! for a graph (one more `impl` block of each JS class).

use wasm_bindgen::prelude::*;

use super::batch::{JsBatch, JsGraph};
use super::{index, js_error, usizes};

type JsResult<T> = Result<T, JsError>;

#[wasm_bindgen(js_class = Batch)]
impl JsBatch {
    /// Records an upload of little-endian bytes of `dtype` ("f32", "f16", "bf16", "i32",
    /// "u32"), stored in that dtype; `graph.setInput` replaces them at each run.
    #[wasm_bindgen(js_name = uploadBytes)]
    pub fn upload_bytes(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\"")]
        dtype: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> JsResult<usize> {
        let dtype = super::tensor_dtype::dtype(dtype, "uploadBytes: dtype")?;
        let shape = usizes(&shape, "shape")?;
        let bytes = super::byte_data(bytes, "uploadBytes: bytes")?;
        let v = self.inner_mut().upload_bytes(&bytes, dtype, &shape);
        v.map(|v| v.index()).map_err(js_error)
    }

    /// Records a conversion to `dtype`.
    pub fn cast(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] x: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\"")]
        dtype: &JsValue,
    ) -> JsResult<usize> {
        let dtype = super::tensor_dtype::dtype(dtype, "cast: dtype")?;
        let x = self.value_at(index(x, "cast: x")?)?;
        let v = self.inner_mut().cast(x, dtype);
        v.map(|v| v.index()).map_err(js_error)
    }

    /// Records rows of a [vocab, dim] table picked by a u32 (or i32) value of ids.
    #[wasm_bindgen(js_name = embeddingIds)]
    pub fn embedding_ids(
        &mut self,
        #[wasm_bindgen(unchecked_param_type = "number")] table: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] ids: &JsValue,
    ) -> JsResult<usize> {
        let table = self.value_at(index(table, "embeddingIds: table")?)?;
        let ids = self.value_at(index(ids, "embeddingIds: ids")?)?;
        let v = self.inner_mut().embedding_ids(table, ids);
        v.map(|v| v.index()).map_err(js_error)
    }
}

#[wasm_bindgen(js_class = Graph)]
impl JsGraph {
    /// New data for an upload of any dtype at the next `run()`: little-endian bytes of the
    /// upload's dtype (a Uint32Array's bytes for u32 ids).
    #[wasm_bindgen(js_name = setInput)]
    pub fn set_input(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] value: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
    ) -> JsResult<()> {
        let v = self.value_at(index(value, "setInput: value")?)?;
        let bytes = super::byte_data(bytes, "setInput: bytes")?;
        let mut graph = self.graph().try_borrow_mut().map_err(|_| {
            JsError::new("this graph is running: await its run() before setting inputs")
        })?;
        graph.set_input_bytes(v, &bytes).map_err(js_error)
    }
}
