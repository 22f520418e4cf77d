//! Quantized weights in GGUF block layouts (Q8_0, Q4_0, Q4_1) and the matmul that dequantises
//! them inside the kernel.
//!
//! A [`QuantTensor`] is a `[rows, cols]` matrix quantized in blocks of 32 along `cols`, as GGUF
//! stores a linear layer's weight (`[out, in]`). On upload each block is unpacked once into
//! aligned arrays, f32 scales (and mins for Q4_1) and quants packed in u32 words in element
//! order, so kernels read whole words instead of 18-, 20- or 34-byte records.

use std::sync::Arc;

use crate::backend::Storage;
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;

mod matmul;

pub use matmul::QuantMatmulOptions;
pub(crate) use matmul::{QuantAround, QuantMatmulSpec};

/// Elements per quantization block.
pub const BLOCK: usize = 32;

/// A GGUF block format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum QuantFormat {
    /// f16 scale `d` and 32 signed bytes: `x = d * q`.
    Q8_0 = 0,
    /// f16 scale `d` and 32 nibbles: `x = d * (q - 8)`.
    Q4_0 = 1,
    /// f16 scale `d`, f16 min `m` and 32 nibbles: `x = d * q + m`.
    Q4_1 = 2,
}

impl QuantFormat {
    /// Bytes of one block in the GGUF file.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q8_0 => 34,
            QuantFormat::Q4_0 => 18,
            QuantFormat::Q4_1 => 20,
        }
    }

    /// u32 words of quants per block after unpacking.
    pub(crate) fn words_per_block(self) -> usize {
        match self {
            QuantFormat::Q8_0 => 8,
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => 4,
        }
    }
}

/// Unpacked blocks: scales, mins (Q4_1) and quants in element order.
pub(crate) struct Unpacked {
    pub scales: Vec<f32>,
    pub mins: Option<Vec<f32>>,
    pub words: Vec<u32>,
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Splits GGUF block bytes into aligned arrays. Nibble blocks hold elements 0..16 in the low
/// nibbles and 16..32 in the high nibbles; words hold element `e` at nibble (or byte) `e % 8`
/// (or `e % 4`) of word `e / 8` (or `e / 4`).
pub(crate) fn unpack(bytes: &[u8], format: QuantFormat) -> Unpacked {
    let blocks = bytes.len() / format.block_bytes();
    let mut scales = Vec::with_capacity(blocks);
    let mut mins = (format == QuantFormat::Q4_1).then(|| Vec::with_capacity(blocks));
    let mut words = Vec::with_capacity(blocks * format.words_per_block());
    for b in bytes.chunks_exact(format.block_bytes()) {
        scales.push(f16_at(b, 0));
        match format {
            QuantFormat::Q8_0 => {
                words.extend(
                    b[2..34]
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                );
            }
            QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                let qs = if format == QuantFormat::Q4_1 {
                    &b[4..20]
                } else {
                    &b[2..18]
                };
                if let Some(m) = mins.as_mut() {
                    m.push(f16_at(b, 2));
                }
                let nib = |e: usize| {
                    u32::from(if e < 16 {
                        qs[e] & 0x0f
                    } else {
                        qs[e - 16] >> 4
                    })
                };
                words.extend(
                    (0..4).map(|w| (0..8).fold(0u32, |acc, i| acc | nib(w * 8 + i) << (4 * i))),
                );
            }
        }
    }
    Unpacked {
        scales,
        mins,
        words,
    }
}

/// Element `e` (of one row) from unpacked arrays, one at a time: the unit tests' plain
/// decoding of what `unpack` wrote.
#[cfg(test)]
pub(crate) fn dequant(
    format: QuantFormat,
    scales: &[f32],
    mins: Option<&[f32]>,
    words: &[u32],
    e: usize,
) -> f32 {
    let b = e / BLOCK;
    let j = e % BLOCK;
    let d = scales[b];
    match format {
        QuantFormat::Q8_0 => {
            let byte = (words[b * 8 + j / 4] >> (8 * (j % 4))) as u8 as i8;
            d * f32::from(byte)
        }
        QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
            let q = ((words[b * 4 + j / 8] >> (4 * (j % 8))) & 0xf) as f32;
            match mins {
                Some(m) => d * q + m[b],
                None => d * (q - 8.0),
            }
        }
    }
}

