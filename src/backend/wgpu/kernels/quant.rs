//! Quantized weights: the quantized GEMV for a few rows, dequantization, and for prompts a
//! dequantized copy through the tiled matmul.

use super::super::pipelines::Arith;
use super::super::{WgpuBackend, WgpuStorage};
use super::matmul::GEMV_MAX_ROWS;
use super::{u32_of, whole, Kernel, WG};
use crate::backend::BackendOps;
use crate::error::{Error, Result};
use crate::ops::matmul::{MatmulDims, MatmulSpec};
use crate::ops::norm::NormSpec;
use crate::ops::quant::{QuantAround, QuantMatmulSpec, QuantParts, BLOCK};

/// quant.wgsl's parameters.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct QuantParams {
    m: u32,
    n: u32,
    k: u32,
    eps_bits: u32,
    rope_dim: u32,
    /// The dequantisation writes `[k, n]`.
    transposed: u32,
    /// quant_cached.wgsl: the first column stored in the cache, and the cache's rows.
    cache_from: u32,
    capacity: u32,
}

impl WgpuBackend {
    /// `x w^T` with what `around` and `spec` ask around it: inside the GEMV for a few rows
    /// (the norm, SwiGLU, RoPE or the residual; RoPE and the residual together share a
    /// binding, so the add runs apart), as kernels of their own around the tiled product of
    /// a prompt.
    pub(super) fn encode_matmul_quant(
        &self,
        x: &WgpuStorage,
        w: QuantParts<'_, WgpuStorage>,
        around: &QuantAround<'_, WgpuStorage>,
        spec: QuantMatmulSpec,
    ) -> Result<WgpuStorage> {
        let m = spec.m;
        let weights = (w.rows * w.cols) as u64;
        let gemv = !(m as u64 > GEMV_MAX_ROWS && weights > 0 && self.shared.fits_binding(weights));
        if spec.swiglu && (!gemv || w.cols == 0) {
            // A prompt (or empty rows): the SwiGLU's own kernel first, then the product.
            let gated = crate::ops::elementwise::swiglu_spec(m, w.cols);
            let x = self.encode_strided(x, Some(x), &gated)?;
            let spec = QuantMatmulSpec {
                swiglu: false,
                ..spec
            };
            return self.encode_matmul_quant(&x, w, around, spec);
        }
        if let (Some(nw), Some(eps), true) = (around.norm, spec.rms_norm, !gemv || w.cols == 0) {
            // A prompt (or empty rows): the norm's own kernel first, then the product.
            let norm = NormSpec {
                rms: true,
                rows: m,
                cols: w.cols,
                eps,
            };
            let x = self.encode_norm(x, Some(nw), None, norm)?;
            let around = QuantAround {
                norm: None,
                ..*around
            };
            let spec = QuantMatmulSpec {
                rms_norm: None,
                ..spec
            };
            return self.encode_matmul_quant(&x, w, &around, spec);
        }
        let both = around.rope.is_some() && around.residual.is_some();
        if (!gemv && (around.residual.is_some() || around.rope.is_some())) || both {
            // A prompt's product is bound by its arithmetic: the rotation and the add are more
            // passes (and the GEMV has no binding for the residual beside the tables).
            let plain = QuantAround {
                residual: None,
                rope: None,
                ..*around
            };
            let out = self.encode_matmul_quant(x, w, &plain, spec)?;
            return self.quant_rope_and_add(out, around, spec);
        }
        if !gemv {
            // Many rows (a prompt): dequantise once and run the tiled matmul, x w^T, in the
            // asked precision (f16 on cooperative matrices where the adapter has them),
            // instead of reading every weight once per row. The f32 copy lives until the product is
            // recorded; its buffer goes back to the pool after the submit. A copy larger than
            // one binding allows (128 MiB in browsers) stays on the per-row kernel.
            let (n, k) = (w.rows, w.cols);
            // Cooperative matrices load B as vec4 rows only untransposed: the weights are
            // dequantised as [k, n] for them (same cost as [n, k]).
            let coop = Arith::of(
                spec.precision,
                self.shared.shader_f16,
                self.shared.coop_matrix,
            ) == Arith::F16Coop;
            let transposed = coop && n % 4 == 0 && k % 4 == 0;
            let weights = self.quant_kernel(w, None, transposed, None)?;
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
                transpose_b: !transposed,
                activation: None,
                precision: spec.precision,
                tile: None,
                storage: crate::DType::F32,
                weight: crate::DType::F32,
            };
            return self.encode_matmul(x, &weights, None, spec);
        }
        self.quant_kernel(w, Some((x, around, spec)), false, None)
    }

    /// Whether [`WgpuBackend::encode_matmul_quant_cached`] runs `spec` as one kernel: natively
    /// (the browser package leaves quant_cached.wgsl out), one row, no residual or SwiGLU, and
    /// an adapter that binds ten storage buffers to a kernel.
    #[cfg(feature = "models")]
    pub(crate) fn caches_in_gemv(&self, spec: &QuantMatmulSpec) -> bool {
        cfg!(native)
            && spec.m == 1
            && !spec.residual
            && !spec.swiglu
            && spec.weight.cols > 0
            && self.shared.limits.max_storage_buffers_per_shader_stage >= 10
    }

    /// The one-row GEMV of [`WgpuBackend::encode_matmul_quant`] (norm and interleaved RoPE
    /// as asked) that also stores columns `target.from..` of its product as row `at[0]` of
    /// the cache (quant_cached.wgsl), for specs [`WgpuBackend::caches_in_gemv`] takes.
    #[cfg(feature = "models")]
    pub(crate) fn encode_matmul_quant_cached(
        &self,
        x: &WgpuStorage,
        w: QuantParts<'_, WgpuStorage>,
        around: &QuantAround<'_, WgpuStorage>,
        spec: QuantMatmulSpec,
        target: QuantCache<'_>,
    ) -> Result<WgpuStorage> {
        self.quant_kernel(w, Some((x, around, spec)), false, Some(target))
    }

    pub(super) fn encode_dequantize(&self, w: QuantParts<'_, WgpuStorage>) -> Result<WgpuStorage> {
        self.quant_kernel(w, None, false, None)
    }

    /// Runs quant.wgsl: the GEMV of `product`'s x (its rows, with what its operands and spec
    /// ask) when given, else the dequantisation, as `[k, n]` when `transposed`; with a
    /// `cache`, quant_cached.wgsl's GEMV storing the product's last columns there too.
    fn quant_kernel(
        &self,
        w: QuantParts<'_, WgpuStorage>,
        product: Option<(&WgpuStorage, &QuantAround<'_, WgpuStorage>, QuantMatmulSpec)>,
        transposed: bool,
        cache: Option<QuantCache<'_>>,
    ) -> Result<WgpuStorage> {
        let none = QuantAround {
            residual: None,
            norm: None,
            rope: None,
        };
        let (x, around, m, eps, swiglu, rope_dim) = match product {
            Some((x, a, s)) => (Some(x), a, s.m as u64, s.rms_norm, s.swiglu, s.rope),
            None => (None, &none, 0, None, false, None),
        };
        let out_len = match product {
            Some(_) => m * w.rows as u64,
            None => (w.rows * w.cols) as u64,
        };
        let s = self.begin()?;
        let (n, k) = (w.rows as u64, w.cols as u64);
        let blocks = n * k / BLOCK as u64;
        let (scales, words) = (w.scales.buffer()?, w.words.buffer()?);
        let mins = w.mins.map(WgpuStorage::buffer).transpose()?;
        let xb = x.map(WgpuStorage::buffer).transpose()?;
        let rb = around.residual.map(WgpuStorage::buffer).transpose()?;
        let nb = around.norm.map(WgpuStorage::buffer).transpose()?;
        let (cb, sb) = match around.rope {
            Some((c, s)) => (Some(c.buffer()?), Some(s.buffer()?)),
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
        // The cache's words: `capacity` rows of n - from values, f32 or two halves a word. (The
        // browser build has no cached kernel: there the code below folds away.)
        let cache = if cfg!(native) { cache } else { None };
        let cached = match &cache {
            Some(c) => {
                let width = n.checked_sub(c.from).ok_or(Error::InvalidArgument {
                    op: "matmul_quant",
                    reason: "the cached columns start past the product's".into(),
                })?;
                let per_word = if c.kv == 0 { 1 } else { 2 };
                if m != 1 || (per_word == 2 && (width % 2 != 0 || c.from % 2 != 0)) {
                    return Err(Error::InvalidArgument {
                        op: "matmul_quant",
                        reason: "a cached product is one row; halves need even columns".into(),
                    });
                }
                let words = c
                    .capacity
                    .checked_mul(width)
                    .ok_or(Error::InvalidArgument {
                        op: "matmul_quant",
                        reason: "the KV cache's size overflows".into(),
                    })?
                    / per_word;
                s.check_binding("the KV cache", words)?;
                Some((c, words))
            }
            None => None,
        };
        let p = QuantParams {
            m: u32_of(m, "rows")?,
            n: u32_of(n, "weight rows")?,
            k: u32_of(k, "weight cols")?,
            // The norm's eps, as bits.
            eps_bits: eps.map_or(0, f32::to_bits),
            rope_dim: u32_of(rope_dim.unwrap_or(0) as u64, "rope rows")?,
            transposed: u32::from(transposed),
            cache_from: u32_of(cache.as_ref().map_or(0, |c| c.from), "the cached columns")?,
            capacity: u32_of(cache.as_ref().map_or(0, |c| c.capacity), "the cache's rows")?,
        };
        // The tables' length: half a value per output.
        let table = (out_len / 2).max(1);
        // Absent x (dequantise), mins (Q4_0, Q8_0), residual, norm or tables: the shader
        // never reads them; scales stand in. The rotation's cos shares the residual's binding
        // (the caller never asks both of the kernel).
        let mut binds = vec![
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
        ];
        let (ab, cacheb) = match &cached {
            Some((c, _)) => (Some(c.at.buffer()?), Some(c.cache.buffer()?)),
            None => (None, None),
        };
        if let (Some(ab), Some(cacheb), Some((_, words))) = (ab, cacheb, &cached) {
            binds.extend([whole(ab, 1), whole(&out, out_len), whole(cacheb, *words)]);
        } else {
            binds.push(whole(&out, out_len));
        }
        let kernel = Kernel::QMatmul {
            format: w.format,
            dequant: x.is_none(),
            residual: rb.is_some(),
            norm: nb.is_some(),
            swiglu,
            rope: cb.is_some(),
            cache: cached.map_or(0, |(c, _)| c.kv + 1),
        };
        let groups = if x.is_some() {
            m * n.div_ceil(8)
        } else if transposed {
            // An invocation a word (see quant.wgsl's `dequant`).
            words_len.div_ceil(WG)
        } else {
            out_len.div_ceil(WG)
        };
        s.dispatch(&mut st, kernel, bytemuck::bytes_of(&p), &binds, groups)?;
        Ok(s.storage(out))
    }
}

/// Where quant_cached.wgsl stores the product's columns `from..`: row `at[0]` (a one-word
/// u32 tensor) of `cache`, `capacity` rows of them, held as `kv` ([`kv_code`]).
///
/// [`kv_code`]: super::super::pipelines::kv_code
pub(crate) struct QuantCache<'a> {
    pub cache: &'a WgpuStorage,
    pub at: &'a WgpuStorage,
    pub from: u64,
    pub capacity: u64,
    pub kv: u8,
}

