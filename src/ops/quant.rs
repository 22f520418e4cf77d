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
use crate::ops::rope::RopeLayout;
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;

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

impl Tensor {
    /// `self x w^T` with `w` quantized `[n, k]` (a linear layer's weight): `self` is `[.., k]`,
    /// the result `[.., n]`. The weights are dequantised inside the kernel.
    pub fn matmul_quant(&self, w: &QuantTensor) -> Result<Tensor> {
        self.matmul_quant_with(w, QuantMatmulOptions::default())
    }

    /// `residual + self x w^T` with `w` quantized `[n, k]`: a projection and the residual
    /// connection around it (a transformer's attention output and down projection) in one
    /// kernel where the backend has one (the GEMV of a few rows on wgpu and CUDA; elsewhere
    /// the product, then an add). `residual` has the result's shape, `[.., n]`.
    pub fn matmul_quant_add(&self, w: &QuantTensor, residual: &Tensor) -> Result<Tensor> {
        let options = QuantMatmulOptions {
            residual: Some(residual),
            ..Default::default()
        };
        self.matmul_quant_with(w, options)
    }

    /// [`Tensor::matmul_quant`] with the input normalised first and a residual added after
    /// (see [`QuantMatmulOptions`]): `residual + rms_norm(self, weight, eps) x w^T`, one
    /// kernel for the few-row product on wgpu and CUDA.
    pub fn matmul_quant_with(
        &self,
        w: &QuantTensor,
        options: QuantMatmulOptions<'_>,
    ) -> Result<Tensor> {
        let op = "matmul_quant";
        if options.swiglu && options.rms_norm.is_some() {
            return Err(Error::InvalidArgument {
                op,
                reason: "swiglu and rms_norm cannot be asked together".into(),
            });
        }
        if !self.device().same(&w.device) {
            return Err(Error::DeviceMismatch { op });
        }
        for t in options
            .residual
            .into_iter()
            .chain(options.rms_norm.map(|n| n.0))
            .chain(options.rope.into_iter().flat_map(|r| [r.0, r.1]))
        {
            self.same_device(t, op)?;
        }
        if let Some(out) = Tensor::promoted(op, &[self], |t| t[0].matmul_quant_with(w, options))? {
            return Ok(out);
        }
        let Some((&k, lead)) = self.shape().split_last() else {
            return Err(Error::InvalidArgument {
                op,
                reason: "a tensor of shape [] has no last axis".into(),
            });
        };
        let glu = usize::from(options.swiglu) + 1;
        if k != w.cols * glu {
            return Err(Error::shape(
                op,
                self.shape(),
                &w.shape(),
                "(the last axis must equal the weight's cols, twice them with swiglu)",
            ));
        }
        let m: usize = lead.iter().product();
        let mut shape = lead.to_vec();
        shape.push(w.rows);
        if let Some(r) = options.residual {
            if r.shape() != shape.as_slice() {
                return Err(Error::shape(
                    op,
                    r.shape(),
                    &shape,
                    "(the residual has the product's shape)",
                ));
            }
        }
        if let Some((nw, eps)) = options.rms_norm {
            if nw.len() != k {
                return Err(Error::shape(
                    op,
                    nw.shape(),
                    &[k],
                    "(the norm's weight has one value per column of the input)",
                ));
            }
            if !(eps.is_finite() && eps >= 0.0) {
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!("eps must be finite and >= 0, got {eps}"),
                });
            }
        }
        let rope_dim = match options.rope {
            Some((cos, sin, layout)) => Some(rope_dim(cos, sin, layout, m, w.rows)?),
            None => None,
        };
        if let (Some((cos, sin, RopeLayout::HalfSplit)), Some(dim)) = (options.rope, rope_dim) {
            // Pairs half a row apart: no kernel rotates them as they are written, so the
            // product, then the rotation, then the add.
            let product = self.matmul_quant_with(
                w,
                QuantMatmulOptions {
                    rope: None,
                    residual: None,
                    ..options
                },
            )?;
            let rows = product.len() / dim;
            let rotated = product
                .reshape(&[rows, dim])?
                .rope(cos, sin, RopeLayout::HalfSplit)?;
            let rotated = rotated.reshape(&shape)?;
            return match options.residual {
                Some(r) => r.add(&rotated),
                None => Ok(rotated),
            };
        }
        // The kernels take row-major f32 residuals, norm weights and tables; others are
        // converted.
        let residual = options.residual.map(|t| t.floats(op)).transpose()?;
        let tables = options
            .rope
            .map(|(c, s, _)| Ok::<_, Error>((c.floats(op)?, s.floats(op)?)))
            .transpose()?;
        let norm = options
            .rms_norm
            .map(|(t, eps)| t.floats(op).map(|t| (t, eps)))
            .transpose()?;
        self.device().check_output(op, &shape)?;
        let spec = QuantMatmulSpec {
            m,
            weight: w.spec(),
            residual: residual.is_some(),
            rms_norm: norm.as_ref().map(|n| n.1),
            swiglu: options.swiglu,
            rope: rope_dim,
        };
        let around = QuantAround {
            residual: residual.as_ref().map(Tensor::storage),
            norm: norm.as_ref().map(|n| n.0.storage()),
            rope: tables.as_ref().map(|t| (t.0.storage(), t.1.storage())),
        };
        let storage =
            self.device()
                .op(&spec)
                .matmul_quant(self.storage(), &w.storages(), &around, spec)?;
        Ok(self.with_storage(storage, shape))
    }
}