/// A quantized `[rows, cols]` matrix on a device.
pub struct QuantTensor {
    pub(crate) device: Device,
    pub(crate) format: QuantFormat,
    pub(crate) rows: usize,
    pub(crate) cols: usize,
    // Shared, so that a row gather reads them as tensors (`QuantTensor::embedding_ids`).
    pub(crate) scales: Arc<Storage>,
    pub(crate) mins: Option<Arc<Storage>>,
    pub(crate) words: Arc<Storage>,
}

impl std::fmt::Debug for QuantTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuantTensor")
            .field("format", &self.format)
            .field("shape", &self.shape())
            .field("backend", &self.device.info().backend)
            .finish()
    }
}

impl QuantTensor {
    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// The block format.
    pub fn format(&self) -> QuantFormat {
        self.format
    }

    /// Rows `ids` (u32 or i32, any shape) of the f32 matrix these blocks encode, `[ids..,
    /// cols]`, dequantised on the device: an embedding table kept quantized (and shared with
    /// an output projection tied to it), read a few rows at a time. Recordable in a batch, so
    /// a compiled graph takes new ids.
    pub fn embedding_ids(&self, ids: &Tensor) -> Result<Tensor> {
        if !self.device.same(ids.device()) {
            return Err(Error::DeviceMismatch { op: "embedding" });
        }
        ids.expect_integer("embedding", "ids")?;
        let n = ids.len();
        let blocks = self.cols / BLOCK;
        let part = |s: &Arc<Storage>, width: usize| {
            let table = Tensor::shared(self.device.clone(), s.clone(), vec![self.rows, width]);
            table.embedding_ids(&ids.reshape(&[n])?)
        };
        let wpr = crate::shape::mul("embedding", blocks, self.format.words_per_block())?;
        let (scales, words) = (part(&self.scales, blocks)?, part(&self.words, wpr)?);
        let mins = self.mins.as_ref().map(|m| part(m, blocks)).transpose()?;
        let rows = QuantTensor {
            device: self.device.clone(),
            format: self.format,
            rows: n,
            cols: self.cols,
            scales: scales.storage_arc(),
            mins: mins.map(|m| m.storage_arc()),
            words: words.storage_arc(),
        };
        let mut shape = ids.shape().to_vec();
        shape.push(self.cols);
        rows.dequantize()?.reshape(&shape)
    }

    /// The f32 matrix these blocks encode, `[rows, cols]`.
    pub fn dequantize(&self) -> Result<Tensor> {
        self.device
            .check_output("dequantize", &[self.rows, self.cols])?;
        let spec = self.spec();
        let storage = self.device.op(&spec).dequantize(&self.storages(), spec)?;
        Ok(Tensor::new(
            self.device.clone(),
            storage,
            vec![self.rows, self.cols],
        ))
    }

    /// The format and sizes, as backends receive them.
    pub(crate) fn spec(&self) -> QuantSpec {
        QuantSpec {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            has_mins: self.mins.is_some(),
        }
    }

    /// `[scales, words]` or `[scales, words, mins]`, the order [`QuantSpec::parts`] reads.
    pub(crate) fn storages(&self) -> Vec<&Storage> {
        let mut v = vec![&*self.scales, &*self.words];
        v.extend(self.mins.as_deref());
        v
    }
}

/// A quantized matrix's storages, as a backend receives them.
pub(crate) struct QuantParts<'a, S> {
    pub format: QuantFormat,
    pub rows: usize,
    pub cols: usize,
    pub scales: &'a S,
    pub mins: Option<&'a S>,
    pub words: &'a S,
}

impl Device {
    /// Uploads a `[rows, cols]` matrix of GGUF blocks (`cols` a multiple of 32, blocks along
    /// `cols`, rows one after another, as in a GGUF tensor's data).
    pub fn quantized(
        &self,
        bytes: &[u8],
        format: QuantFormat,
        rows: usize,
        cols: usize,
    ) -> Result<QuantTensor> {
        if !cols.is_multiple_of(BLOCK) {
            return Err(Error::InvalidArgument {
                op: "quantized",
                reason: format!("cols ({cols}) must be a multiple of the block size {BLOCK}"),
            });
        }
        // The shape must be a valid tensor shape (its f32 form exists when dequantized).
        crate::shape::numel("quantized", &[rows, cols])?;
        let blocks = crate::shape::mul("quantized", rows, cols / BLOCK)?;
        let expected = crate::shape::mul("quantized", blocks, format.block_bytes())?;
        if bytes.len() != expected {
            return Err(Error::InvalidArgument {
                op: "quantized",
                reason: format!(
                    "{format:?} [{rows}, {cols}] needs {expected} bytes, got {}",
                    bytes.len()
                ),
            });
        }
        let u = unpack(bytes, format);
        let backend = self.backend();
        let words: Vec<f32> = u.words.iter().map(|&w| f32::from_bits(w)).collect();
        Ok(QuantTensor {
            device: self.clone(),
            format,
            rows,
            cols,
            scales: Arc::new(backend.upload(&u.scales)?),
            mins: u
                .mins
                .as_deref()
                .map(|m| backend.upload(m))
                .transpose()?
                .map(Arc::new),
            // The words travel as f32 bit patterns: uploads and copies keep bits unchanged.
            words: Arc::new(backend.upload(&words)?),
        })
    }
}

