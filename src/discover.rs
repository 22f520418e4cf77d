//! `discover()`: a report for every backend: available or not, its devices, and why not.

use serde::Serialize;

use crate::backend::cpu::CpuBackend;
use crate::backend::wgpu::adapter;
use crate::device::cuda_unavailable;
use crate::info::{Backend, DeviceInfo};

/// One adapter a backend found, and whether gpukit can use it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FoundDevice {
    /// The adapter.
    pub info: DeviceInfo,
    /// Why gpukit cannot run on it, if it cannot.
    pub unusable: Option<String>,
}

/// What one backend offers here.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BackendReport {
    /// The backend.
    pub backend: Backend,
    /// Whether at least one device of this backend can run gpukit.
    pub available: bool,
    /// Why not, when it is not available.
    pub reason: Option<String>,
    /// The devices found.
    pub devices: Vec<FoundDevice>,
}

/// Looks at every backend gpukit knows, in selection order.
pub async fn discover() -> Vec<BackendReport> {
    let mut reports = Vec::new();
    for backend in Backend::ALL {
        reports.push(report(backend).await);
    }
    reports
}

/// The best usable backend by adapter ranking: what `Device::new` chooses without
/// `GPUKIT_BACKEND`, except that a software adapter measured slower than the CPU backend at
/// every size gives way to the CPU (see [`DispatchPolicy`](crate::DispatchPolicy)).
pub fn recommended(reports: &[BackendReport]) -> Backend {
    reports
        .iter()
        .flat_map(|r| r.devices.iter())
        .filter(|d| d.unusable.is_none())
        .min_by_key(|d| adapter::rank(&d.info))
        .map_or(Backend::Cpu, |d| d.info.backend)
}

async fn report(backend: Backend) -> BackendReport {
    let unavailable = |reason: String| BackendReport {
        backend,
        available: false,
        reason: Some(reason),
        devices: Vec::new(),
    };
    match backend {
        Backend::Cuda => return unavailable(cuda_unavailable()),
        Backend::Cpu => {
            let info = CpuBackend::info("always available".into());
            return BackendReport {
                backend,
                available: true,
                reason: None,
                devices: vec![FoundDevice {
                    info,
                    unusable: None,
                }],
            };
        }
        _ => {}
    }
    if let Some(why) = adapter::not_compiled(backend) {
        return unavailable(why);
    }
    let Some(bits) = adapter::wgpu_backend(backend) else {
        return unavailable("not a wgpu backend".into());
    };
    let devices: Vec<FoundDevice> = adapter::describe_all(bits)
        .await
        .into_iter()
        .map(|(info, unusable)| FoundDevice { info, unusable })
        .collect();
    let available = devices.iter().any(|d| d.unusable.is_none());
    let reason = match (available, devices.is_empty()) {
        (true, _) => None,
        (false, true) => Some("no adapter found (is a driver installed?)".to_string()),
        (false, false) => Some(
            devices
                .iter()
                .filter_map(|d| {
                    d.unusable
                        .as_ref()
                        .map(|u| format!("{}: {u}", d.info.adapter))
                })
                .collect::<Vec<_>>()
                .join("; "),
        ),
    };
    BackendReport {
        backend,
        available,
        reason,
        devices,
    }
}
