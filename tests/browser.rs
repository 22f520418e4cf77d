//! The op suite on the browser's WebGPU, in headless Chromium (`make test-browser`): wasm32 with
//! SIMD128, run by wasm-bindgen-test through chromedriver with `--enable-unsafe-webgpu`
//! (webdriver.json). There the adapter is SwiftShader, a software one without shader-f16 and
//! with 256 invocations per workgroup, so this also checks that tiling respects those limits
//! and that f16 falls back. A missing adapter fails the tests; nothing is skipped.
#![cfg(target_arch = "wasm32")]

#[macro_use]
mod common;

use std::cell::RefCell;

use gpukit::{Backend, Device, DispatchPolicy};
use wasm_bindgen_test::{wasm_bindgen_test, wasm_bindgen_test_configure};

wasm_bindgen_test_configure!(run_in_browser);

thread_local! {
    static WEBGPU: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The browser's WebGPU device, opened once (so the matmul tuner's in-memory record is shared).
async fn webgpu() -> Device {
    if let Some(d) = WEBGPU.with(|d| d.borrow().clone()) {
        return d;
    }
    let d = Device::with_backend(Backend::WebGpu)
        .await
        .unwrap_or_else(|e| panic!("the browser suite needs a WebGPU adapter: {e}"));
    WEBGPU.with(|cell| *cell.borrow_mut() = Some(d.clone()));
    d
}

/// The hybrid of WebGPU and the CPU with crossovers small enough that the suite's sizes run
/// on both sides: the browser's path, where inputs already on the adapter stay there.
async fn hybrid() -> Device {
    let policy = DispatchPolicy::fixed("browser suite", Some(4096), Some(64));
    Device::hybrid(&webgpu().await, policy).expect("a hybrid of the browser's adapter")
}

macro_rules! browser_suite {
    ($module:ident, $device:ident, [$($test:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                #[wasm_bindgen_test]
                async fn $test() {
                    common::suite::$test(&$device().await).await;
                }
            )*
        }
    };
}

with_suite_tests!(browser_suite!(webgpu, webgpu,));
with_suite_tests!(browser_suite!(hybrid, hybrid,));

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
