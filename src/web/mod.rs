//! The JavaScript API, through wasm-bindgen (wasm32 only).

use wasm_bindgen::prelude::*;

use crate::Device;

fn js_error(e: impl std::fmt::Display) -> JsError {
    JsError::new(&e.to_string())
}

/// Runs the CPU backend's benchmark workloads (`gpukit::bench_cpu`) and returns them as JSON:
/// `{ device, simd128, rows: [{ id, workload, gpukit, reference, unit, ... }] }`.
#[wasm_bindgen(js_name = benchCpu)]
pub async fn bench_cpu(quick: bool) -> Result<String, JsError> {
    let rows = crate::bench_cpu::run(quick, None).await.map_err(js_error)?;
    let out = serde_json::json!({
        "device": Device::cpu().info(),
        "simd128": cfg!(target_feature = "simd128"),
        "quick": quick,
        "rows": rows,
    });
    serde_json::to_string(&out).map_err(js_error)
}
