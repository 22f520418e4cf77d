//! Device loss on CUDA by a real fault, in a process of its own: a kernel writes through an
//! invalid pointer, the context fails with a sticky error, and from then on every call on the
//! device and its tensors must be `Error::DeviceLost`, never a panic or a wrong result; the
//! lost device drops without panicking. A fault loses the GPU's primary context for the whole
//! process, so a new device on the same GPU is `DeviceLost` too (a clear error, not a crash).
//! Skipped (with a `SKIPPED` line) where CUDA cannot run, unless `GPUKIT_REQUIRE_CUDA` is set.
#![cfg(not(target_arch = "wasm32"))]

use gpukit::{Backend, Device};

#[test]
fn a_faulting_kernel_loses_the_device_and_every_call_says_so() {
    let device = match Device::with_backend_blocking(Backend::Cuda) {
        Ok(d) => d,
        Err(e) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
            panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {e}")
        }
        Err(e) => {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED (cuda): {e}");
            return;
        }
    };
    let x = device.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    assert_eq!(
        x.relu().unwrap().read_blocking().unwrap(),
        vec![1.0, 0.0, 3.0]
    );
    device.inject_fault_for_tests().unwrap();
    let lost = |what: &str, r: gpukit::Result<()>| match r {
        Err(e) if e.is_device_lost() => {}
        other => panic!("{what}: expected DeviceLost, got {other:?}"),
    };
    lost("synchronize", device.synchronize_blocking());
    lost("read", x.read_blocking().map(drop));
    lost("op", x.relu().map(drop));
    lost("upload", device.tensor(&[1.0], &[1]).map(drop));
    lost(
        "batch upload",
        device.batch().upload(&[1.0], &[1]).map(drop),
    );
    drop(x);
    drop(device);
    // The GPU's context stays lost in this process: opening it again is a clear error.
    match Device::with_backend_blocking(Backend::Cuda) {
        Err(e) => assert!(e.is_device_lost(), "{e:?}"),
        Ok(d) => panic!(
            "a device on the faulted context opened: {:?}",
            d.info().adapter
        ),
    }
}
