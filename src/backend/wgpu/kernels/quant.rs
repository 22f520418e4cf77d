//! Quantized weights: the quantized GEMV for a few rows, dequantization, and for prompts a
//! dequantized copy through the tiled matmul.

use super::super::{WgpuBackend, WgpuStorage};
use super::matmul::GEMV_MAX_ROWS;
use super::{u32_of, whole, Kernel, WG};
use crate::error::Result;
use crate::ops::matmul::{MatmulDims, MatmulSpec, Precision};
use crate::ops::norm::NormSpec;
use crate::ops::quant::{QuantParts, BLOCK};

/// What the product does around the GEMV: a residual added, x RMS-normalised (weight and
/// eps) or read as SwiGLU halves, the result rotated as interleaved RoPE rows (cos, sin, row
/// length) (see `QuantMatmulSpec`).
#[derive(Clone, Copy, Default)]
pub(super) struct Around<'a> {
    pub residual: Option<&'a WgpuStorage>,
    pub norm: Option<(&'a WgpuStorage, f32)>,
    pub swiglu: bool,
    pub rope: Option<(&'a WgpuStorage, &'a WgpuStorage, usize)>,
}

/// quant.wgsl's parameters.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QuantParams {
    m: u32,
    n: u32,
    k: u32,
    eps_bits: u32,
    rope_dim: u32,
    _pad: [u32; 3],
}

impl WgpuBackend {
    pub(super) fn encode_matmul_quant(
        &self,
        x: &WgpuStorage,
        w: QuantParts<'_, WgpuStorage>,
        around: Around<'_>,
        m: usize,
    ) -> Result<WgpuStorage> {
        let Around {
            residual,
            norm,
            swiglu,
            rope,
        } = around;
        let weights = (w.rows * w.cols) as u64;
        let gemv = !(m as u64 > GEMV_MAX_ROWS && weights > 0 && self.shared.fits_binding(weights));
        if swiglu && (!gemv || w.cols == 0) {
            // A prompt (or empty rows): the SwiGLU's own kernel first, then the product.
            let spec = crate::ops::elementwise::swiglu_spec(m, w.cols);
            let x = self.encode_strided(x, Some(x), &spec)?;
            let around = Around {
                swiglu: false,
                ..around
            };
            return self.encode_matmul_quant(&x, w, around, m);
        }
        if let Some((nw, eps)) = norm.filter(|_| !gemv || w.cols == 0) {
            // A prompt (or empty rows): the norm's own kernel first, then the product.
            let spec = NormSpec {
                rms: true,
                rows: m,
                cols: w.cols,
                eps,
            };
            let x = self.encode_norm(x, Some(nw), None, spec)?;
            let around = Around {
                norm: None,
                ..around
            };
            return self.encode_matmul_quant(&x, w, around, m);
        }
        if let Some((cos, sin, dim)) = rope.filter(|_| !gemv || residual.is_some()) {
            // A prompt, or a residual too (the kernel has no binding left for it): the
            // product, then the rotation, then the add.
            let plain = Around {
                residual: None,
                rope: None,
                ..around
            };
            let n = m * w.rows;
            let product = self.encode_matmul_quant(x, w, plain, m)?;
            let rotated = self.encode_rope(
                &product,
                cos,
                sin,
                [n, n / dim, dim],
                crate::RopeLayout::Interleaved,
            )?;
            return match residual {
                Some(r) => self.encode_binary(
                    crate::ops::elementwise::BinaryOp::Add,
                    (&rotated, n),
                    (r, n),
                    n,
                ),
                None => Ok(rotated),
            };
        }
        if !gemv {
            // Many rows (a prompt): dequantise once and run the tiled matmul, x w^T, instead
            // of reading every weight once per row. The f32 copy lives until the product is
            // recorded; its buffer goes back to the pool after the submit. A copy larger than
            // one binding allows (128 MiB in browsers) stays on the per-row kernel.
            let (n, k) = (w.rows, w.cols);
            let weights = self.encode_dequantize(w)?;
            let spec = MatmulSpec {
                dims: MatmulDims {
                    batch: 1,
                    m,
                    k,
                    n,
                    a_stride: 0,
                    b_stride: 0,
                },
                transpose_a: false,
                transpose_b: true,
                activation: None,
                precision: Precision::F32,
                tile: None,
                storage: crate::DType::F32,
                weight: crate::DType::F32,
            };
            let out = self.encode_matmul(x, &weights, None, spec)?;
            return match residual {
                // A prompt's product is bound by its arithmetic: the add is one more pass.
                Some(r) => self.encode_binary(
                    crate::ops::elementwise::BinaryOp::Add,
                    (&out, m * n),
                    (r, m * n),
                    m * n,
                ),
                None => Ok(out),
            };
        }
        let (m, n) = (m as u64, w.rows as u64);
        self.quant_kernel(Some(x), w, around, m * n, m)
    }

