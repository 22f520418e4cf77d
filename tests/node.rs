//! The op suite on the CPU backend compiled to wasm32 with SIMD128, run in Node by
//! wasm-bindgen-test (`make test-node`). Node has no WebGPU, so this is the path a Node user or
//! a browser without WebGPU takes; the headless-Chromium run of the WebGPU backend is separate.
#![cfg(target_arch = "wasm32")]

#[macro_use]
mod common;

use gpukit::Device;
use wasm_bindgen_test::wasm_bindgen_test;

macro_rules! node_suite {
    ([$($test:ident),* $(,)?]) => {
        $(
            #[wasm_bindgen_test]
            async fn $test() {
                common::suite::$test(&Device::cpu()).await;
            }
        )*
    };
}

with_suite_tests!(node_suite!());

/// The build under test really is the SIMD128 one.
#[wasm_bindgen_test]
fn runs_with_simd128() {
    const { assert!(cfg!(target_feature = "simd128")) };
    let driver = Device::cpu().info().driver.clone();
    assert!(driver.contains("SIMD128"), "{driver}");
}
