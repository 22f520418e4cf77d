//! Blocking twins of every call that waits, for native programs without an async runtime.
//! They do not exist on wasm32, where blocking the main thread is impossible.
//!
//! ```no_run
//! let device = gpukit::Device::new_blocking()?;
//! let x = device.tensor(&[1.0, -2.0, 3.0], &[3])?;
//! assert_eq!(x.relu()?.read_blocking()?, vec![1.0, 0.0, 3.0]);
//! # Ok::<(), gpukit::Error>(())
//! ```

use crate::batch::{Batch, BatchResult, Graph, Value};
use crate::discover::BackendReport;
use crate::error::Result;
use crate::future::block_on;
use crate::info::Backend;
use crate::ops::{BinaryOp, Precision, UnaryOp};
use crate::{Device, Tensor, TuneRecord};

impl Device {
    /// Blocking [`Device::new`].
    pub fn new_blocking() -> Result<Device> {
        block_on(Device::new())
    }
    /// Blocking [`Device::gpu`].
    pub fn gpu_blocking() -> Result<Device> {
        block_on(Device::gpu())
    }
    /// Blocking [`Device::with_backend`].
    pub fn with_backend_blocking(backend: Backend) -> Result<Device> {
        block_on(Device::with_backend(backend))
    }
    /// Blocking [`Device::with_backend_at`].
    pub fn with_backend_at_blocking(backend: Backend, index: usize) -> Result<Device> {
        block_on(Device::with_backend_at(backend, index))
    }
    /// Blocking [`Device::synchronize`].
    pub fn synchronize_blocking(&self) -> Result<()> {
        block_on(self.synchronize())
    }

    /// Blocking [`Device::tune_matmul`].
    pub fn tune_matmul_blocking(
        &self,
        m: usize,
        k: usize,
        n: usize,
        precision: Precision,
    ) -> Result<Option<TuneRecord>> {
        block_on(self.tune_matmul(m, k, n, precision))
    }
    /// Blocking [`Device::unary_slice`].
    pub fn unary_slice_blocking(&self, op: UnaryOp, input: &[f32], out: &mut [f32]) -> Result<()> {
        block_on(self.unary_slice(op, input, out))
    }
    /// Blocking [`Device::binary_slice`].
    pub fn binary_slice_blocking(
        &self,
        op: BinaryOp,
        a: &[f32],
        b: &[f32],
        out: &mut [f32],
    ) -> Result<()> {
        block_on(self.binary_slice(op, a, b, out))
    }
    /// Blocking [`Device::softmax_slice`].
    pub fn softmax_slice_blocking(&self, input: &[f32], out: &mut [f32]) -> Result<()> {
        block_on(self.softmax_slice(input, out))
    }
    /// Blocking [`Device::sum_slice`].
    pub fn sum_slice_blocking(&self, input: &[f32]) -> Result<f32> {
        block_on(self.sum_slice(input))
    }
}

impl Tensor {
    /// Blocking [`Tensor::to`].
    pub fn to_blocking(&self, device: &Device) -> Result<Tensor> {
        block_on(self.to(device))
    }
    /// Blocking [`Tensor::read`].
    pub fn read_blocking(&self) -> Result<Vec<f32>> {
        block_on(self.read())
    }
    /// Blocking [`Tensor::read_as`].
    pub fn read_as_blocking<T: crate::Element>(&self) -> Result<Vec<T>> {
        block_on(self.read_as())
    }
    /// Blocking [`Tensor::read_bytes`].
    pub fn read_bytes_blocking(&self) -> Result<Vec<u8>> {
        block_on(self.read_bytes())
    }
    /// Blocking [`Tensor::read_scalar`].
    pub fn read_scalar_blocking(&self) -> Result<f32> {
        block_on(self.read_scalar())
    }
    /// Blocking [`Tensor::to_device`].
    pub fn to_device_blocking(&self, device: &Device) -> Result<Tensor> {
        block_on(self.to_device(device))
    }
}

/// Blocking [`crate::discover`].
pub fn discover_blocking() -> Vec<BackendReport> {
    block_on(crate::discover())
}

impl Batch {
    /// Blocking [`Batch::run`].
    pub fn run_blocking(&self) -> Result<BatchResult> {
        block_on(self.run())
    }
}

impl Graph {
    /// Blocking [`Graph::run`].
    pub fn run_blocking(&mut self, inputs: &[(Value, &[f32])]) -> Result<BatchResult> {
        block_on(self.run(inputs))
    }
}

impl crate::DeviceGroup {
    /// Blocking [`DeviceGroup::cuda_all`](crate::DeviceGroup::cuda_all).
    pub fn cuda_all_blocking() -> Result<crate::DeviceGroup> {
        block_on(crate::DeviceGroup::cuda_all())
    }
    /// Blocking [`DeviceGroup::all_reduce`](crate::DeviceGroup::all_reduce).
    pub fn all_reduce_blocking(
        &self,
        tensors: &[Tensor],
        op: crate::ReduceOp,
    ) -> Result<Vec<Tensor>> {
        block_on(self.all_reduce(tensors, op))
    }
    /// Blocking [`DeviceGroup::broadcast`](crate::DeviceGroup::broadcast).
    pub fn broadcast_blocking(&self, tensors: &[Tensor], root: usize) -> Result<Vec<Tensor>> {
        block_on(self.broadcast(tensors, root))
    }
    /// Blocking [`DeviceGroup::all_gather`](crate::DeviceGroup::all_gather).
    pub fn all_gather_blocking(&self, tensors: &[Tensor]) -> Result<Vec<Tensor>> {
        block_on(self.all_gather(tensors))
    }
    /// Blocking [`DeviceGroup::data_parallel`](crate::DeviceGroup::data_parallel).
    pub fn data_parallel_blocking(
        &self,
        x: &Tensor,
        f: impl Fn(usize, &Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        block_on(self.data_parallel(x, f))
    }
    /// Blocking [`DeviceGroup::reduce_scatter`](crate::DeviceGroup::reduce_scatter).
    pub fn reduce_scatter_blocking(
        &self,
        tensors: &[Tensor],
        op: crate::ReduceOp,
    ) -> Result<Vec<Tensor>> {
        block_on(self.reduce_scatter(tensors, op))
    }
}

impl crate::ProcessGroup {
    /// Blocking [`ProcessGroup::from_env`](crate::ProcessGroup::from_env).
    pub fn from_env_blocking() -> Result<crate::ProcessGroup> {
        block_on(crate::ProcessGroup::from_env())
    }
}
