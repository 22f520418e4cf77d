//! The matmul with quantized weights and what it does around the product: the RMS norm before
//! it, SwiGLU inputs, the RoPE rotation and the residual add after it
//! ([`QuantMatmulOptions`]), inside the few-row GEMV's kernel where the backend has one.

use super::{QuantSpec, QuantTensor};
use crate::error::{Error, Result};
use crate::ops::matmul::Precision;
use crate::ops::rope::RopeLayout;
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;

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
        options: QuantMatmulOptions<&Tensor>,
    ) -> Result<Tensor> {
        self.matmul_quant_into(w, options, None)?
            .ok_or(Error::InvalidArgument {
                op: "matmul_quant",
                reason: "internal error: no product".into(),
            })
    }

    /// [`Tensor::matmul_quant_with`] of one row that also writes the product's columns
    /// `from..` into `cache` **in place**, as its row `at` along axis 1 (as
    /// [`Tensor::write_rows`] writes; `cache` is `[1, capacity, ..]` with `n - from` values a
    /// row, f32, f16 or bf16): a LLaMA's query, key and value projection storing the new key
    /// and value rows of a preallocated KV cache. One kernel where the backend has one (wgpu
    /// natively); elsewhere the product, then `write_rows`. Returns the whole product.
    #[cfg(feature = "models")]
    pub(crate) fn matmul_quant_caching(
        &self,
        w: &QuantTensor,
        options: QuantMatmulOptions<&Tensor>,
        (cache, at): (&Tensor, &Tensor),
        from: usize,
    ) -> Result<Tensor> {
        if let Some(y) = self.matmul_quant_cached(w, options, (cache, at), from)? {
            return Ok(y);
        }
        let y = self.matmul_quant_with(w, options)?;
        cache.write_columns(at, &y, from)?;
        Ok(y)
    }

    /// [`Tensor::matmul_quant_caching`] as one kernel, or `None` (nothing written) where the
    /// backend has none.
    #[cfg(feature = "models")]
    pub(crate) fn matmul_quant_cached(
        &self,
        w: &QuantTensor,
        options: QuantMatmulOptions<&Tensor>,
        (cache, at): (&Tensor, &Tensor),
        from: usize,
    ) -> Result<Option<Tensor>> {
        let op = "matmul_quant";
        self.same_device(cache, op)?;
        self.same_device(at, op)?;
        at.expect_integer(op, "at")?;
        let s = cache.shape();
        let width = w.rows.checked_sub(from);
        if s.len() < 2
            || s[0] != 1
            || Some(s[2..].iter().product::<usize>()) != width
            || at.len() != 1
            || !cache.dtype().is_float()
        {
            return Err(Error::shape(
                op,
                s,
                &[1, 0, w.rows.saturating_sub(from)],
                "(a cache [1, capacity, ..] with a row per product's cached columns, one index)",
            ));
        }
        if !cache.is_contiguous() || !at.is_contiguous() {
            return Ok(None);
        }
        self.matmul_quant_into(w, options, Some((cache, at, from)))
    }

    /// [`Tensor::matmul_quant_with`], storing in `cache` as [`Tensor::matmul_quant_caching`]
    /// says when given (`None` when that takes more than the product's kernel).
    fn matmul_quant_into(
        &self,
        w: &QuantTensor,
        options: QuantMatmulOptions<&Tensor>,
        cache: Option<(&Tensor, &Tensor, usize)>,
    ) -> Result<Option<Tensor>> {
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
        if cache.is_some() && Tensor::promotion(op, &[self])?.is_some() {
            // A half input is converted around the product: the caller writes the rows.
            return Ok(None);
        }
        if let Some(out) = Tensor::promoted(op, &[self], |t| t[0].matmul_quant_with(w, options))? {
            return Ok(Some(out));
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
        if cache.is_some()
            && (m != 1
                || options.residual.is_some()
                || options.swiglu
                || matches!(options.rope, Some((_, _, RopeLayout::HalfSplit))))
        {
            return Ok(None);
        }
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
                Some(r) => r.add(&rotated).map(Some),
                None => Ok(Some(rotated)),
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
            precision: options.precision,
        };
        let around = QuantAround {
            residual: residual.as_ref().map(Tensor::storage),
            norm: norm.as_ref().map(|n| n.0.storage()),
            rope: tables.as_ref().map(|t| (t.0.storage(), t.1.storage())),
        };
        let backend = self.device().op(&spec);
        let storage = match cache {
            #[cfg(not(feature = "models"))]
            Some(_) => return Ok(None),
            #[cfg(feature = "models")]
            Some((c, at, from)) => {
                let cached = backend.matmul_quant_cached(
                    self.storage(),
                    &w.storages(),
                    &around,
                    spec,
                    (c.storage(), at.storage()),
                    (from, c.shape()[1]),
                    c.dtype(),
                )?;
                match cached {
                    Some(s) => s,
                    None => return Ok(None),
                }
            }
            None => backend.matmul_quant(self.storage(), &w.storages(), &around, spec)?,
        };
        Ok(Some(self.with_storage(storage, shape)))
    }
}

/// Options of [`Tensor::matmul_quant_with`]: what a transformer does around a projection,
/// done inside the product's kernel. `T` is how the options name their operands: `&Tensor`
/// for [`Tensor::matmul_quant_with`], a batch's [`Value`](crate::Value) for
/// [`Batch::matmul_quant_with`](crate::Batch::matmul_quant_with).
#[derive(Debug, Clone, Copy)]
pub struct QuantMatmulOptions<T> {
    /// Normalises each row of the input first, as `rms_norm(Some(weight), None, eps)` does:
    /// `(weight, eps)`, the weight one value per input column.
    pub rms_norm: Option<(T, f32)>,
    /// Added to the product (the result's shape): a residual connection.
    pub residual: Option<T>,
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
    pub rope: Option<(T, T, RopeLayout)>,
    /// The arithmetic of a product of many rows (a prompt), as [`MatmulOptions::precision`]:
    /// with [`Precision::F16`] the dequantised weights and the input are rounded to f16 and
    /// multiplied on tensor cores where the device has them (cuBLAS on CUDA, cooperative
    /// matrices on wgpu), as llama.cpp's prompt kernels do. The few-row product (the GEMV of
    /// 8 rows or fewer on wgpu and CUDA, of 32 or fewer on the CPU) reads the weights once
    /// per row whatever the precision and always multiplies in f32, which is within every
    /// precision's tolerance.
    ///
    /// [`MatmulOptions::precision`]: crate::MatmulOptions::precision
    pub precision: Precision,
}

impl<T> Default for QuantMatmulOptions<T> {
    fn default() -> Self {
        QuantMatmulOptions {
            rms_norm: None,
            residual: None,
            swiglu: false,
            rope: None,
            precision: Precision::default(),
        }
    }
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
    /// The arithmetic of the many-row product (see [`QuantMatmulOptions::precision`]).
    pub precision: Precision,
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
