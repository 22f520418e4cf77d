//! The JavaScript API, through wasm-bindgen (wasm32 only): a thin layer over the Rust API.
//!
//! - [`gpu::JsGpu`] (`Gpu` in JS): `await Gpu.create({ backend })`, `info`, `tensor(data, shape)`.
//! - [`tensor::JsTensor`] (`Tensor`): every op as a method, `await read()`, `dispose()`.
//! - [`batch::JsBatch`] (`Batch`): the batch API, values as plain numbers.
//!
//! Every failure is a JS `Error` carrying the Rust message; nothing here panics, so no call
//! ends in a wasm trap. Arguments JS can get wrong (shapes, option objects, tensors that were
//! disposed) are checked here before they reach the library.

mod batch;
mod batch_dtype;
#[cfg(feature = "models")]
mod download;
mod gpu;
#[cfg(feature = "models")]
mod llm;
#[cfg(feature = "models")]
mod models;
mod options;
mod tensor;
mod tensor_axes;
mod tensor_dtype;
mod tensor_quant;

use js_sys::{Array, ArrayBuffer, Reflect};
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(js_namespace = console, js_name = warn)]
    fn console_warn(message: &str);
    #[wasm_bindgen(js_namespace = console, js_name = error)]
    fn console_error(message: &str);
}

/// Forwards the library's warnings (the CPU fallback, a software adapter) to the console.
struct ConsoleLogger;

impl log::Log for ConsoleLogger {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }

    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let message = record.args().to_string();
        if record.level() == log::Level::Error {
            console_error(&message);
        } else {
            console_warn(&message);
        }
    }

    fn flush(&self) {}
}

static LOGGER: ConsoleLogger = ConsoleLogger;

/// Installs the console logger (unless the page set its own) and a panic hook that prints the
/// message before the trap, should a bug ever reach one.
fn init_once() {
    use std::sync::Once;
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(log::LevelFilter::Warn);
        }
        // A panic would be a gpukit bug (every argument is checked first); should one happen,
        // its message and place reach the console before the trap.
        console_error_panic_hook::set_once();
    });
}

fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// The largest integer a JS number holds exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A count, size, axis or batch value from JS: a number that is a non-negative integer no
/// larger than `Number.MAX_SAFE_INTEGER` and than this build's `usize` (2^32 - 1 in wasm32).
/// Strings, fractions, negatives, NaN and anything else are errors naming `what`.
#[inline(never)]
fn index(value: &JsValue, what: &str) -> Result<usize, JsError> {
    match value.as_f64() {
        Some(x) if x >= 0.0 && x.fract() == 0.0 && x <= MAX_SAFE_INTEGER => {
            usize::try_from(x as u64).map_err(|_| {
                JsError::new(&format!(
                    "{what} is {x}, more than the largest size here ({})",
                    usize::MAX
                ))
            })
        }
        _ => Err(JsError::new(&format!(
            "{what} must be a non-negative integer, got {}",
            describe(value)
        ))),
    }
}

/// [`index`], or `default` when the argument is `undefined` or `null`.
#[inline(never)]
fn optional_index(value: &JsValue, what: &str, default: usize) -> Result<usize, JsError> {
    if value.is_undefined() || value.is_null() {
        Ok(default)
    } else {
        index(value, what)
    }
}

/// A parameter (a scale, an alpha, a base) from JS: a finite number that stays finite in f32.
#[inline(never)]
/// An optional boolean: `undefined` is false; anything but a boolean is an error.
fn flag(value: &JsValue, what: &str) -> Result<bool, JsError> {
    if value.is_undefined() {
        return Ok(false);
    }
    value
        .as_bool()
        .ok_or_else(|| js_error(format!("{what} must be a boolean, got {}", describe(value))))
}

fn number(value: &JsValue, what: &str) -> Result<f32, JsError> {
    match value.as_f64() {
        Some(x) if x.is_finite() && (x as f32).is_finite() => Ok(x as f32),
        _ => Err(JsError::new(&format!(
            "{what} must be a finite number, got {}",
            describe(value)
        ))),
    }
}

