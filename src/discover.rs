//! `discover()`: a report for every backend: available or not, its devices, and why not.

use serde::Serialize;

use crate::backend::cpu::CpuBackend;
use crate::backend::wgpu::adapter;
#[cfg(not(cuda))]
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

/// The best usable backend: CUDA where a CUDA device opens, else by adapter ranking; what
/// `Device::new` chooses without `GPUKIT_BACKEND`, except that a software adapter measured slower than the CPU backend at
/// every size gives way to the CPU (see [`DispatchPolicy`](crate::DispatchPolicy)).
pub fn recommended(reports: &[BackendReport]) -> Backend {
    let cuda = reports
        .iter()
        .any(|r| r.backend == Backend::Cuda && r.available);
    if cuda {
        return Backend::Cuda;
    }
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
        Backend::Cuda => return cuda_report(),
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

/// Every CUDA device, opened to query it (a device that cannot be opened says why).
fn cuda_report() -> BackendReport {
    #[cfg(cuda)]
    {
        use crate::backend::cuda::{props, CudaBackend};
        let count = match props::device_count() {
            Ok(n) => n,
            Err(e) => {
                return BackendReport {
                    backend: Backend::Cuda,
                    available: false,
                    reason: Some(e.to_string()),
                    devices: Vec::new(),
                }
            }
        };
        let mut devices = Vec::new();
        let mut failures = Vec::new();
        for i in 0..count {
            match CudaBackend::new(i, format!("CUDA device {i}")) {
                Ok((_, info)) => devices.push(FoundDevice {
                    info,
                    unusable: None,
                }),
                Err(e) => failures.push(format!("device {i}: {e}")),
            }
        }
        let available = !devices.is_empty();
        let reason = if available {
            None
        } else if failures.is_empty() {
            Some("the driver found no CUDA device".into())
        } else {
            Some(failures.join("; "))
        };
        BackendReport {
            backend: Backend::Cuda,
            available,
            reason,
            devices,
        }
    }
    #[cfg(not(cuda))]
    BackendReport {
        backend: Backend::Cuda,
        available: false,
        reason: Some(cuda_unavailable()),
        devices: Vec::new(),
    }
}

/// How this machine's CUDA devices connect: the peer-access matrix (`peer_access[i][j]`: device
/// `i` reads and writes device `j`'s memory directly over NVLink or PCIe) and the NCCL version
/// where libnccl loads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CudaTopology {
    /// `[i][j]`: whether device `i` can access device `j` (the diagonal is true).
    pub peer_access: Vec<Vec<bool>>,
    /// NCCL's version, where the library loads.
    pub nccl: Option<String>,
}

/// The CUDA devices' topology, or why CUDA cannot run.
pub fn cuda_topology() -> crate::Result<CudaTopology> {
    #[cfg(cuda)]
    {
        use crate::backend::cuda::props;
        let count = props::device_count()?;
        Ok(CudaTopology {
            peer_access: props::peer_matrix(count)?,
            nccl: props::nccl_version(),
        })
    }
    #[cfg(not(cuda))]
    Err(crate::Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason: cuda_unavailable(),
    })
}
