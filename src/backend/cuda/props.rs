//! Finding CUDA: whether the driver and libraries are present (cudarc panics when they are
//! not, so nothing calls it before this says yes), how many devices there are, and what each
//! one is.

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::driver::sys::CUdevice_attribute as A;

use super::errors;
use crate::error::{Error, Result};
use crate::info::{Backend, CudaProperties};

/// Why CUDA cannot be used here, or `None` when its libraries load.
pub(crate) fn missing_libraries() -> Option<String> {
    // SAFETY: these only try to open the shared libraries.
    let (driver, nvrtc, cublas) = unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
        )
    };
    if !driver {
        return Some(
            "libcuda not found: install the NVIDIA driver, or use the vulkan backend".into(),
        );
    }
    let mut missing = Vec::new();
    if !nvrtc {
        missing.push("libnvrtc");
    }
    if !cublas {
        missing.push("libcublas");
    }
    if missing.is_empty() {
        None
    } else {
        Some(format!(
            "{} not found: install the CUDA runtime libraries (and put their folder on \
             LD_LIBRARY_PATH), or use the vulkan backend",
            missing.join(" and ")
        ))
    }
}

fn unavailable(reason: String) -> Error {
    Error::BackendUnavailable {
        backend: Backend::Cuda,
        reason,
    }
}

/// The number of CUDA devices, or why CUDA cannot run.
pub(crate) fn device_count() -> Result<usize> {
    if let Some(why) = missing_libraries() {
        return Err(unavailable(why));
    }
    cu::init().map_err(errors::driver)?;
    let n = cu::device::get_count().map_err(errors::driver)?;
    Ok(n.max(0) as usize)
}

/// The driver's CUDA version.
pub(crate) fn driver_version() -> Result<(u32, u32)> {
    let mut v = 0;
    // SAFETY: writes one int; the library is present (checked by the callers).
    unsafe { sys::cuDriverGetVersion(&mut v) }
        .result()
        .map_err(errors::driver)?;
    Ok(((v / 1000) as u32, ((v % 1000) / 10) as u32))
}

/// Everything the driver says about device `ordinal` (CUDA must be initialised).
pub(crate) fn query(ordinal: usize) -> Result<(String, CudaProperties)> {
    let dev = cu::device::get(ordinal as i32).map_err(errors::driver)?;
    let name = cu::device::get_name(dev).map_err(errors::driver)?;
    let attr = |a: A| -> Result<u32> {
        // SAFETY: `dev` is a valid device handle.
        unsafe { cu::device::get_attribute(dev, a) }
            .map(|v| v.max(0) as u32)
            .map_err(errors::driver)
    };
    // SAFETY: as above.
    let total = unsafe { cu::device::total_mem(dev) }.map_err(errors::driver)? as u64;
    let props = CudaProperties {
        ordinal,
        compute_capability: (
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        driver_version: driver_version()?,
        total_memory: total,
        free_memory: 0,
        multiprocessors: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        shared_memory_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        shared_memory_per_block_optin: attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?,
        registers_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        warp_size: attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_grid: [
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        memory_clock_khz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)?,
        memory_bus_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
        l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?,
        ecc: attr(A::CU_DEVICE_ATTRIBUTE_ECC_ENABLED)? != 0,
        unified_addressing: attr(A::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)? != 0,
        concurrent_kernels: attr(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS)? != 0,
        pci: (
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID)?,
            attr(A::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID)?,
        ),
    };
    Ok((name, props))
}

/// Which devices can reach which directly (`[i][j]`: device `i` can access device `j`'s
/// memory; the diagonal is true).
pub(crate) fn peer_matrix(count: usize) -> Result<Vec<Vec<bool>>> {
    let devs = (0..count)
        .map(|i| cu::device::get(i as i32).map_err(errors::driver))
        .collect::<Result<Vec<_>>>()?;
    let mut m = vec![vec![false; count]; count];
    for (i, &a) in devs.iter().enumerate() {
        for (j, &b) in devs.iter().enumerate() {
            let mut can = 0;
            // SAFETY: both handles come from cuDeviceGet; the call only queries the topology.
            let r = unsafe { sys::cuDeviceCanAccessPeer(&mut can, a, b) };
            m[i][j] = i == j || (r == sys::CUresult::CUDA_SUCCESS && can == 1);
        }
    }
    Ok(m)
}

/// The NCCL version (`"2.28.9"`) where libnccl loads.
pub(crate) fn nccl_version() -> Option<String> {
    if !super::nccl::available() {
        return None;
    }
    let mut v = 0;
    // SAFETY: the library is present (checked above); writes one int.
    let r = unsafe { cudarc::nccl::sys::ncclGetVersion(&mut v) };
    if r != cudarc::nccl::sys::ncclResult_t::ncclSuccess {
        return None;
    }
    // NCCL >= 2.9 encodes major * 10000 + minor * 100 + patch.
    Some(format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100))
}
