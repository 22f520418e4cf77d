//! What a device is: its backend, adapter, limits and features, as `Device::info()` reports them.

use serde::Serialize;
use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A compute backend gpukit can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// NVIDIA CUDA through the driver, NVRTC and cuBLAS (native only; the `cuda` feature, on by
    /// default).
    Cuda,
    /// Vulkan through wgpu (Linux, Windows, Android; Mesa lavapipe without a GPU).
    Vulkan,
    /// Metal through wgpu (macOS, iOS).
    Metal,
    /// Direct3D 12 through wgpu (Windows).
    Dx12,
    /// OpenGL / GLES through wgpu, where it has compute shaders (GL 4.3 / GLES 3.1).
    Gl,
    /// The browser's WebGPU (wasm32 only).
    WebGpu,
    /// gpukit's own CPU backend: always available.
    Cpu,
}

impl Backend {
    /// Every backend, in the order automatic selection considers them.
    pub const ALL: [Backend; 7] = [
        Backend::Cuda,
        Backend::Vulkan,
        Backend::Metal,
        Backend::Dx12,
        Backend::Gl,
        Backend::WebGpu,
        Backend::Cpu,
    ];

    /// The lowercase name used by `GPUKIT_BACKEND` and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Cuda => "cuda",
            Backend::Vulkan => "vulkan",
            Backend::Metal => "metal",
            Backend::Dx12 => "dx12",
            Backend::Gl => "gl",
            Backend::WebGpu => "webgpu",
            Backend::Cpu => "cpu",
        }
    }

    /// Whether this backend runs through wgpu.
    pub fn is_wgpu(self) -> bool {
        matches!(
            self,
            Backend::Vulkan | Backend::Metal | Backend::Dx12 | Backend::Gl | Backend::WebGpu
        )
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// Parses `vulkan`, `metal`, `dx12`, `gl`, `webgpu`, `cuda` or `cpu` (any case).
    fn from_str(s: &str) -> Result<Self> {
        let lower = s.trim().to_ascii_lowercase();
        Backend::ALL
            .into_iter()
            .find(|b| b.name() == lower)
            .ok_or(Error::UnknownBackend {
                name: s.to_string(),
            })
    }
}

/// What kind of hardware an adapter is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceType {
    /// A GPU on its own card.
    Discrete,
    /// A GPU sharing the CPU's memory.
    Integrated,
    /// A virtualised GPU.
    Virtual,
    /// A software implementation on the CPU (lavapipe, SwiftShader, WARP) or gpukit's CPU backend.
    Cpu,
    /// Not reported.
    Other,
}

impl fmt::Display for DeviceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceType::Discrete => "discrete GPU",
            DeviceType::Integrated => "integrated GPU",
            DeviceType::Virtual => "virtual GPU",
            DeviceType::Cpu => "CPU",
            DeviceType::Other => "other",
        })
    }
}

/// The device limits that decide what fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeviceLimits {
    /// Largest storage-buffer binding in bytes: a tensor an op reads in one piece.
    pub max_storage_binding: u64,
    /// Largest buffer in bytes: the largest tensor.
    pub max_buffer: u64,
    /// Workgroup (shared) memory per workgroup in bytes.
    pub workgroup_storage: u32,
    /// Invocations (threads) per workgroup.
    pub invocations_per_workgroup: u32,
    /// Workgroups per dispatch dimension.
    pub workgroups_per_dimension: u32,
}

/// Optional features the device has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct DeviceFeatures {
    /// 16-bit floats in shaders.
    pub shader_f16: bool,
    /// Subgroup (warp / wave) operations.
    pub subgroups: bool,
    /// GPU timestamp queries (for profiling).
    pub timestamp_query: bool,
    /// Matrix multiply-accumulate units (tensor cores) that `Precision::F16` matmuls use:
    /// cooperative matrices on wgpu (native only, NVIDIA over Vulkan), tensor cores on CUDA.
    pub cooperative_matrix: bool,
}

