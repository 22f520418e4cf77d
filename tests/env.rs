//! GPUKIT_BACKEND overrides automatic selection. One test in its own binary, since it changes
//! the process environment.
#![cfg(not(target_arch = "wasm32"))]

use gpukit::{Backend, Device, Error};

#[test]
fn gpukit_backend_overrides_selection() {
    std::env::set_var("GPUKIT_BACKEND", "cpu");
    let d = Device::new_blocking().unwrap();
    assert_eq!(d.info().backend, Backend::Cpu);
    assert_eq!(d.info().selection, "GPUKIT_BACKEND=cpu");

    std::env::set_var("GPUKIT_BACKEND", "cuda");
    let e = Device::new_blocking().unwrap_err();
    assert!(
        matches!(
            e,
            Error::BackendUnavailable {
                backend: Backend::Cuda,
                ..
            }
        ),
        "{e}"
    );

    std::env::set_var("GPUKIT_BACKEND", "nonsense");
    assert!(matches!(
        Device::new_blocking().unwrap_err(),
        Error::UnknownBackend { .. }
    ));

    std::env::set_var("GPUKIT_BACKEND", "auto");
    assert!(Device::new_blocking()
        .unwrap()
        .info()
        .selection
        .starts_with("automatic"));
    std::env::remove_var("GPUKIT_BACKEND");
}
