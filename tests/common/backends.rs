//! The devices the model tests run on besides the CPU backend: the Vulkan adapter (lavapipe in
//! CI, which `make test` installs, so its absence is a failure) and CUDA where it runs.

use gpukit::Device;

/// The Vulkan adapter; a failure when there is none.
pub fn vulkan() -> Device {
    Device::with_backend_blocking(gpukit::Backend::Vulkan)
        .expect("make test installs lavapipe, so a Vulkan adapter exists")
}

/// Runs `check` on CUDA. Without CUDA it prints `SKIPPED (cuda)` and why (past the test
/// harness's capture, so every run shows it), unless `GPUKIT_REQUIRE_CUDA` is set, when it
/// fails.
pub fn on_cuda(check: impl FnOnce(&Device)) {
    match Device::with_backend_blocking(gpukit::Backend::Cuda) {
        Ok(device) => check(&device),
        Err(e) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
            panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {e}")
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED (cuda): {e}");
        }
    }
}
