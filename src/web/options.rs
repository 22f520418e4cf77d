//! Option objects of the JS API: parsed strictly (an unknown or mistyped key is an error that
//! names it) and declared to TypeScript below.

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;

use crate::{Activation, Backend, Precision, QuantFormat, RopeLayout};

#[wasm_bindgen(typescript_custom_section)]
const TS_OPTIONS: &'static str = r#"
/** Which backend `Gpu.create` opens. */
export type BackendChoice = "auto" | "webgpu" | "cpu";
export interface GpuOptions {
  /** "auto" (default): WebGPU when the browser has a usable adapter, else the CPU backend
   *  with a console warning; "webgpu": WebGPU or an error; "cpu": the CPU SIMD128 backend. */
  backend?: BackendChoice;
  /** Verification mode: every op is computed again on the CPU backend and compared within
   *  its tolerance at the next read; the first divergence rejects that read with an Error
   *  naming the op. Slow (a read back and a CPU run per op): for checking a GPU or driver. */
  verify?: boolean;
}
/** What verification mode checked, per op (`gpu.verificationReport()`). */
export interface VerifyReport {
  ops: { op: string; checked: number; elements: number; maxError: number; tolerance: number }[];
}
export type ActivationName = "relu" | "gelu" | "geluTanh" | "silu";
export interface MatmulOptions {
  /** A is stored [.., k, m]. */
  transposeA?: boolean;
  /** B is stored [.., n, k]. */
  transposeB?: boolean;
  /** Added to every row of the product: n values. */
  bias?: Tensor;
  /** Applied after the bias, in the same kernel. */
  activation?: ActivationName;
  /** "f16" uses shader-f16 where the adapter has it (f32 elsewhere); "tf32" and "bf16" are
   *  CUDA's tensor-core precisions, computed as exact f32 in the browser. */
  precision?: "f32" | "f16" | "tf32" | "bf16";
}
export interface NormOptions {
  weight?: Tensor;
  bias?: Tensor;
  /** Default 1e-5. */
  eps?: number;
}
export interface AttentionOptions {
  causal?: boolean;
  /** Valid key length of each batch entry (padding mask). */
  keyLengths?: number[];
  /** The same lengths as a u32 tensor of [batch] (kept on the device; clamped to the key count). */
  lengths?: Tensor;
  /** Default 1 / sqrt(head dim). */
  scale?: number;
  /** "bhsd" (default: [batch, heads, seq, dim]) or "bshd" ([batch, seq, heads, dim]). */
  layout?: "bhsd" | "bshd";
}
export interface Conv2dOptions {
  bias?: Tensor;
  stride?: [number, number];
  padding?: [number, number];
  dilation?: [number, number];
  groups?: number;
}
export interface Pool2dOptions {
  kernel: [number, number];
  /** Default: the kernel size. */
  stride?: [number, number];
  padding?: [number, number];
}
export type RopeLayoutName = "interleaved" | "halfSplit";
/** What `matmulQuant` fuses around the product (a LLaMA layer's pieces). */
export interface QuantMatmulOptions {
  /** RMS-normalise each input row first: the weight (one value per input column), eps 1e-5 unless given. */
  rmsNorm?: { weight: Tensor; eps?: number };
  /** Added to the product (its shape): a residual connection. */
  residual?: Tensor;
  /** The input is gate then up halves; the product reads silu(gate) * up. Not with rmsNorm. */
  swiglu?: boolean;
  /** Rotates the product as `rope` does, tables [rows, dim / 2]; layout "interleaved" unless given. */
  rope?: { cos: Tensor; sin: Tensor; layout?: RopeLayoutName };
  /** A prompt's product ("f16": on tensor cores where the device has them). */
  precision?: "f32" | "f16" | "tf32" | "bf16";
}
export type QuantFormatName = "q8_0" | "q4_0" | "q4_1";
export interface BatchMatmulOptions {
  transposeA?: boolean;
  transposeB?: boolean;
  /** A batch value (number) added to every row. */
  bias?: number;
  activation?: ActivationName;
  precision?: "f32" | "f16" | "tf32" | "bf16";
}
export interface BatchNormOptions {
  weight?: number;
  bias?: number;
  eps?: number;
}
export interface GpuInfo {
  backend: "webgpu" | "cpu";
  adapter: string;
  vendor: string;
  deviceType: "discrete" | "integrated" | "virtual" | "cpu" | "other";
  /** A software adapter (SwiftShader, WARP, llvmpipe) or the CPU backend. */
  software: boolean;
  /** WebGPU's name for a software adapter; the same as `software`. */
  isFallbackAdapter: boolean;
  driver: string;
  features: { shaderF16: boolean; subgroups: boolean; timestampQuery: boolean; cooperativeMatrix: boolean };
  limits: {
    maxStorageBinding: number;
    maxBuffer: number;
    workgroupStorage: number;
    invocationsPerWorkgroup: number;
    workgroupsPerDimension: number;
  };
  /** Why this backend was chosen. */
  selection: string;
  /** On a software adapter: what the CPU-versus-adapter measurement decided. */
  policy: null | {
    summary: string;
    elementwiseGpuFrom: number | null;
    matmulGpuFrom: number | null;
  };
  /** Whether the CPU backend was built with SIMD128 (always, in the npm package). */
  simd128: boolean;
}

