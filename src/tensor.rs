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
    /// Where a view's elements lie in the storage it shares; `None` for row-major data.
    view: Option<Arc<View>>,
}

/// How a view's elements lie in the storage it shares with the tensor it was made from: the
/// element at coordinate `c` of the view's shape is element `offset + c . strides` of the
/// storage, which holds `base` elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct View {
    pub strides: Vec<usize>,
    pub offset: usize,
    pub base: usize,
}

impl Tensor {
    pub(crate) fn new(device: Device, storage: Storage, shape: Vec<usize>) -> Tensor {
        Tensor::new_typed(device, storage, shape, DType::F32)
    }

    /// An f32 tensor over storage another owner shares (a quantized weight's parts, which
    /// hold f32 scales and words as f32 bit patterns).
    pub(crate) fn shared(device: Device, storage: Arc<Storage>, shape: Vec<usize>) -> Tensor {
        Tensor {
            device,
            storage,
            shape,
            dtype: DType::F32,
            view: None,
        }
    }

    /// The storage, shared.
    pub(crate) fn storage_arc(&self) -> Arc<Storage> {
        self.storage.clone()
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
            view: None,
        }
    }

    /// Whether the elements lie in row-major order in their storage (not a view).
    pub fn is_contiguous(&self) -> bool {
        self.view.is_none()
    }

    /// Where the elements start in the storage, when they lie there in row-major order (a
    /// whole tensor, or a view such as a slice along the first axis of size above 1);
    /// `None` for a strided view. (The CUDA decode step's only user since `write_rows` reads
    /// strided rows through [`Tensor::row_layout`].)
    #[cfg_attr(not(all(feature = "models", cuda)), allow(dead_code))]
    pub(crate) fn dense_offset(&self) -> Option<usize> {
        let Some(v) = &self.view else {
            return Some(0);
        };
        let mut want = 1;
        for (&d, &s) in self.shape.iter().zip(&v.strides).rev() {
            if d != 1 && s != want {
                return None;
            }
            want *= d;
        }
        Some(v.offset)
    }

    /// Where the rows along `axis` start and how far apart they lie, in elements, where each
    /// row (the axes after `axis`) is dense and the axes before it have one index: `(offset,
    /// stride)`. `None` for other views.
    pub(crate) fn row_layout(&self, axis: usize) -> Option<(usize, usize)> {
        let width: usize = self.shape.get(axis + 1..)?.iter().product();
        let Some(v) = &self.view else {
            return Some((0, width));
        };
        if self.shape[..axis].iter().any(|&d| d != 1) {
            return None;
        }
        let mut want = 1;
        for (&d, &s) in self.shape[axis + 1..]
            .iter()
            .zip(&v.strides[axis + 1..])
            .rev()
        {
            if d != 1 && s != want {
                return None;
            }
            want *= d;
        }
        // A single row's stride is never used: call it dense.
        let stride = if self.shape[axis] == 1 {
            width
        } else {
            v.strides[axis]
        };
        Some((v.offset, stride))
    }

    /// The view's layout, for the ops that read strided data in place.
    pub(crate) fn view(&self) -> Option<&View> {
        self.view.as_deref()
    }

    /// The strides and offset of the elements in the storage: a view's, or row-major.
    pub(crate) fn layout(&self) -> (Vec<usize>, usize) {
        match &self.view {
            Some(v) => (v.strides.clone(), v.offset),
            None => (crate::ops::layout::strides(&self.shape), 0),
        }
    }

    /// A view of the same storage: `shape`, with the elements at `offset + c . strides`.
    pub(crate) fn with_view(
        &self,
        shape: Vec<usize>,
        strides: Vec<usize>,
        offset: usize,
    ) -> Tensor {
        let base = self.view.as_ref().map_or(self.len(), |v| v.base);
        Tensor {
            shape,
            view: Some(Arc::new(View {
                strides,
                offset,
                base,
            })),
            ..self.clone()
        }
    }

    /// The storage a view reads, as a row-major tensor of all its elements (the tensor itself
    /// when it is not a view).
    pub(crate) fn base(&self) -> Tensor {
        match &self.view {
            Some(v) => Tensor {
                shape: vec![v.base],
                view: None,
                ..self.clone()
            },
            None => self.clone(),
        }
    }

    /// The same values in row-major order: a view is copied out (one strided copy on the
    /// device); a tensor that is not a view is returned as it is.
    pub fn contiguous(&self) -> Result<Tensor> {
        let Some(v) = &self.view else {
            return Ok(self.clone());
        };
        let base = self.base();
        let spec = crate::ops::layout::CopySpec {
            shape: self.shape.clone(),
            src_strides: v.strides.clone(),
            src_offset: v.offset,
            out_strides: crate::ops::layout::strides(&self.shape),
            out_offset: 0,
        };
        base.copies(&[(&base, spec)], self.shape.clone())
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

    /// `concat([self, rows], axis)` where every axis before `axis` has size 1 (so the new rows
    /// go at the end of the data). On the CPU backend, when this tensor is row-major f32 and
    /// nothing else shares its buffer, the buffer grows in place (amortised: `Vec` doubles
    /// its capacity), so appending a step to a KV cache costs the step, not the cache.
    /// Elsewhere it is `concat`.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn append_rows(mut self, rows: &Tensor, axis: usize) -> Result<Tensor> {
        let fits = self.shape.len() == rows.shape.len()
            && axis < self.shape.len()
            && self.shape[..axis].iter().all(|&d| d == 1)
            && rows.shape[..axis] == self.shape[..axis]
            && self.shape[axis + 1..] == rows.shape[axis + 1..]
            && self.dtype == DType::F32
            && rows.dtype == DType::F32
            && self.view.is_none()
            && rows.view.is_none()
            && self.device.same(&rows.device);
        if fits {
            if let (Storage::Cpu(new), Some(Storage::Cpu(own))) =
                (rows.storage.as_ref(), Arc::get_mut(&mut self.storage))
            {
                let mut shape = self.shape.clone();
                shape[axis] = crate::shape::add("concat", shape[axis], rows.shape[axis])?;
                self.device.check_output("concat", &shape)?;
                own.extend(new.data());
                self.shape = shape;
                return Ok(self);
            }
        }
        Tensor::concat(&[&self, rows], axis)
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

    /// The same data seen with another shape of the same number of elements (no copy, but a
    /// view is made contiguous first).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if !self.is_contiguous() {
            return self.contiguous()?.reshape(shape);
        }
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
    pub(crate) async fn read_words(&self) -> Result<Vec<f32>> {
        if !self.is_contiguous() {
            return Box::pin(self.contiguous()?.read_words()).await;
        }
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
