//! `Gpu` in JS: opens a device and makes tensors on it.

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::batch::JsBatch;
use super::options::{self, GpuOptions, JsInfo};
use super::tensor::{tensors, JsTensor};
use super::tensor_quant::JsQuantTensor;
use super::{init_once, js_error, usizes};
use crate::{Backend, Device, Tensor};

/// A compute device: WebGPU, or the CPU SIMD128 backend where WebGPU is missing.
#[wasm_bindgen(js_name = Gpu)]
pub struct JsGpu {
    device: Device,
}

/// Whether this JS environment has a WebGPU adapter to offer; asking wgpu for a WebGPU
/// instance where there is none (Node) panics, so this comes first.
async fn webgpu_supported() -> bool {
    wgpu::util::is_browser_webgpu_supported().await
}

impl JsGpu {
    /// The device (for the other JS classes).
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(super) fn device(&self) -> &Device {
        &self.device
    }
}

#[wasm_bindgen(js_class = Gpu)]
impl JsGpu {
    /// Opens a device. `backend: "auto"` (the default) picks WebGPU when the browser has an
    /// adapter and otherwise the CPU backend, with one console warning; `"webgpu"` fails with
    /// an error instead of falling back; `"cpu"` is the CPU backend.
    pub async fn create(
        #[wasm_bindgen(unchecked_optional_param_type = "GpuOptions")] options: JsValue,
    ) -> Result<JsGpu, JsError> {
        init_once();
        let o: GpuOptions = options::parse(&options, "Gpu.create options")?;
        let device = match o.backend()? {
            Some(Backend::Cpu) => Device::cpu(),
            Some(backend) => {
                if !webgpu_supported().await {
                    return Err(JsError::new(
                        "WebGPU is not available here (no navigator.gpu, as in Node or an older \
                         browser, or the browser blocks it): use backend \"auto\" to fall back \
                         to the CPU backend, or \"cpu\"",
                    ));
                }
                Device::with_backend(backend).await.map_err(js_error)?
            }
            None if webgpu_supported().await => Device::new().await.map_err(js_error)?,
            None => Device::cpu_fallback("WebGPU is not available here (no navigator.gpu)"),
        };
        let device = match o.verify {
            Some(true) => device.with_verification(),
            _ => device,
        };
        Ok(JsGpu { device })
    }

    /// What runs: backend, adapter, whether it is software (SwiftShader) or the CPU, features,
    /// limits and why it was chosen.
    #[wasm_bindgen(getter, unchecked_return_type = "GpuInfo")]
    pub fn info(&self) -> Result<JsValue, JsError> {
        let text = serde_json::to_string(&JsInfo::from(self.device.info())).map_err(js_error)?;
        js_sys::JSON::parse(&text).map_err(|_| JsError::new("info could not be converted"))
    }

    /// What verification mode has checked so far (`{ ops: [{ op, checked, elements, maxError,
    /// tolerance }] }`), or `null` when it is off.
    #[wasm_bindgen(js_name = verificationReport, unchecked_return_type = "VerifyReport | null")]
    pub fn verification_report(&self) -> Result<JsValue, JsError> {
        let Some(report) = self.device.verification_report() else {
            return Ok(JsValue::NULL);
        };
        let text = serde_json::to_string(&report).map_err(js_error)?;
        js_sys::JSON::parse(&text).map_err(|_| JsError::new("the report could not be converted"))
    }

    /// What the matmul autotuner measured on this adapter, one record per size class tuned so
    /// far: `class`, the `shape` timed, the `best` tile, and `timingsUs`, each tile with
    /// microseconds per matmul. First uses run the default tile; their classes are tuned at
    /// the next `synchronize()` or read. Empty on the CPU backend.
    #[wasm_bindgen(unchecked_return_type = "TuneRecord[]")]
    pub fn tuning(&self) -> Result<JsValue, JsError> {
        // Built with js_sys, not serde_json: formatting floats would add ryu to the package.
        let set = |o: &js_sys::Object, k: &str, v: JsValue| {
            js_sys::Reflect::set(o, &k.into(), &v)
                .map(drop)
                .map_err(|_| JsError::new("tuning could not be converted"))
        };
        let records = Array::new();
        for r in self.device.tuning() {
            let o = js_sys::Object::new();
            set(&o, "class", r.class.as_str().into())?;
            let shape: Array = r.shape.iter().map(|&v| JsValue::from(v as f64)).collect();
            set(&o, "shape", shape.into())?;
            set(&o, "best", r.best.to_string().into())?;
            let timings: Array = r
                .timings_us
                .iter()
                .map(|(t, us)| JsValue::from(Array::of2(&t.to_string().into(), &(*us).into())))
                .collect();
            set(&o, "timingsUs", timings.into())?;
            records.push(&o);
        }
        Ok(records.into())
    }

    /// A tensor holding a copy of `data` (row-major) with this shape.
    pub fn tensor(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Float32Array")] data: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> Result<JsTensor, JsError> {
        let data = super::f32_data(data, "tensor data")?;
        let shape = usizes(&shape, "shape")?;
        JsTensor::wrap(self.device.tensor(&data, &shape))
    }