/// Options of [`Tensor::matmul_quant_with`]: what a transformer does around a projection,
/// done inside the product's kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuantMatmulOptions<'a> {
    /// Normalises each row of the input first, as `rms_norm(Some(weight), None, eps)` does:
    /// `(weight, eps)`, the weight one value per input column.
    pub rms_norm: Option<(&'a Tensor, f32)>,
    /// Added to the product (the result's shape): a residual connection.
    pub residual: Option<&'a Tensor>,
    /// The input holds two halves, gate then up, of the weight's cols each (`[.., 2 * cols]`),
    /// and the product reads `silu(gate) * up` (see [`Tensor::swiglu`]): a LLaMA MLP's down
    /// projection with its activation. Not with `rms_norm`.
    pub swiglu: bool,
    /// Rotates the product as [`Tensor::rope`] rotates `[rows, dim]` data: `(cos, sin,
    /// layout)`, the tables `[rows, dim / 2]` where `dim` is twice their last axis, `rows` is
    /// the product's element count over `dim`, and the weight's rows are a multiple of `dim`
    /// (each output row whole RoPE rows: a LLaMA's fused query, key and value projection,
    /// with a table row per head). Rotated before `residual` is added. The few-row product
    /// on wgpu and CUDA rotates [`RopeLayout::Interleaved`] pairs in its kernel.
    pub rope: Option<(&'a Tensor, &'a Tensor, RopeLayout)>,
}

/// The optional operands of a quantized product (see [`QuantMatmulSpec`]), as a backend
/// receives them: the residual, the norm's weight and the rope tables (cos, sin).
pub(crate) struct QuantAround<'a, S> {
    pub residual: Option<&'a S>,
    pub norm: Option<&'a S>,
    pub rope: Option<(&'a S, &'a S)>,
}

impl<S> Clone for QuantAround<'_, S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for QuantAround<'_, S> {}

impl<'a, S> QuantAround<'a, S> {
    /// Each operand through `f`, in [`QuantAround::all`]'s order.
    pub(crate) fn try_map<T>(
        &self,
        mut f: impl FnMut(&'a S) -> Result<&'a T>,
    ) -> Result<QuantAround<'a, T>> {
        let residual = self.residual.map(&mut f).transpose()?;
        let norm = self.norm.map(&mut f).transpose()?;
        let rope = match self.rope {
            Some((c, s)) => Some((f(c)?, f(s)?)),
            None => None,
        };
        Ok(QuantAround {
            residual,
            norm,
            rope,
        })
    }

    /// The operands present: residual, norm, cos, sin.
    pub(crate) fn all(&self) -> impl Iterator<Item = &'a S> {
        let rope = self.rope.into_iter().flat_map(|(c, s)| [c, s]);
        self.residual.into_iter().chain(self.norm).chain(rope)
    }
}

/// The RoPE row length of [`QuantMatmulOptions::rope`]'s tables for a product of `m` rows by
/// `n` columns, once their shapes are checked.
fn rope_dim(cos: &Tensor, sin: &Tensor, layout: RopeLayout, m: usize, n: usize) -> Result<usize> {
    let op = "matmul_quant";
    let half = match cos.shape() {
        [_, half] if *half > 0 => *half,
        other => {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("rope tables are [rows, dim / 2], got {other:?} ({layout:?})"),
            })
        }
    };
    let dim = 2 * half;
    if !n.is_multiple_of(dim) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!(
                "rope rows of {dim} values must tile the product's rows of {n} (the weight's rows)"
            ),
        });
    }
    let rows = crate::shape::mul(op, m, n / dim)?;
    for t in [cos, sin] {
        if t.shape() != [rows, half] {
            return Err(Error::shape(
                op,
                t.shape(),
                &[rows, half],
                "(rope tables have a row per rope row of the product)",
            ));
        }
    }
    Ok(dim)
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

/// `x [m, cols] x w^T` with `w` the quantized `[rows, cols]` matrix of `weight`: `[m, rows]`,
/// plus a residual `[m, rows]` when `residual`, of x's rows RMS-normalised first (with this
/// eps and a weight of `cols` values) when `rms_norm`, of `silu(gate) * up` when `swiglu` (x
/// is then `[m, 2 * cols]`, gate then up); their storages travel beside the weight's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QuantMatmulSpec {
    pub m: usize,
    pub weight: QuantSpec,
    pub residual: bool,
    pub rms_norm: Option<f32>,
    pub swiglu: bool,
    /// The product is rotated as interleaved RoPE rows of this many values, by cos and sin
    /// tables `[m * n / dim, dim / 2]` (see [`QuantMatmulOptions::rope`]).
    pub rope: Option<usize>,
}

impl OpSpec for QuantMatmulSpec {
    fn name(&self) -> &'static str {
        match (self.rms_norm.is_some(), self.residual) {
            (false, false) => "matmul_quant",
            (false, true) => "matmul_quant_add",
            (true, _) => "matmul_quant_with",
        }
    }

    fn work(&self) -> Work {
        let w = self.weight;
        Work::Flops(2.0 * self.m as f64 * w.rows as f64 * w.cols as f64)
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
