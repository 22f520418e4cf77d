//! The op suite on every backend compiled in: each function of `common::suite` becomes one test
//! per backend. The GPU backend must exist: `make test` installs Mesa's lavapipe so that a Vulkan
//! adapter always does, and a missing adapter fails these tests rather than skipping them.
#![cfg(not(target_arch = "wasm32"))]

#[macro_use]
mod common;

use std::sync::OnceLock;

use gpukit::{Backend, Device};

/// The wgpu backend under test: `GPUKIT_TEST_GPU` if set, else the platform's native API.
fn gpu_backend() -> Backend {
    if let Ok(name) = std::env::var("GPUKIT_TEST_GPU") {
        return name.parse().expect("GPUKIT_TEST_GPU names a backend");
    }
    if cfg!(target_os = "macos") {
        Backend::Metal
    } else {
        Backend::Vulkan
    }
}

fn wgpu_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        let backend = gpu_backend();
        let d = Device::with_backend_blocking(backend).unwrap_or_else(|e| {
            panic!("the GPU op suite needs a {backend} adapter (make test installs lavapipe): {e}")
        });
        eprintln!(
            "op suite on {} ({}, software: {})",
            d.info().adapter,
            d.info().backend,
            d.info().software
        );
        d
    })
}

/// The software-adapter hybrid: the wgpu device and the CPU with small crossovers, so the
/// suite's sizes run on both sides and inputs move between them.
fn hybrid_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        let policy = gpukit::DispatchPolicy::fixed("op suite", Some(4096), Some(64));
        Device::hybrid(wgpu_device(), policy).expect("a hybrid of the suite's adapter")
    })
}

fn cpu_device() -> &'static Device {
    static DEVICE: OnceLock<Device> = OnceLock::new();
    DEVICE.get_or_init(Device::cpu)
}

/// The CUDA device, or `None` (after printing SKIPPED and why) where CUDA cannot run: CI has
/// no NVIDIA GPU. `GPUKIT_REQUIRE_CUDA=1` (set on GPU machines) turns a missing device into a
/// failure, so the suite cannot skip where it must run.
fn cuda_device() -> Option<&'static Device> {
    static DEVICE: OnceLock<Result<Device, String>> = OnceLock::new();
    let device = DEVICE.get_or_init(|| {
        Device::with_backend_blocking(Backend::Cuda)
            .inspect(|d| eprintln!("op suite on {} ({})", d.info().adapter, d.info().driver))
            .map_err(|e| e.to_string())
    });
    match device {
        Ok(d) => Some(d),
        Err(why) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
            panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {why}")
        }
        Err(why) => {
            // Written past the test harness's capture, so every run shows the skip and why.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "SKIPPED (cuda): {why}");
            None
        }
    }
}

macro_rules! cuda_suite {
    ([$($test:ident),* $(,)?]) => {
        mod cuda {
            use super::*;
            $(
                #[test]
                fn $test() {
                    if let Some(device) = cuda_device() {
                        pollster::block_on(common::suite::$test(device));
                    }
                }
            )*
        }
    };
}

with_suite_tests!(cuda_suite!());

macro_rules! suite_for {
    ($backend:ident, $device:expr, [$($test:ident),* $(,)?]) => {
        mod $backend {
            use super::*;
            $(
                #[test]
                fn $test() {
                    pollster::block_on(common::suite::$test($device));
                }
            )*
        }
    };
}

macro_rules! op_suite {
    ($($backend:ident => $device:expr),* $(,)?) => {
        $(with_suite_tests!(suite_for!($backend, $device,));)*
    };
}

op_suite! {
    wgpu => wgpu_device(),
    cpu => cpu_device(),
    hybrid => hybrid_device(),
}

macro_rules! suite_names {
    ([$($test:ident),* $(,)?]) => {
        const LISTED: &[&str] = &[$(stringify!($test)),*];
    };
}

with_suite_tests!(suite_names!());

/// Every `pub async fn name(dev: &Device)` in `tests/common/suite/` is in `with_suite_tests!`
/// (the list every harness expands), and every listed name is such a function: a suite
/// function that a harness forgets would otherwise never run.
#[test]
fn every_suite_function_is_listed() {
    let listed = LISTED;
    // The crate's folder where it was built; run from a copy of the repository (a GPU
    // machine), the folder the tests run in.
    let built = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/suite");
    let dir = if built.is_dir() {
        built
    } else {
        std::path::PathBuf::from("tests/common/suite")
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("tests/common/suite exists") {
        let path = entry.expect("a directory entry").path();
        let text = std::fs::read_to_string(&path).expect("a readable suite file");
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("pub async fn ") {
                let name = rest.split('(').next().unwrap_or_default();
                if rest.contains("(dev: &Device)") {
                    found.push(name.to_string());
                }
            }
        }
    }
    let missing: Vec<&String> = found
        .iter()
        .filter(|f| !listed.contains(&f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "suite functions missing from with_suite_tests!: {missing:?}"
    );
    let stale: Vec<&&str> = listed
        .iter()
        .filter(|l| !found.iter().any(|f| f == *l))
        .collect();
    assert!(
        stale.is_empty(),
        "listed but not suite functions: {stale:?}"
    );
    let mut unique = listed.to_vec();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(
        unique.len(),
        listed.len(),
        "a suite function is listed twice"
    );
}