/// Everything `Device::info()` says about a device.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceInfo {
    /// The backend that runs the ops.
    pub backend: Backend,
    /// The adapter's name (for the CPU backend, the processor).
    pub adapter: String,
    /// The vendor, by name where the PCI id is known (`"nvidia"`), else the id in hex.
    pub vendor: String,
    /// Discrete, integrated, virtual, CPU.
    pub device_type: DeviceType,
    /// True for software adapters (lavapipe/llvmpipe, SwiftShader, WARP) and the CPU backend:
    /// these are often much slower than a real GPU.
    pub software: bool,
    /// The driver's name and version, where reported.
    pub driver: String,
    /// The limits that matter.
    pub limits: DeviceLimits,
    /// Optional features.
    pub features: DeviceFeatures,
    /// Device memory in bytes, where the platform reports it (wgpu does not; the CPU backend
    /// reports system memory on Linux).
    pub memory_bytes: Option<u64>,
    /// Why this device was chosen (automatic ranking, `GPUKIT_BACKEND`, explicit, fallback).
    pub selection: String,
    /// When automatic selection found only a software adapter: what it measured on the adapter
    /// and the CPU backend, and the sizes from which the adapter is faster (see
    /// [`DispatchPolicy`](crate::DispatchPolicy)). `None` otherwise.
    pub policy: Option<crate::policy::DispatchPolicy>,
    /// The full CUDA device query, on the CUDA backend; `None` elsewhere.
    pub cuda: Option<CudaProperties>,
}

/// What the CUDA driver reports about one device (`gpukit devices` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CudaProperties {
    /// The device's index among the CUDA devices of this machine.
    pub ordinal: usize,
    /// Compute capability (major, minor): 9.0 is Hopper.
    pub compute_capability: (u32, u32),
    /// The driver's CUDA version, e.g. (13, 0).
    pub driver_version: (u32, u32),
    /// Device memory in bytes.
    pub total_memory: u64,
    /// Free device memory in bytes when the device was queried.
    pub free_memory: u64,
    /// Streaming multiprocessors.
    pub multiprocessors: u32,
    /// Shared memory per block in bytes (the default; `shared_memory_per_block_optin` with opt-in).
    pub shared_memory_per_block: u32,
    /// Shared memory a kernel may opt in to per block, in bytes.
    pub shared_memory_per_block_optin: u32,
    /// 32-bit registers per block.
    pub registers_per_block: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Threads per block.
    pub max_threads_per_block: u32,
    /// Largest grid, in blocks per dimension (x, y, z).
    pub max_grid: [u32; 3],
    /// Peak SM clock in kHz.
    pub clock_khz: u32,
    /// Peak memory clock in kHz.
    pub memory_clock_khz: u32,
    /// Memory bus width in bits.
    pub memory_bus_bits: u32,
    /// L2 cache in bytes.
    pub l2_bytes: u32,
    /// Whether ECC is on.
    pub ecc: bool,
    /// Whether the device shares one address space with the host.
    pub unified_addressing: bool,
    /// Whether kernels may run concurrently.
    pub concurrent_kernels: bool,
    /// PCI bus, device and domain ids.
    pub pci: (u32, u32, u32),
}

impl CudaProperties {
    /// Theoretical memory bandwidth in bytes per second (double data rate).
    pub fn peak_bandwidth(&self) -> f64 {
        2.0 * self.memory_clock_khz as f64 * 1e3 * self.memory_bus_bits as f64 / 8.0
    }
}

/// Names a PCI vendor id.
pub(crate) fn vendor_name(id: u32) -> String {
    match id {
        0x10de => "nvidia".into(),
        0x1002 | 0x1022 => "amd".into(),
        0x8086 => "intel".into(),
        0x106b => "apple".into(),
        0x13b5 => "arm".into(),
        0x5143 => "qualcomm".into(),
        0x1414 => "microsoft".into(),
        0x10005 => "mesa".into(),
        0 => "unknown".into(),
        other => format!("0x{other:04x}"),
    }
}

/// Whether an adapter name belongs to a known software rasteriser.
pub(crate) fn is_software_name(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    [
        "llvmpipe",
        "lavapipe",
        "softpipe",
        "swiftshader",
        "warp",
        "basic render",
    ]
    .iter()
    .any(|s| n.contains(s))
}
