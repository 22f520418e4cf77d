//! CUDA, NVRTC and cuBLAS failures as gpukit errors, each with what the caller can do.

use cudarc::cublas::result::CublasError;
use cudarc::driver::sys::cudaError_enum as Cu;
use cudarc::driver::DriverError;

use crate::error::Error;
use crate::info::Backend;

pub(crate) fn is_out_of_memory(e: &DriverError) -> bool {
    e.0 == Cu::CUDA_ERROR_OUT_OF_MEMORY
}

fn describe(e: &DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| format!("{:?}", e.0));
    match e.error_string() {
        Ok(text) => format!("{name}: {}", text.to_string_lossy()),
        Err(_) => name,
    }
}

/// A driver error in the category the caller acts on.
pub(crate) fn driver(e: DriverError) -> Error {
    let detail = describe(&e);
    match e.0 {
        Cu::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory {
            detail: format!("CUDA: {detail}"),
        },
        Cu::CUDA_ERROR_NO_DEVICE
        | Cu::CUDA_ERROR_NOT_INITIALIZED
        | Cu::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | Cu::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
        | Cu::CUDA_ERROR_INVALID_DEVICE
        | Cu::CUDA_ERROR_DEVICE_UNAVAILABLE => Error::BackendUnavailable {
            backend: Backend::Cuda,
            reason: format!(
                "{detail} (install or update the NVIDIA driver, or use the vulkan backend)"
            ),
        },
        // Sticky errors: the context cannot run anything again.
        Cu::CUDA_ERROR_ILLEGAL_ADDRESS
        | Cu::CUDA_ERROR_LAUNCH_FAILED
        | Cu::CUDA_ERROR_ECC_UNCORRECTABLE
        | Cu::CUDA_ERROR_HARDWARE_STACK_ERROR
        | Cu::CUDA_ERROR_ILLEGAL_INSTRUCTION
        | Cu::CUDA_ERROR_MISALIGNED_ADDRESS
        | Cu::CUDA_ERROR_INVALID_PC
        | Cu::CUDA_ERROR_CONTEXT_IS_DESTROYED
        | Cu::CUDA_ERROR_DEVICE_NOT_LICENSED => Error::DeviceLost {
            reason: format!("CUDA: {detail}"),
        },
        _ => Error::Backend {
            backend: Backend::Cuda,
            detail,
        },
    }
}

/// Whether an error is a capture invalidated by other work (`CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`,
/// as `driver` words it).
pub(crate) fn is_capture_invalidated(e: &Error) -> bool {
    matches!(e, Error::Backend { detail, .. } if detail.contains("CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"))
}

pub(crate) fn blas(e: CublasError) -> Error {
    use cudarc::cublas::sys::cublasStatus_t as S;
    match e.0 {
        S::CUBLAS_STATUS_ALLOC_FAILED => Error::OutOfMemory {
            detail: format!("cuBLAS: {e:?}"),
        },
        S::CUBLAS_STATUS_NOT_INITIALIZED => Error::BackendUnavailable {
            backend: Backend::Cuda,
            reason: format!(
                "cuBLAS could not start ({e:?}): install the CUDA libraries (libcublas), or use \
                 the vulkan backend"
            ),
        },
        _ => Error::Backend {
            backend: Backend::Cuda,
            detail: format!("cuBLAS: {e:?}"),
        },
    }
}
