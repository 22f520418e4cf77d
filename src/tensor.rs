//! `Tensor`: data that lives on one device, with a shape and an element type.
//!
//! Ops on tensors enqueue work and return a new tensor at once; [`Tensor::read`] is the only
//! call that waits. Cloning a tensor is cheap (it shares the device buffer). When the last clone
//! is dropped, the buffer goes back to the device's pool for reuse.

use std::fmt;
use std::sync::Arc;

use crate::backend::Storage;
use crate::device::Device;
use crate::dtype::{self, DType, Element};
use crate::error::{Error, Result};

/// Device-resident data with a shape.
#[derive(Clone)]
pub struct Tensor {
    device: Device,
    storage: Arc<Storage>,
    shape: Vec<usize>,
    dtype: DType,
}

impl Tensor {
    pub(crate) fn new(device: Device, storage: Storage, shape: Vec<usize>) -> Tensor {
        Tensor::new_typed(device, storage, shape, DType::F32)
    }

    /// A tensor of `dtype` over `storage` (see [`crate::dtype`] for the layout).
    pub(crate) fn new_typed(
        device: Device,
        storage: Storage,
        shape: Vec<usize>,
        dtype: DType,
    ) -> Tensor {
        Tensor {
            device,
            storage: Arc::new(storage),
            shape,
            dtype,
        }
    }

    /// The 32-bit words that hold the elements (two per word for f16 and bf16).
    pub(crate) fn words(&self) -> usize {
        (self.len() * self.dtype.size()).div_ceil(4)
    }

    /// A new tensor on the same device (the result of an op).
    pub(crate) fn with_storage(&self, storage: Storage, shape: Vec<usize>) -> Tensor {
        Tensor::new(self.device.clone(), storage, shape)
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    pub(crate) fn same_device(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.device.same(&other.device) {
            Ok(())
        } else {
            Err(Error::DeviceMismatch { op })
        }
    }

    /// The device that holds the data.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The shape; `[]` for a scalar.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same data seen with another shape of the same number of elements (no copy).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if crate::shape::numel("reshape", shape)? != self.len() {
            return Err(Error::shape(
                "reshape",
                &self.shape,
                shape,
                "(reshape keeps the number of elements)",
            ));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    /// Copies the data back to the host as f32 values (exact for f16, bf16 and integers
    /// within ±2^24; [`Tensor::read_as`] reads any dtype exactly). This is the one call that
    /// waits for the device: everything enqueued before it is submitted, and the result is
    /// mapped once.
    pub async fn read(&self) -> Result<Vec<f32>> {
        let words = self.read_words().await?;
        Ok(match self.dtype {
            DType::F32 => words,
            other => dtype::to_f32(other, &words, self.len()),
        })
    }

    /// Copies the data back as elements of its own dtype: `read_as::<half::f16>()` for an f16
    /// tensor, `read_as::<u32>()` for indices. Asking for another type is an error (convert
    /// with [`Tensor::cast`] first).
    pub async fn read_as<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::InvalidArgument {
                op: "read_as",
                reason: format!(
                    "the tensor is {}, not {} (convert with `cast` first)",
                    self.dtype,
                    T::DTYPE
                ),
            });
        }
        let words = self.read_words().await?;
        Ok(dtype::to_elements(&words, self.len()))
    }

    /// Copies the data back as little-endian bytes of its dtype (`len() * dtype().size()`).
    pub async fn read_bytes(&self) -> Result<Vec<u8>> {
        let words = self.read_words().await?;
        Ok(dtype::unpack(&words, self.len() * self.dtype.size()))
    }

    /// The stored words, waiting for the device (see [`Tensor::read`]).
    async fn read_words(&self) -> Result<Vec<f32>> {
        self.device.check_lost()?;
        let read = self
            .device
            .backend()
            .read(&self.storage, self.words())
            .await;
        let data = self.device.note_loss(read)?;
        self.device.verify_pending().await?;
        Ok(data)
    }

    /// Reads a one-element tensor (a reduction's result) as a number.
    pub async fn read_scalar(&self) -> Result<f32> {
        if self.len() != 1 {
            return Err(Error::shape(
                "read_scalar",
                &self.shape,
                &[],
                "(read_scalar needs exactly one element)",
            ));
        }
        Ok(self.read().await?[0])
    }

    /// Copies this tensor to another device (through the host).
    pub async fn to_device(&self, device: &Device) -> Result<Tensor> {
        if self.device.same(device) {
            return Ok(self.clone());
        }
        let words = self.read_words().await?;
        device.tensor_words(&words, &self.shape, self.dtype)
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("backend", &self.device.info().backend)
            .finish()
    }
}
