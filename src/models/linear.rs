//! A llama model's weights as they go to the device: a linear layer's weight kept quantized
//! (dequantised inside the matmul) or dense, and several GGUF tensors fused into one.

use crate::dtype::DType;
use crate::error::Result;
use crate::models::gguf::{Gguf, TensorType};
use crate::models::llama::invalid;
use crate::ops::MatmulOptions;
use crate::{Device, QuantTensor, Tensor};
use crate::{QuantFormat, QuantMatmulOptions};

/// A linear layer's weight, `[out, in]` (shared with recorded decode steps).
#[derive(Clone)]
pub(crate) enum Linear {
    Quant(std::sync::Arc<QuantTensor>),
    Dense(Tensor),
}

impl Linear {
    /// `x w^T` with what `options` asks around it (the norm before, SwiGLU inputs, the
    /// residual after, and the many-row product's precision): one kernel for a quantized
    /// weight's few-row product, the same steps one op each for a dense weight.
    pub(crate) fn apply(&self, x: &Tensor, options: QuantMatmulOptions<&Tensor>) -> Result<Tensor> {
        let w = match self {
            Linear::Quant(w) => return x.matmul_quant_with(w, options),
            Linear::Dense(w) => w,
        };
        if options.rope.is_some() {
            return Err(invalid("a dense linear layer does not rotate its product"));
        }
        let gated;
        let x = if options.swiglu {
            gated = x.swiglu()?;
            &gated
        } else {
            x
        };
        let normed;
        let x = match options.rms_norm {
            Some((norm, eps)) => {
                normed = x.rms_norm(Some(norm), None, eps)?;
                &normed
            }
            None => x,
        };
        let product = x.matmul_with(
            w,
            MatmulOptions {
                transpose_b: true,
                precision: options.precision,
                ..Default::default()
            },
        )?;
        match options.residual {
            Some(r) => r.add(&product),
            None => Ok(product),
        }
    }

    /// Bytes the weight holds on the device.
    pub(crate) fn device_bytes(kind: TensorType, n: usize) -> usize {
        match kind {
            TensorType::F32 => n * 4,
            TensorType::F16 => n * 2,
            // f32 scales (and mins) per block of 32, and the quants in words.
            TensorType::Quant(QuantFormat::Q8_0) => n / 32 * (4 + 32),
            TensorType::Quant(QuantFormat::Q4_0) => n / 32 * (4 + 16),
            TensorType::Quant(QuantFormat::Q4_1) => n / 32 * (8 + 16),
        }
    }
}

/// The weights `parts` (name, rows), each `[rows, cols]`, as one linear layer whose rows are
/// theirs in order: their bytes joined when they share a type (a block format's rows are whole
/// blocks), else each dequantised to f32 on the host first.
pub(crate) fn fused(
    device: &Device,
    g: &Gguf<'_>,
    parts: &[(&str, usize)],
    cols: usize,
) -> Result<Linear> {
    let mut tensors = Vec::with_capacity(parts.len());
    for &(name, rows) in parts {
        let (t, data) = g.tensor(name)?;
        if t.dims != [cols, rows] {
            return Err(invalid(format!(
                "{name} is {:?}, expected [{cols}, {rows}] (GGUF order)",
                t.dims
            )));
        }
        tensors.push((t.kind, rows, data));
    }
    let rows: usize = parts.iter().map(|p| p.1).sum();
    let kind = tensors[0].0;
    if tensors.iter().all(|t| t.0 == kind) {
        let bytes: Vec<u8> = tensors.iter().flat_map(|t| t.2.iter().copied()).collect();
        return Ok(match kind {
            TensorType::Quant(q) => Linear::Quant(std::sync::Arc::new(
                device.quantized(&bytes, q, rows, cols)?,
            )),
            TensorType::F32 => {
                Linear::Dense(device.tensor_from_bytes(&bytes, DType::F32, &[rows, cols])?)
            }
            TensorType::F16 => {
                Linear::Dense(device.tensor_from_bytes(&bytes, DType::F16, &[rows, cols])?)
            }
        });
    }
    let mut values = Vec::with_capacity(rows * cols);
    for &(kind, n, data) in &tensors {
        let table = HostTable {
            kind,
            bytes: data.to_vec(),
            dim: cols,
        };
        for r in 0..n {
            table.row(r as u32, &mut values)?;
        }
    }
    Ok(Linear::Dense(device.tensor(&values, &[rows, cols])?))
}

/// The host copy of the embedding table, in its file format.
struct HostTable {
    kind: TensorType,
    bytes: Vec<u8>,
    dim: usize,
}

impl HostTable {
    /// Row `id`, dequantised, appended to `out`.
    fn row(&self, id: u32, out: &mut Vec<f32>) -> Result<()> {
        let row_bytes = match self.kind {
            TensorType::F32 => self.dim * 4,
            TensorType::F16 => self.dim * 2,
            TensorType::Quant(q) => self.dim / 32 * q.block_bytes(),
        };
        let at = (id as usize)
            .checked_mul(row_bytes)
            .filter(|&at| at + row_bytes <= self.bytes.len())
            .ok_or_else(|| invalid(format!("token id {id} is outside the vocabulary")))?;
        let row = &self.bytes[at..at + row_bytes];
        let f16 = |b: &[u8]| half::f16::from_le_bytes([b[0], b[1]]).to_f32();
        match self.kind {
            TensorType::F32 => out.extend(
                row.chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            ),
            TensorType::F16 => out.extend(row.chunks_exact(2).map(f16)),
            TensorType::Quant(q) => {
                for b in row.chunks_exact(q.block_bytes()) {
                    let d = f16(b);
                    match q {
                        QuantFormat::Q8_0 => out.extend(b[2..].iter().map(|&x| d * x as i8 as f32)),
                        QuantFormat::Q4_0 | QuantFormat::Q4_1 => {
                            let (m, qs) = if q == QuantFormat::Q4_1 {
                                (f16(&b[2..]), &b[4..20])
                            } else {
                                (-8.0 * d, &b[2..18])
                            };
                            out.extend(qs.iter().map(|&x| d * (x & 15) as f32 + m));
                            out.extend(qs.iter().map(|&x| d * (x >> 4) as f32 + m));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