/** What the matmul autotuner measured for one size class on this adapter. */
export interface TuneRecord {
  /** The size class, e.g. "f32 m:513-1024 n:513-1024 k:513-1024". */
  class: string;
  /** The sizes timed: [m, n, k]. */
  shape: [number, number, number];
  /** The fastest tile, "MxNxK" (outputs per workgroup, k per step). */
  best: string;
  /** Each tile timed, with microseconds per matmul. */
  timingsUs: [string, number][];
}
"#;

/// Parses an options object: `undefined`/`null` is the default; anything else must be an
/// object whose keys the Rust type knows.
pub(crate) fn parse<T: DeserializeOwned + Default>(
    value: &JsValue,
    what: &str,
) -> Result<T, JsError> {
    if value.is_undefined() || value.is_null() {
        return Ok(T::default());
    }
    if !value.is_object() {
        return Err(JsError::new(&format!(
            "{what} must be an object, got {}",
            super::describe(value)
        )));
    }
    refuse_non_finite(value, what)?;
    let text = js_sys::JSON::stringify(value)
        .ok()
        .and_then(|s| s.as_string())
        .ok_or_else(|| JsError::new(&format!("{what} could not be read as JSON")))?;
    serde_json::from_str(&text).map_err(|e| JsError::new(&format!("{what}: {e}")))
}

