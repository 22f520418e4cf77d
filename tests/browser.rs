//! The op suite on the browser's WebGPU, in headless Chromium (`make test-browser`): wasm32 with
//! SIMD128, run by wasm-bindgen-test through chromedriver with `--enable-unsafe-webgpu`
//! (webdriver.json). There the adapter is SwiftShader, a software one without shader-f16 and
//! with 256 invocations per workgroup, so this also checks that tiling respects those limits
//! and that f16 falls back. A missing adapter fails the tests; nothing is skipped.
#![cfg(target_arch = "wasm32")]

#[macro_use]
mod common;

use common::web::webgpu;
use gpukit::{Backend, Device};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

with_suite_tests!(web_suite!(webgpu, webgpu,));
with_suite_tests!(web_suite!(hybrid, hybrid,));

/// The device really is the browser's WebGPU adapter (SwiftShader in headless Chromium), with
/// its limits, named from the browser's `GPUAdapter.info` (vendor and architecture), which wgpu
/// leaves out.
#[wasm_bindgen_test]
async fn the_adapter_is_webgpu() {
    let d = webgpu().await;
    let info = d.info();
    assert_eq!(info.backend, Backend::WebGpu, "{info:?}");
    assert!(info.limits.invocations_per_workgroup >= 64, "{info:?}");
    assert!(
        info.adapter.to_lowercase().contains("swiftshader"),
        "named from GPUAdapter.info: {info:?}"
    );
    assert_eq!(info.vendor, "google", "{info:?}");
    assert!(info.software, "{info:?}");
}

/// Automatic selection on a software adapter measures it against the CPU backend and obeys
/// the measurement (the CPU backend when the CPU wins everywhere, else a hybrid on WebGPU).
#[wasm_bindgen_test]
async fn automatic_selection_measures_a_software_adapter() {
    let d = Device::new().await.expect("automatic selection");
    let info = d.info();
    let adapter = webgpu().await;
    if !adapter.info().software {
        assert_eq!(info.backend, Backend::WebGpu, "{info:?}");
        return;
    }
    let policy = info
        .policy
        .as_ref()
        .expect("a measured policy on a software adapter");
    let expected = if policy.prefers_cpu() {
        Backend::Cpu
    } else {
        Backend::WebGpu
    };
    assert_eq!(info.backend, expected, "{}", policy.summary());
    assert!(policy.adapter_costs.round_trip_us > 0.0 && policy.cpu_costs.add_gelems > 0.0);
    let x = d.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    assert_eq!(x.relu().unwrap().read().await.unwrap(), vec![1.0, 0.0, 3.0]);
}
