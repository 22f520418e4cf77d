//! Opening a backend: the CPU, a CUDA device by ordinal, a wgpu adapter of one API by index,
//! or the best usable adapter. Each returns the backend and its [`DeviceInfo`]; `Device`
//! wraps them and never names a backend type.

use super::cpu::CpuBackend;
use super::wgpu::{adapter, WgpuBackend};
use super::BackendImpl;
use crate::error::{Error, Result};
use crate::info::{Backend, DeviceInfo};

/// An opened backend and what it is.
pub(crate) type Opened = (BackendImpl, DeviceInfo);

/// The CPU backend, its info saying why it was chosen.
pub(crate) fn cpu(selection: String) -> Opened {
    (BackendImpl::cpu(), cpu_info(selection))
}

/// The CPU backend's info (reads the processor's name and the memory size from the system).
pub(crate) fn cpu_info(selection: String) -> DeviceInfo {
    CpuBackend::info(selection)
}

/// CUDA device 0 when the driver, NVRTC and cuBLAS are present and a device exists.
#[cfg(cuda)]
pub(crate) fn first_cuda() -> Result<Opened> {
    let count = super::cuda::props::device_count()?;
    let selection =
        format!("automatic: CUDA device 0 of {count} (CUDA is preferred on NVIDIA GPUs)");
    cuda(0, selection)
}

/// The number of CUDA devices (an error saying why where CUDA cannot run).
#[cfg(cuda)]
pub(crate) fn cuda_count() -> Result<usize> {
    super::cuda::props::device_count()
}

/// Without the `cuda` feature (or in the browser): why there are no CUDA devices.
#[cfg(not(cuda))]
pub(crate) fn cuda_count() -> Result<usize> {
    Err(Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason: crate::device::cuda_unavailable(),
    })
}

/// The CUDA device of ordinal `index`.
#[cfg(cuda)]
pub(crate) fn cuda(index: usize, selection: String) -> Result<Opened> {
    let (backend, info) = super::cuda::CudaBackend::new(index, selection)?;
    Ok((BackendImpl::from(backend), info))
}

/// Without the `cuda` feature (or in the browser): why CUDA cannot be opened.
#[cfg(not(cuda))]
pub(crate) fn cuda(_index: usize, _selection: String) -> Result<Opened> {
    Err(Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason: crate::device::cuda_unavailable(),
    })
}

/// The usable adapter number `index` (best first) of wgpu API `backend`.
pub(crate) async fn wgpu_at(backend: Backend, index: usize, selection: String) -> Result<Opened> {
    let unavailable = |reason: String| Error::BackendUnavailable { backend, reason };
    let bits =
        adapter::wgpu_backend(backend).ok_or_else(|| unavailable("not a wgpu backend".into()))?;
    if let Some(why) = adapter::not_compiled(backend) {
        return Err(unavailable(why));
    }
    let (usable, rejected) = adapter::ranked(bits).await;
    let count = usable.len();
    let Some((found, _)) = usable.into_iter().nth(index) else {
        let reason = match (count, index) {
            (0, 0) if rejected.is_empty() => "no adapter found (is a driver installed?)".into(),
            (0, 0) => format!("no usable adapter: {}", rejected.join("; ")),
            _ => format!("there is no usable {backend} adapter {index} ({count} found)"),
        };
        return Err(unavailable(reason));
    };
    let (wgpu, info) = WgpuBackend::new(&found, selection).await?;
    Ok((BackendImpl::from(wgpu), info))
}

/// The best usable wgpu adapter (GL only when no other API has one), or why none could be
/// opened. `why` words the selection from the adapter and the number usable.
pub(crate) async fn best_wgpu(
    why: impl Fn(&DeviceInfo, usize) -> String,
) -> std::result::Result<Opened, String> {
    let (usable, rejected) = adapter::ranked_preferring_native().await;
    let total = usable.len();
    let mut failures = rejected;
    for (found, info) in usable {
        match WgpuBackend::new(&found, why(&info, total)).await {
            Ok((backend, info)) => return Ok((BackendImpl::from(backend), info)),
            Err(e) => failures.push(format!("{} ({}): {e}", info.adapter, info.backend)),
        }
    }
    Err(if failures.is_empty() {
        "no GPU adapter found".to_string()
    } else {
        failures.join("; ")
    })
}