    pub(super) fn encode_dequantize(&self, w: QuantParts<'_, WgpuStorage>) -> Result<WgpuStorage> {
        let n = (w.rows * w.cols) as u64;
        self.quant_kernel(None, w, Around::default(), n, 0)
    }

    /// Runs quant.wgsl: the matmul when `x` is given (`m` rows, with what `around` asks),
    /// else the dequantisation.
    fn quant_kernel(
        &self,
        x: Option<&WgpuStorage>,
        w: QuantParts<'_, WgpuStorage>,
        around: Around<'_>,
        out_len: u64,
        m: u64,
    ) -> Result<WgpuStorage> {
        let Around {
            residual,
            norm,
            swiglu,
            rope,
        } = around;
        let s = self.begin()?;
        let (n, k) = (w.rows as u64, w.cols as u64);
        let blocks = n * k / BLOCK as u64;
        let (scales, words) = (w.scales.buffer()?, w.words.buffer()?);
        let mins = w.mins.map(WgpuStorage::buffer).transpose()?;
        let xb = x.map(WgpuStorage::buffer).transpose()?;
        let rb = residual.map(WgpuStorage::buffer).transpose()?;
        let nb = norm.map(|(t, _)| t.buffer()).transpose()?;
        let (cb, sb) = match rope {
            Some((c, s, _)) => (Some(c.buffer()?), Some(s.buffer()?)),
            None => (None, None),
        };
        let mut st = s.state();
        let out = s.alloc(&mut st, out_len * 4)?;
        if out_len == 0 {
            return Ok(s.storage(out));
        }
        let words_len = blocks * w.format.words_per_block() as u64;
        for (what, len) in [
            ("quantized scales", blocks),
            ("quantized words", words_len),
            ("the output", out_len),
            ("the input", m * k * (1 + u64::from(swiglu))),
        ] {
            s.check_binding(what, len)?;
        }
        let p = QuantParams {
            m: u32_of(m, "rows")?,
            n: u32_of(n, "weight rows")?,
            k: u32_of(k, "weight cols")?,
            // The norm's eps, as bits.
            eps_bits: norm.map_or(0, |(_, eps)| eps.to_bits()),
            rope_dim: u32_of(rope.map_or(0, |r| r.2) as u64, "rope rows")?,
            _pad: [0; 3],
        };
        // The tables' length: half a value per output.
        let table = (out_len / 2).max(1);
        // Absent x (dequantise), mins (Q4_0, Q8_0), residual, norm or tables: the shader
        // never reads them; scales stand in. The rotation's cos shares the residual's binding
        // (the caller never asks both of the kernel).
        let binds = [
            xb.map_or(whole(scales, blocks), |x| {
                whole(x, (m * k * (1 + u64::from(swiglu))).max(1))
            }),
            whole(scales, blocks),
            mins.map_or(whole(scales, blocks), |b| whole(b, blocks)),
            whole(words, words_len),
            match (rb, cb) {
                (Some(r), _) => whole(r, out_len),
                (None, Some(c)) => whole(c, table),
                (None, None) => whole(scales, blocks),
            },
            nb.map_or(whole(scales, blocks), |b| whole(b, k.max(1))),
            sb.map_or(whole(scales, blocks), |b| whole(b, table)),
            whole(&out, out_len),
        ];
        let kernel = Kernel::QMatmul {
            format: w.format,
            dequant: x.is_none(),
            residual: rb.is_some(),
            norm: nb.is_some(),
            swiglu,
            rope: cb.is_some(),
        };
        let groups = if x.is_some() {
            m * n.div_ceil(8)
        } else {
            out_len.div_ceil(WG)
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, groups)?;
        Ok(s.storage(out))
    }
}