/// A data value (`gpu.scalar`): any number, NaN and infinities included.
#[inline(never)]
fn data_number(value: &JsValue, what: &str) -> Result<f32, JsError> {
    value
        .as_f64()
        .map(|x| x as f32)
        .ok_or_else(|| JsError::new(&format!("{what} must be a number, got {}", describe(value))))
}

/// A bound (clip's min and max): a number, infinities allowed, NaN not.
#[inline(never)]
fn bound(value: &JsValue, what: &str) -> Result<f32, JsError> {
    match value.as_f64() {
        Some(x) if !x.is_nan() => Ok(x as f32),
        _ => Err(JsError::new(&format!(
            "{what} must be a number (not NaN), got {}",
            describe(value)
        ))),
    }
}

/// A string argument (a format or layout name).
#[inline(never)]
fn string(value: &JsValue, what: &str) -> Result<String, JsError> {
    value
        .as_string()
        .ok_or_else(|| JsError::new(&format!("{what} must be a string, got {}", describe(value))))
}

/// Tensor data: a `Float32Array` only (strings, plain arrays and other typed arrays would
/// silently become NaN or reinterpreted values).
#[inline(never)]
fn f32_data(value: &JsValue, what: &str) -> Result<Vec<f32>, JsError> {
    value
        .dyn_ref::<js_sys::Float32Array>()
        .map(js_sys::Float32Array::to_vec)
        .ok_or_else(|| {
            JsError::new(&format!(
                "{what} must be a Float32Array, got {}",
                describe(value)
            ))
        })
}

/// Raw bytes: a `Uint8Array` only.
#[inline(never)]
fn byte_data(value: &JsValue, what: &str) -> Result<Vec<u8>, JsError> {
    value
        .dyn_ref::<js_sys::Uint8Array>()
        .map(js_sys::Uint8Array::to_vec)
        .ok_or_else(|| {
            JsError::new(&format!(
                "{what} must be a Uint8Array, got {}",
                describe(value)
            ))
        })
}

/// A list of non-negative integers (a shape, axes, ids) from a JS array or typed array.
#[inline(never)]
fn usizes(value: &JsValue, what: &str) -> Result<Vec<usize>, JsError> {
    if !(Array::is_array(value) || ArrayBuffer::is_view(value)) {
        return Err(JsError::new(&format!(
            "{what} must be an array of non-negative integers, got {}",
            describe(value)
        )));
    }
    Array::from(value)
        .iter()
        .enumerate()
        .map(|(i, v)| index(&v, &format!("{what}[{i}]")))
        .collect()
}

/// A short description of a JS value for error messages.
#[inline(never)]
fn describe(value: &JsValue) -> String {
    if let Some(s) = value.as_string() {
        return format!("{s:?}");
    }
    match value.as_f64() {
        Some(x) => x.to_string(),
        None => value.js_typeof().as_string().unwrap_or_default(),
    }
}

/// `value[key]`, or `undefined` when `value` is not an object.
fn property(value: &JsValue, key: &str) -> JsValue {
    if value.is_object() {
        Reflect::get(value, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
    } else {
        JsValue::UNDEFINED
    }
}

/// Runs the CPU backend's benchmark workloads (`gpukit::bench_cpu`) and returns them as JSON:
/// `{ device, simd128, rows: [{ id, workload, gpukit, reference, unit, ... }] }`.
#[cfg(feature = "js-bench")]
#[wasm_bindgen(js_name = benchCpu)]
pub async fn bench_cpu(quick: bool) -> Result<String, JsError> {
    init_once();
    let rows = crate::bench_cpu::run(quick, None).await.map_err(js_error)?;
    let out = serde_json::json!({
        "device": crate::Device::cpu().info(),
        "simd128": cfg!(target_feature = "simd128"),
        "quick": quick,
        "rows": rows,
    });
    serde_json::to_string(&out).map_err(js_error)
}

/// The gpukit version of this build.
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