    /// A tensor from little-endian bytes of `dtype` ("f32", "f16", "bf16", "i32" or "u32"),
    /// stored in that dtype (an f16 tensor takes two bytes an element).
    #[wasm_bindgen(js_name = tensorFromBytes)]
    pub fn tensor_from_bytes(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\"")]
        dtype: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number[]")] shape: JsValue,
    ) -> Result<JsTensor, JsError> {
        let dtype = super::tensor_dtype::dtype(dtype, "tensorFromBytes: dtype")?;
        let shape = usizes(&shape, "shape")?;
        let bytes = super::byte_data(bytes, "tensorFromBytes: bytes")?;
        JsTensor::wrap(self.device.tensor_from_bytes(&bytes, dtype, &shape))
    }

    /// `[0, 1, .., n - 1]` as a tensor of `dtype` (default "f32").
    pub fn arange(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] n: &JsValue,
        #[wasm_bindgen(
            unchecked_param_type = "\"f32\" | \"f16\" | \"bf16\" | \"i32\" | \"u32\" | undefined"
        )]
        dtype: &JsValue,
    ) -> Result<JsTensor, JsError> {
        let n = super::index(n, "arange: n")?;
        let dtype = match dtype.is_undefined() {
            true => crate::DType::F32,
            false => super::tensor_dtype::dtype(dtype, "arange: dtype")?,
        };
        JsTensor::wrap(self.device.arange(n, dtype))
    }

    /// A tensor of shape [] holding `value`.
    pub fn scalar(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] value: &JsValue,
    ) -> Result<JsTensor, JsError> {
        let value = super::data_number(value, "scalar: value")?;
        JsTensor::wrap(self.device.scalar(value))
    }

    /// Joins tensors along `axis` (all other axes equal).
    pub fn concat(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Tensor[]")] parts: JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] axis: &JsValue,
    ) -> Result<JsTensor, JsError> {
        let axis = super::index(axis, "concat: axis")?;
        let parts = tensors(&parts, "concat parts")?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        JsTensor::wrap(Tensor::concat(&refs, axis))
    }

    /// RoPE tables `[cos, sin]` for positions offset..offset+seq, each [seq, dim / 2],
    /// computed in f64.
    #[wasm_bindgen(js_name = ropeTables, unchecked_return_type = "[Tensor, Tensor]")]
    pub fn rope_tables(
        &self,
        #[wasm_bindgen(unchecked_param_type = "number")] seq: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] dim: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number")] base: &JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "number")] offset: &JsValue,
    ) -> Result<Array, JsError> {
        let seq = super::index(seq, "ropeTables: seq")?;
        let dim = super::index(dim, "ropeTables: dim")?;
        let base = if base.is_undefined() || base.is_null() {
            10000.0
        } else {
            super::number(base, "ropeTables: base")? as f64
        };
        let offset = super::optional_index(offset, "ropeTables: offset", 0)?;
        let (c, s) = self
            .device
            .rope_tables(seq, dim, base, offset)
            .map_err(js_error)?;
        Ok(Array::of2(
            &JsTensor::new(c).into(),
            &JsTensor::new(s).into(),
        ))
    }

    /// A [rows, cols] weight from GGUF block bytes ("q8_0", "q4_0" or "q4_1").
    pub fn quantized(
        &self,
        #[wasm_bindgen(unchecked_param_type = "Uint8Array")] bytes: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "QuantFormatName")] format: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] rows: &JsValue,
        #[wasm_bindgen(unchecked_param_type = "number")] cols: &JsValue,
    ) -> Result<JsQuantTensor, JsError> {
        let format = super::string(format, "quantized: format")?;
        let rows = super::index(rows, "quantized: rows")?;
        let cols = super::index(cols, "quantized: cols")?;
        let bytes = super::byte_data(bytes, "quantized: bytes")?;
        let format = options::quant_format(&format)?;
        self.device
            .quantized(&bytes, format, rows, cols)
            .map(|inner| JsQuantTensor { inner })
            .map_err(js_error)
    }

    /// A batch: record uploads and ops, then `run()` them in one GPU round trip.
    pub fn batch(&self) -> JsBatch {
        JsBatch::new(self.device.batch())
    }

    /// Waits until every enqueued op has finished.
    #[wasm_bindgen(unchecked_return_type = "Promise<void>")]
    pub fn synchronize(&self) -> Promise {
        let device = self.device.clone();
        future_to_promise(async move {
            device.synchronize().await.map_err(js_error)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Device memory held by tensors and the buffer pool, in bytes.
    #[wasm_bindgen(js_name = memoryStats, unchecked_return_type = "{ liveBytes: number; pooledBytes: number; peakLiveBytes: number }")]
    pub fn memory_stats(&self) -> Result<JsValue, JsError> {
        let m = self.device.memory_stats();
        let o = js_sys::Object::new();
        for (k, v) in [
            ("liveBytes", m.live_bytes),
            ("pooledBytes", m.pooled_bytes),
            ("peakLiveBytes", m.peak_live_bytes),
        ] {
            js_sys::Reflect::set(&o, &k.into(), &JsValue::from(v as f64))
                .map_err(|_| JsError::new("memoryStats could not be built"))?;
        }
        Ok(o.into())
    }
}
