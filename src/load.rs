//! Loading tensors from bytes: one tensor from little-endian bytes of a [`DType`], and every
//! tensor of a safetensors file. Data is converted exactly to f32 (the storage of every backend
//! today); integers beyond 2^24, which f32 cannot hold exactly, are refused.

use crate::device::Device;
use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The largest integer every integer below it f32 holds exactly.
const F32_EXACT_INT: u32 = 1 << 24;

/// `bytes` (little-endian elements of `dtype`, any alignment) as f32 values; `op` names the
/// caller in errors.
fn to_f32(op: &'static str, bytes: &[u8], dtype: DType) -> Result<Vec<f32>> {
    let size = dtype.size();
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "{} bytes is not a whole number of {dtype} elements ({size} bytes each)",
                bytes.len()
            ),
        });
    }
    let words = bytes.chunks_exact(size);
    let inexact = |i: usize, v: i64| Error::InvalidArgument {
        op,
        reason: format!(
            "{dtype} element {i} is {v}: beyond ±2^24 an f32 tensor cannot hold it exactly"
        ),
    };
    Ok(match dtype {
        DType::F32 => words
            .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect(),
        DType::F16 => words
            .map(|w| half::f16::from_le_bytes([w[0], w[1]]).to_f32())
            .collect(),
        DType::BF16 => words
            .map(|w| half::bf16::from_le_bytes([w[0], w[1]]).to_f32())
            .collect(),
        DType::I32 => words
            .enumerate()
            .map(|(i, w)| {
                let v = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                match v.unsigned_abs() <= F32_EXACT_INT {
                    true => Ok(v as f32),
                    false => Err(inexact(i, v.into())),
                }
            })
            .collect::<Result<_>>()?,
        DType::U32 => words
            .enumerate()
            .map(|(i, w)| {
                let v = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
                match v <= F32_EXACT_INT {
                    true => Ok(v as f32),
                    false => Err(inexact(i, v.into())),
                }
            })
            .collect::<Result<_>>()?,
    })
}

impl Device {
    /// A tensor of `shape` from little-endian elements of `dtype` (any alignment, as a file or
    /// network buffer hands them out), converted exactly to f32: f16 and bf16 widen, integers
    /// must lie within ±2^24. The byte count must be `shape`'s elements times the dtype's size.
    pub fn tensor_from_bytes(&self, bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let n = self.check_output("tensor_from_bytes", shape)?;
        let want = crate::shape::mul("tensor_from_bytes", n, dtype.size())?;
        if bytes.len() != want {
            return Err(Error::InvalidArgument {
                op: "tensor_from_bytes",
                reason: format!(
                    "{} bytes for {n} {dtype} elements of shape {shape:?} ({want} bytes)",
                    bytes.len()
                ),
            });
        }
        // Aligned f32 data on a little-endian host is uploaded without a host copy.
        if dtype == DType::F32 && cfg!(target_endian = "little") {
            if let Ok(values) = bytemuck::try_cast_slice::<u8, f32>(bytes) {
                return self.tensor(values, shape);
            }
        }
        self.tensor(&to_f32("tensor_from_bytes", bytes, dtype)?, shape)
    }

    /// Every tensor of a safetensors file (`bytes` is the whole file), by name, in the order of
    /// their data in the file. f32, f16, bf16, i32 and u32 tensors load as
    /// [`Device::tensor_from_bytes`] does; any other dtype, and a truncated or malformed file,
    /// is an error naming the tensor or the problem.
    pub fn load_safetensors(&self, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
        use safetensors::tensor::{Dtype, SafeTensors};
        let file = SafeTensors::deserialize(bytes).map_err(|e| Error::InvalidArgument {
            op: "load_safetensors",
            reason: format!("not a valid safetensors file: {e}"),
        })?;
        let mut views = file.tensors();
        // Data order: the order the file's writer chose (usually the model's).
        views.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
        views
            .into_iter()
            .map(|(name, view)| {
                let dtype = match view.dtype() {
                    Dtype::F32 => DType::F32,
                    Dtype::F16 => DType::F16,
                    Dtype::BF16 => DType::BF16,
                    Dtype::I32 => DType::I32,
                    Dtype::U32 => DType::U32,
                    other => {
                        return Err(Error::InvalidArgument {
                            op: "load_safetensors",
                            reason: format!(
                                "tensor {name:?} is {other:?}; supported: F32, F16, BF16, I32, U32"
                            ),
                        })
                    }
                };
                let t = self
                    .tensor_from_bytes(view.data(), dtype, view.shape())
                    .map_err(|e| match e {
                        Error::InvalidArgument { reason, .. } => Error::InvalidArgument {
                            op: "load_safetensors",
                            reason: format!("tensor {name:?}: {reason}"),
                        },
                        other => other,
                    })?;
                Ok((name, t))
            })
            .collect()
    }
}