#[cfg(all(test, native))]
mod tests {
    use crate::backend::BackendOps;
    use crate::{Backend, Device, QuantFormat};

    /// The dequantisation written transposed, `[k, n]` (the copy the cooperative-matrix
    /// prompt product reads, which lavapipe never takes), holds the transpose of the plain
    /// one for every format, with a row count that is no multiple of anything.
    #[test]
    fn the_transposed_dequantisation_is_the_transpose() {
        let d = Device::with_backend_blocking(Backend::Vulkan)
            .expect("make test installs lavapipe, so a Vulkan adapter exists");
        let be = d.backend().wgpu().expect("a wgpu device").clone();
        let (n, k) = (37, 96);
        let mut seed = 7u32;
        for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
            let mut bytes = Vec::new();
            for _ in 0..n * k / 32 {
                // f16 scale 0.0106 (and minimum -0.0106 for Q4_1), then random codes.
                bytes.extend_from_slice(&0x216Fu16.to_le_bytes());
                if format == QuantFormat::Q4_1 {
                    bytes.extend_from_slice(&0xA16Fu16.to_le_bytes());
                }
                let codes = if format == QuantFormat::Q8_0 { 32 } else { 16 };
                for _ in 0..codes {
                    seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                    bytes.push((seed >> 24) as u8);
                }
            }
            let w = d.quantized(&bytes, format, n, k).unwrap();
            let plain = w.dequantize().unwrap().read_blocking().unwrap();
            let storages: Vec<_> = w
                .storages()
                .into_iter()
                .map(|s| s.as_wgpu().unwrap())
                .collect();
            let parts = w.spec().parts(&storages).unwrap();
            let t = be.quant_kernel(parts, None, true, None).unwrap();
            let t = crate::future::block_on(be.read(&t, n * k)).unwrap();
            assert!(plain.iter().any(|&v| v != 0.0), "{format:?}");
            for r in 0..n {
                for c in 0..k {
                    assert_eq!(t[c * n + r], plain[r * k + c], "{format:?} at ({r}, {c})");
                }
            }
        }
    }
}