/// JSON turns NaN and infinities into null, which would read as "not given": an option
/// object's numbers must be finite, at the top level and inside arrays (strides, padding, key
/// lengths). Not generic, so each option type's parser stays small.
#[inline(never)]
fn refuse_non_finite(value: &JsValue, what: &str) -> Result<(), JsError> {
    for entry in js_sys::Object::entries(value.unchecked_ref()).iter() {
        let entry = js_sys::Array::from(&entry);
        let (key, v) = (entry.get(0), entry.get(1));
        let items: Vec<JsValue> = if js_sys::Array::is_array(&v) {
            js_sys::Array::from(&v).iter().collect()
        } else {
            vec![v]
        };
        if items
            .iter()
            .any(|x| x.as_f64().is_some_and(|f| !f.is_finite()))
        {
            return Err(JsError::new(&format!(
                "{what}: {} must be finite, got {}",
                key.as_string().unwrap_or_default(),
                super::describe(&entry.get(1))
            )));
        }
    }
    Ok(())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct GpuOptions {
    pub backend: Option<String>,
    pub verify: Option<bool>,
}

impl GpuOptions {
    /// `None` for automatic selection.
    pub fn backend(&self) -> Result<Option<Backend>, JsError> {
        match self.backend.as_deref() {
            None | Some("auto") => Ok(None),
            Some("webgpu") => Ok(Some(Backend::WebGpu)),
            Some("cpu") => Ok(Some(Backend::Cpu)),
            Some(other) => Err(JsError::new(&format!(
                "unknown backend {other:?}: expected \"auto\", \"webgpu\" or \"cpu\""
            ))),
        }
    }
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ActivationName {
    Relu,
    Gelu,
    GeluTanh,
    Silu,
}

impl From<ActivationName> for Activation {
    fn from(a: ActivationName) -> Activation {
        match a {
            ActivationName::Relu => Activation::Relu,
            ActivationName::Gelu => Activation::Gelu,
            ActivationName::GeluTanh => Activation::GeluTanh,
            ActivationName::Silu => Activation::Silu,
        }
    }
}

#[derive(Deserialize, Clone, Copy, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) enum PrecisionName {
    #[default]
    F32,
    F16,
    Tf32,
    Bf16,
}

/// A precision by its JS name.
pub(crate) fn precision_by_name(name: &str) -> Result<Precision, JsError> {
    match name {
        "f32" => Ok(Precision::F32),
        "f16" => Ok(Precision::F16),
        "tf32" => Ok(Precision::Tf32),
        "bf16" => Ok(Precision::Bf16),
        _ => Err(JsError::new(&format!(
            "unknown precision {name:?}: expected \"f32\", \"f16\", \"tf32\" or \"bf16\""
        ))),
    }
}

impl From<PrecisionName> for Precision {
    fn from(p: PrecisionName) -> Precision {
        match p {
            PrecisionName::F32 => Precision::F32,
            PrecisionName::F16 => Precision::F16,
            PrecisionName::Tf32 => Precision::Tf32,
            PrecisionName::Bf16 => Precision::Bf16,
        }
    }
}

/// The tensor-valued keys (`bias`, `weight`) are read separately as tensors; here they are
/// only allowed to exist.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct MatmulOptions {
    #[serde(default)]
    pub transpose_a: bool,
    #[serde(default)]
    pub transpose_b: bool,
    #[allow(dead_code)]
    pub bias: Option<IgnoredAny>,
    pub activation: Option<ActivationName>,
    #[serde(default)]
    pub precision: PrecisionName,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct NormOptions {
    #[allow(dead_code)]
    pub weight: Option<IgnoredAny>,
    #[allow(dead_code)]
    pub bias: Option<IgnoredAny>,
    pub eps: Option<f32>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AttentionOptions {
    #[serde(default)]
    pub causal: bool,
    pub key_lengths: Option<Vec<u32>>,
    #[allow(dead_code)]
    pub lengths: Option<IgnoredAny>,
    pub scale: Option<f32>,
    pub layout: Option<String>,
}

impl AttentionOptions {
    /// The Rust options, with `lengths` (read separately: a Tensor is not plain data).
    pub(crate) fn to_options<'a>(
        &'a self,
        lengths: Option<&'a crate::Tensor>,
    ) -> Result<crate::AttentionOptions<'a>, JsError> {
        let layout = match self.layout.as_deref() {
            None | Some("bhsd") => crate::AttentionLayout::Bhsd,
            Some("bshd") => crate::AttentionLayout::Bshd,
            Some(other) => {
                return Err(JsError::new(&format!(
                    "attention options.layout must be \"bhsd\" or \"bshd\", got {other:?}"
                )))
            }
        };
        Ok(crate::AttentionOptions {
            causal: self.causal,
            key_lengths: self.key_lengths.as_deref(),
            lengths,
            scale: self.scale,
            layout,
            ..Default::default()
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Conv2dOptions {
    #[allow(dead_code)]
    pub bias: Option<IgnoredAny>,
    pub stride: Option<[usize; 2]>,
    pub padding: Option<[usize; 2]>,
    pub dilation: Option<[usize; 2]>,
    pub groups: Option<usize>,
}

impl From<&Conv2dOptions> for crate::Conv2dOptions {
    fn from(o: &Conv2dOptions) -> crate::Conv2dOptions {
        let d = crate::Conv2dOptions::default();
        crate::Conv2dOptions {
            stride: o.stride.unwrap_or(d.stride),
            padding: o.padding.unwrap_or(d.padding),
            dilation: o.dilation.unwrap_or(d.dilation),
            groups: o.groups.unwrap_or(d.groups),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct Pool2dOptions {
    pub kernel: Option<[usize; 2]>,
    pub stride: Option<[usize; 2]>,
    pub padding: Option<[usize; 2]>,
}

impl Pool2dOptions {
    pub fn resolve(&self) -> Result<crate::Pool2dOptions, JsError> {
        let kernel = self
            .kernel
            .ok_or_else(|| JsError::new("pool2d options need `kernel: [kh, kw]`"))?;
        Ok(crate::Pool2dOptions {
            kernel,
            stride: self.stride.unwrap_or(kernel),
            padding: self.padding.unwrap_or([0, 0]),
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BatchMatmulOptions {
    #[serde(default)]
    pub transpose_a: bool,
    #[serde(default)]
    pub transpose_b: bool,
    pub bias: Option<usize>,
    pub activation: Option<ActivationName>,
    #[serde(default)]
    pub precision: PrecisionName,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct BatchNormOptions {
    pub weight: Option<usize>,
    pub bias: Option<usize>,
    pub eps: Option<f32>,
}

pub(crate) const DEFAULT_EPS: f32 = 1e-5;

pub(crate) fn rope_layout(name: &str) -> Result<RopeLayout, JsError> {
    match name {
        "interleaved" => Ok(RopeLayout::Interleaved),
        "halfSplit" => Ok(RopeLayout::HalfSplit),
        other => Err(JsError::new(&format!(
            "unknown RoPE layout {other:?}: expected \"interleaved\" or \"halfSplit\""
        ))),
    }
}

pub(crate) fn quant_format(name: &str) -> Result<QuantFormat, JsError> {
    match name {
        "q8_0" => Ok(QuantFormat::Q8_0),
        "q4_0" => Ok(QuantFormat::Q4_0),
        "q4_1" => Ok(QuantFormat::Q4_1),
        other => Err(JsError::new(&format!(
            "unknown quantization format {other:?}: expected \"q8_0\", \"q4_0\" or \"q4_1\""
        ))),
    }
}

/// `gpu.info` as JS sees it (camelCase; the fields of `GpuInfo` above).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct JsInfo {
    backend: Backend,
    adapter: String,
    vendor: String,
    device_type: crate::DeviceType,
    software: bool,
    is_fallback_adapter: bool,
    driver: String,
    features: JsFeatures,
    limits: JsLimits,
    selection: String,
    policy: Option<JsPolicy>,
    simd128: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsFeatures {
    shader_f16: bool,
    subgroups: bool,
    timestamp_query: bool,
    cooperative_matrix: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsLimits {
    max_storage_binding: u64,
    max_buffer: u64,
    workgroup_storage: u32,
    invocations_per_workgroup: u32,
    workgroups_per_dimension: u32,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsPolicy {
    summary: String,
    elementwise_gpu_from: Option<usize>,
    matmul_gpu_from: Option<usize>,
}

impl From<&crate::DeviceInfo> for JsInfo {
    fn from(i: &crate::DeviceInfo) -> JsInfo {
        JsInfo {
            backend: i.backend,
            adapter: i.adapter.clone(),
            vendor: i.vendor.clone(),
            device_type: i.device_type,
            software: i.software,
            is_fallback_adapter: i.software,
            driver: i.driver.clone(),
            features: JsFeatures {
                shader_f16: i.features.shader_f16,
                subgroups: i.features.subgroups,
                timestamp_query: i.features.timestamp_query,
                cooperative_matrix: i.features.cooperative_matrix,
            },
            limits: JsLimits {
                max_storage_binding: i.limits.max_storage_binding,
                max_buffer: i.limits.max_buffer,
                workgroup_storage: i.limits.workgroup_storage,
                invocations_per_workgroup: i.limits.invocations_per_workgroup,
                workgroups_per_dimension: i.limits.workgroups_per_dimension,
            },
            selection: i.selection.clone(),
            policy: i.policy.as_ref().map(|p| JsPolicy {
                summary: p.summary(),
                elementwise_gpu_from: p.elementwise_gpu_from,
                matmul_gpu_from: p.matmul_gpu_from,
            }),
            simd128: cfg!(target_feature = "simd128"),
        }
    }
}
