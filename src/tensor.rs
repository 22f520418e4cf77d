//! `Tensor`: data that lives on one device, with a shape and an element type.
//!
//! Ops on tensors enqueue work and return a new tensor at once; [`Tensor::read`] is the only
//! call that waits. Cloning a tensor is cheap (it shares the device buffer). When the last clone
//! is dropped, the buffer goes back to the device's pool for reuse.

use std::fmt;
use std::sync::Arc;

use crate::backend::Storage;
use crate::device::Device;
use crate::error::{Error, Result};

/// An element type. Every tensor is stored as [`DType::F32`] on every backend today; the other
/// types are formats data can be loaded from ([`Device::tensor_from_bytes`],
/// [`Device::load_safetensors`]), converted exactly to f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 16-bit IEEE float (half).
    F16,
    /// bfloat16: the upper 16 bits of an f32.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 32-bit unsigned integer.
    U32,
}

impl DType {
    /// Every dtype.
    pub const ALL: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U32];

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The lowercase name (`"f32"`, `"bf16"`, ...), as JS and JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }
}

impl std::str::FromStr for DType {
    type Err = Error;

    /// Parses a name of [`DType::name`].
    fn from_str(s: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| Error::InvalidArgument {
                op: "dtype",
                reason: format!("unknown dtype {s:?} (known: f32, f16, bf16, i32, u32)"),
            })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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
        Tensor {
            device,
            storage: Arc::new(storage),
            shape,
            dtype: DType::F32,
        }
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

    /// Copies the data back to the host. This is the one call that waits for the device:
    /// everything enqueued before it is submitted, and the result is mapped once.
    pub async fn read(&self) -> Result<Vec<f32>> {
        self.device.check_lost()?;
        let read = self.device.backend().read(&self.storage, self.len()).await;
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
        let data = self.read().await?;
        device.tensor(&data, &self.shape)
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
