//! Loading tensors from bytes: one tensor from little-endian bytes of a [`DType`], and every
//! tensor of a safetensors file, each kept in its own dtype (an f16 weight takes two bytes an
//! element on the device).

use crate::device::Device;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

impl Device {
    /// A tensor of `shape` and `dtype` from its little-endian elements (any alignment, as a
    /// file or network buffer hands them out), stored as they are: f16 and bf16 data takes two
    /// bytes an element on the device. The byte count must be `shape`'s elements times the
    /// dtype's size.
    pub fn tensor_from_bytes(&self, bytes: &[u8], dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let n = self.check_output_of("tensor_from_bytes", shape, dtype)?;
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
        self.tensor_words(&crate::dtype::pack(bytes), shape, dtype)
    }

    /// Every tensor of a safetensors file (`bytes` is the whole file), by name, in the order of
    /// their data in the file. f32, f16, bf16, i32 and u32 tensors load in their own dtype as
    /// [`Device::tensor_from_bytes`] does; any other dtype, and a truncated or malformed file,
    /// is an error naming the tensor or the problem.
    pub fn load_safetensors(&self, bytes: &[u8]) -> Result<Vec<(String, Tensor)>> {
        self.load_safetensors_with(bytes, |_| true)
    }

    /// The tensors of a safetensors file whose names `keep` accepts, as
    /// [`Device::load_safetensors`] loads them; the others are neither read nor checked (a
    /// model file's int64 position ids, say).
    pub fn load_safetensors_with(
        &self,
        bytes: &[u8],
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<(String, Tensor)>> {
        use safetensors::tensor::{Dtype, SafeTensors};
        let file = SafeTensors::deserialize(bytes).map_err(|e| Error::InvalidArgument {
            op: "load_safetensors",
            reason: format!("not a valid safetensors file: {e}"),
        })?;
        let mut views = file.tensors();
        views.retain(|(name, _)| keep(name));
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
