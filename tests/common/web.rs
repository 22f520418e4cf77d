//! What the two WebGPU harnesses share (headless Chromium in `tests/browser.rs`, Dawn in Node
//! on a real GPU in `tests/dawn.rs`): the adapter's device opened once, the hybrid of it and
//! the CPU, and the macro that turns the op suite into tests on a device.

use std::cell::RefCell;

use gpukit::{Backend, Device, DispatchPolicy};

thread_local! {
    static WEBGPU: RefCell<Option<Device>> = const { RefCell::new(None) };
}

/// The WebGPU device, opened once (so the matmul tuner's in-memory record is shared). A
/// missing adapter fails the test that asked: nothing is skipped.
pub async fn webgpu() -> Device {
    if let Some(d) = WEBGPU.with(|d| d.borrow().clone()) {
        return d;
    }
    let d = Device::with_backend(Backend::WebGpu)
        .await
        .unwrap_or_else(|e| panic!("the WebGPU suite needs a WebGPU adapter: {e}"));
    WEBGPU.with(|cell| *cell.borrow_mut() = Some(d.clone()));
    d
}

/// The hybrid of WebGPU and the CPU with crossovers small enough that the suite's sizes run
/// on both sides: the browser's path, where inputs already on the adapter stay there.
pub async fn hybrid() -> Device {
    let policy = DispatchPolicy::fixed("WebGPU suite", Some(4096), Some(64));
    Device::hybrid(&webgpu().await, policy).expect("a hybrid of the WebGPU adapter")
}

/// `web_suite!(module, device_fn, [tests..])`: one `wasm_bindgen_test` a suite test, run on
/// `device_fn().await`.
#[allow(unused_macros)] // tests/node.rs runs the CPU backend, not this
macro_rules! web_suite {
    ($module:ident, $device:ident, [$($test:ident),* $(,)?]) => {
        mod $module {
            use super::*;
            $(
                #[wasm_bindgen_test]
                async fn $test() {
                    common::suite::$test(&common::web::$device().await).await;
                }
            )*
        }
    };
}
