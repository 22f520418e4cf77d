//! # gpukit
//!
//! GPU compute that is browser-first and has the same API natively. An async core compiles
//! WGSL compute pipelines through [wgpu] (WebGPU in the browser; Vulkan, Metal, DX12 and GL
//! natively), with blocking twins on native and a CPU backend that runs every op when no GPU
//! is usable.
//!
//! ```no_run
//! # async fn demo() -> gpukit::Result<()> {
//! use gpukit::Device;
//!
//! let device = Device::new().await?;              // best adapter, or the CPU with a warning
//! let x = device.tensor(&[1.0, -2.0, 3.0, -4.0], &[2, 2])?;
//! let y = x.relu()?.scale(2.0)?.softmax()?;      // enqueued: nothing waits yet
//! let values = y.read().await?;                   // the one wait: submit, map, copy
//! # Ok(()) }
//! ```
//!
//! Design:
//! - Ops enqueue and return at once; only device creation, [`Tensor::read`] and
//!   [`Device::synchronize`] wait. Natively each has a `*_blocking` twin (not on wasm32).
//! - Tensors stay on their device; chained ops never go through the host. Pipelines are cached
//!   under typed keys, buffers pooled by size class, and ops are recorded into one compute pass
//!   until something waits.
//! - `device.info()` says which backend and adapter run and whether it is a software adapter;
//!   a warning is logged once when work falls back to software or the CPU.
//! - Bad input is an [`Error`], never a panic.

// In the browser wgpu's WebGPU handles are neither Send nor Sync, so Arc<..> holding them could
// be Rc there; one Arc-based code path for both targets is simpler than two, and costs nothing
// measurable on a single-threaded target.
#![cfg_attr(web, allow(clippy::arc_with_non_send_sync))]
#![warn(missing_docs)]

mod backend;
pub mod batch;
pub mod bench_cpu;
#[cfg(native)]
pub mod blocking;
mod cache;
mod device;
mod discover;
mod dtype;
mod error;
mod future;
mod group;
mod info;
mod load;
mod loss;
#[cfg(feature = "models")]
pub mod models;
pub mod ops;
mod policy;
#[cfg(native)]
mod process;
mod profile;
#[cfg(native)]
mod rendezvous;

mod shape;
mod slice;
mod small_sort;
mod stats;
mod tensor;
pub mod verify;
#[cfg(web)]
mod web;

pub use batch::{Batch, BatchMatmul, BatchResult, Graph, Value};
pub use device::Device;
pub use discover::{
    cuda_topology, discover, recommended, BackendReport, CudaTopology, FoundDevice,
};
pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use group::DeviceGroup;
/// The half-precision host types of [`DType::F16`] and [`DType::BF16`] (the `half` crate).
pub use half::{bf16, f16};
pub use info::{Backend, CudaProperties, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
pub use ops::quant::{QuantFormat, QuantMatmulOptions, QuantTensor};
pub use ops::{
    Activation, AttentionLayout, AttentionOptions, BinaryOp, CompareOp, Conv2dOptions,
    MatmulOptions, MatmulTile, Pool2dOptions, Precision, ReduceOp, RopeLayout, UnaryOp,
};
pub use policy::{Costs, DispatchPolicy, OpClass};
#[cfg(native)]
pub use process::ProcessGroup;
pub use profile::{OpProfile, Profiler};
pub use stats::{MemoryStats, TuneRecord};
pub use tensor::Tensor;
pub use verify::{VerifiedOp, VerifyReport};

/// The WGSL sources of every kernel, by file name (for validation and inspection).
pub fn shader_sources() -> Vec<(&'static str, &'static str)> {
    backend::wgpu::pipelines::Shader::ALL
        .iter()
        .map(|s| (s.file(), s.source()))
        .collect()
}
