//! The op suite on WebGPU through Dawn (Chrome's WebGPU implementation) in Node, on a real GPU:
//! the path a browser user with a GPU takes, which headless Chromium here (SwiftShader) cannot
//! show. `make gpu-web` builds this beside Node, Dawn's Node addon (the npm package `webgpu`)
//! and the package's web build; `scripts/dawn/run.sh` runs it on the NVIDIA machine, where
//! `scripts/dawn/setup.cjs` installs Dawn as `navigator.gpu` before the tests start. A missing
//! adapter fails every test; nothing is skipped. (`make test` builds it for wasm32 and checks
//! it with clippy; this machine's Dawn rejects lavapipe, so it runs only there.)
#![cfg(target_arch = "wasm32")]

#[macro_use]
mod common;

use common::web::webgpu;
use gpukit::{Backend, Device};
use wasm_bindgen_test::wasm_bindgen_test;

with_suite_tests!(web_suite!(webgpu, webgpu,));
with_suite_tests!(web_suite!(hybrid, hybrid,));

/// The device is a hardware adapter, named from `GPUAdapter.info`, with the optional features
/// the adapter offers turned on in gpukit.
#[wasm_bindgen_test]
async fn the_adapter_is_a_real_gpu() {
    let d = webgpu().await;
    let info = d.info();
    assert_eq!(info.backend, Backend::WebGpu, "{info:?}");
    assert!(!info.software, "a software adapter: {info:?}");
    assert!(
        !info.vendor.is_empty() && info.vendor != "unknown",
        "{info:?}"
    );
    assert!(
        info.adapter.contains(&info.vendor),
        "named from GPUAdapter.info: {info:?}"
    );
    assert!(info.limits.invocations_per_workgroup >= 256, "{info:?}");
    let offered = adapter_features().await;
    assert_eq!(
        info.features.shader_f16,
        offered.iter().any(|f| f == "shader-f16"),
        "shader-f16: {offered:?} {info:?}"
    );
    assert_eq!(
        info.features.subgroups,
        offered.iter().any(|f| f == "subgroups"),
        "subgroups: {offered:?} {info:?}"
    );
}

/// Automatic selection takes a hardware adapter without measuring it against the CPU.
#[wasm_bindgen_test]
async fn automatic_selection_takes_the_gpu() {
    let d = Device::new().await.expect("automatic selection");
    assert_eq!(d.info().backend, Backend::WebGpu, "{:?}", d.info());
}

/// The names in `GPUAdapter.features` of the adapter Dawn gives by default.
async fn adapter_features() -> Vec<String> {
    use js_sys::{Array, Function, Promise, Reflect};
    use wasm_bindgen::{JsCast, JsValue};
    let get = |v: &JsValue, k: &str| Reflect::get(v, &JsValue::from_str(k)).unwrap();
    let gpu = get(&get(&js_sys::global(), "navigator"), "gpu");
    let request: Function = get(&gpu, "requestAdapter").dyn_into().unwrap();
    let promise: Promise = request.call0(&gpu).unwrap().dyn_into().unwrap();
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.unwrap();
    Array::from(&get(&adapter, "features"))
        .iter()
        .filter_map(|v| v.as_string())
        .collect()
}