/// Used by CUDA's quantized matmul, which dequantizes through the backend's own op.
#[cfg(cuda)]
impl<'a, S> QuantParts<'a, S> {
    /// The format and sizes, without the storages.
    pub(crate) fn spec(&self) -> QuantSpec {
        QuantSpec {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            has_mins: self.mins.is_some(),
        }
    }

    /// The storages in [`QuantSpec::parts`] order.
    pub(crate) fn storages(&self) -> Vec<&'a S> {
        let mut v = vec![self.scales, self.words];
        v.extend(self.mins);
        v
    }
}

/// A quantized `[rows, cols]` matrix's format and sizes; its storages travel beside it as
/// `[scales, words]` or `[scales, words, mins]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuantSpec {
    pub format: QuantFormat,
    pub rows: usize,
    pub cols: usize,
    pub has_mins: bool,
}

impl QuantSpec {
    /// The parts from one backend's storages, in [`QuantTensor::storages`] order.
    pub(crate) fn parts<'a, S>(self, s: &[&'a S]) -> Result<QuantParts<'a, S>> {
        let (scales, words) = match s {
            [scales, words, ..] => (*scales, *words),
            _ => return Err(parts_mismatch()),
        };
        let mins = match (self.has_mins, s.get(2)) {
            (true, Some(m)) => Some(*m),
            (false, None) => None,
            _ => return Err(parts_mismatch()),
        };
        Ok(QuantParts {
            format: self.format,
            rows: self.rows,
            cols: self.cols,
            scales,
            mins,
            words,
        })
    }
}

fn parts_mismatch() -> Error {
    Error::InvalidArgument {
        op: "quantized weight",
        reason: "internal error: the storages do not match the format".into(),
    }
}

impl OpSpec for QuantSpec {
    fn name(&self) -> &'static str {
        "dequantize"
    }

    fn work(&self) -> Work {
        Work::elements(self.rows * self.cols, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpacks_each_format() {
        // Q4_0: d = 2, low nibbles 0..15 then high nibbles 15..0.
        let mut b = half::f16::from_f32(2.0).to_le_bytes().to_vec();
        b.extend((0..16u8).map(|i| i | (15 - i) << 4));
        let u = unpack(&b, QuantFormat::Q4_0);
        let vals: Vec<f32> = (0..32)
            .map(|e| dequant(QuantFormat::Q4_0, &u.scales, None, &u.words, e))
            .collect();
        let want: Vec<f32> = (0..16)
            .map(|i| 2.0 * (i as f32 - 8.0))
            .chain((0..16).map(|i| 2.0 * (7.0 - i as f32)))
            .collect();
        assert_eq!(vals, want);
        // Q8_0: d = 0.5, bytes -16..16.
        let mut b = half::f16::from_f32(0.5).to_le_bytes().to_vec();
        b.extend((-16i8..16).map(|q| q as u8));
        let u = unpack(&b, QuantFormat::Q8_0);
        let vals: Vec<f32> = (0..32)
            .map(|e| dequant(QuantFormat::Q8_0, &u.scales, None, &u.words, e))
            .collect();
        assert_eq!(vals, (-16..16).map(|q| 0.5 * q as f32).collect::<Vec<_>>());
        // Q4_1: d = 1, m = -3.
        let mut b = half::f16::from_f32(1.0).to_le_bytes().to_vec();
        b.extend(half::f16::from_f32(-3.0).to_le_bytes());
        b.extend([0x21u8; 16]);
        let u = unpack(&b, QuantFormat::Q4_1);
        let mins = u.mins.as_deref();
        assert_eq!(
            dequant(QuantFormat::Q4_1, &u.scales, mins, &u.words, 0),
            -2.0
        );
        assert_eq!(
            dequant(QuantFormat::Q4_1, &u.scales, mins, &u.words, 16),
            -1.0
        );
    }
}
