//! Fused scaled dot-product attention: multi-head and grouped-query, with optional causal and
//! padding masks, computed with an online softmax so the `[sq, sk]` score matrix is never
//! written to memory (memory grows linearly with the sequence).
//!
//! Kernels read q, k and v through row strides ([`RowStrides`]), so heads-first
//! `[b, h, s, d]`, sequence-first `[b, s, h, d]` (a linear layer's output split into heads) and
//! a packed QKV projection `[b, s, (hq + 2 hkv) d]` are all read where they lie, without copies.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::matmul::Precision;
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// How q, k, v and the output of [`Tensor::attention`] lay out their axes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AttentionLayout {
    /// `[batch, heads, seq, dim]` (heads first).
    #[default]
    Bhsd,
    /// `[batch, seq, heads, dim]`: a linear layer's `[b, s, h * d]` output reshaped, read
    /// without a transpose; the output comes back the same way.
    Bshd,
}

/// Masks, scale and layout of [`Tensor::attention`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AttentionOptions<'a> {
    /// Query `i` sees keys `0 ..= i + (sk - sq)` (aligned to the end, as with a KV cache).
    pub causal: bool,
    /// Per batch entry, how many keys are real; keys at or beyond it are hidden (padding).
    /// Each must be at most the key count (checked).
    pub key_lengths: Option<&'a [u32]>,
    /// The same lengths as a device tensor of `[batch]` u32 (or i32) values, so a recorded
    /// batch or a [`Graph`](crate::Graph) takes new ones each run. They cannot be checked
    /// without a read back: each is clamped to the key count (a negative i32 reads as a large
    /// u32, so it shows every key). Give `key_lengths` or this, not both.
    pub lengths: Option<&'a Tensor>,
    /// Multiplies the scores; `1 / sqrt(d)` when `None`.
    pub scale: Option<f32>,
    /// The axis order of q, k, v and the output.
    pub layout: AttentionLayout,
    /// The arithmetic over f32 operands, as [`MatmulOptions::precision`]: with
    /// [`Precision::F16`] or [`Precision::Bf16`] where the backend has a half-precision kernel
    /// (CUDA's tensor cores, head widths 32, 64 and 128), q, k and v are rounded to that dtype
    /// and attended as stored, the result returned as f32; elsewhere the f32 kernels compute
    /// exactly, which is within the tolerance. Operands already in a half dtype ignore it.
    ///
    /// [`MatmulOptions::precision`]: crate::MatmulOptions::precision
    pub precision: Precision,
}

/// Where row `(b, h, i)` of a q, k or v operand starts: `offset + b * batch + h * head +
/// i * seq` elements into its storage; the row's elements are contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RowStrides {
    pub offset: usize,
    pub batch: usize,
    pub head: usize,
    pub seq: usize,
}

/// The three operands' strides when each has contiguous rows.
fn strides_all(s: [Option<RowStrides>; 3]) -> Option<[RowStrides; 3]> {
    match s {
        [Some(a), Some(b), Some(c)] => Some([a, b, c]),
        _ => None,
    }
}

impl RowStrides {
    /// A tensor's strides in `layout`, read from its view (whose rows must be contiguous:
    /// the last stride 1), or row-major; `None` for a view whose rows are strided.
    fn of(t: &Tensor, layout: AttentionLayout) -> Option<RowStrides> {
        let (s, offset) = t.layout();
        if t.shape().last().is_some_and(|&d| d > 1) && s[3] != 1 {
            return None;
        }
        let (head, seq) = match layout {
            AttentionLayout::Bhsd => (s[1], s[2]),
            AttentionLayout::Bshd => (s[2], s[1]),
        };
        Some(RowStrides {
            offset,
            batch: s[0],
            head,
            seq,
        })
    }

    /// Whether the offset and every stride are multiples of `n` elements (rows that start on
    /// an `n`-element boundary, as kernels reading whole words or vectors need).
    pub(crate) fn aligned(self, n: usize) -> bool {
        [self.offset, self.batch, self.head, self.seq]
            .iter()
            .all(|x| x.is_multiple_of(n))
    }

    /// Where row `(b, h, i)` starts.
    pub(crate) fn at(self, b: usize, h: usize, i: usize) -> usize {
        self.offset + b * self.batch + h * self.head + i * self.seq
    }
}

/// Shapes and memory layout of one attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct AttentionSpec {
    pub batch: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub sk: usize,
    pub d: usize,
    pub dv: usize,
    pub causal: bool,
    pub scale: f32,
    pub q: RowStrides,
    pub k: RowStrides,
    pub v: RowStrides,
    /// The output is `[b, sq, hq, dv]` (else `[b, hq, sq, dv]`).
    pub out_bshd: bool,
    /// The dtype q, k, v and the output are stored in: f32, or f16/bf16 where the backend
    /// takes them as stored (see `BackendImpl::attention_stores_halves`).
    pub storage: DType,
}

impl AttentionSpec {
    /// The storage elements a strided operand must hold: one past its last row's end.
    pub(crate) fn extent(s: RowStrides, b: usize, h: usize, seq: usize, dim: usize) -> usize {
        if b * h * seq * dim == 0 {
            0
        } else {
            s.at(b - 1, h - 1, seq - 1) + dim
        }
    }
}

/// The options of a verification rerun: the lengths, however they were given, are its fourth
/// input.
fn rerun_options<'a>(
    causal: bool,
    scale: Option<f32>,
    layout: AttentionLayout,
    t: &[&'a Tensor],
) -> AttentionOptions<'a> {
    AttentionOptions {
        causal,
        key_lengths: None,
        lengths: t.get(3).copied(),
        scale,
        layout,
        ..Default::default()
    }
}

/// The largest head dimension the fused kernel takes.
pub const MAX_HEAD_DIM: usize = 256;

/// Sizes of one call, before the strides: `(b, hq, hkv, sq, sk, d, dv)`.
pub(crate) type Dims = (usize, usize, usize, usize, usize, usize, usize);

impl Tensor {
    /// `softmax(q k^T * scale + mask) v` with `self` as q. In the default layout
    /// ([`AttentionLayout::Bhsd`]) q is `[batch, hq, sq, d]`, k `[batch, hkv, sk, d]`, v
    /// `[batch, hkv, sk, dv]`, and the result `[batch, hq, sq, dv]`; with
    /// [`AttentionLayout::Bshd`] the seq and head axes swap in all four. `hq` is a multiple
    /// of `hkv` (query head `h` uses key/value head `h / (hq / hkv)`). A query that sees no
    /// key gets zeros. Head dimensions up to [`MAX_HEAD_DIM`].
    pub fn attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        options: AttentionOptions<'_>,
    ) -> Result<Tensor> {
        let bshd = options.layout == AttentionLayout::Bshd;
        let hint = if bshd {
            "(expected q [b, sq, hq, d], k [b, sk, hkv, d], v [b, sk, hkv, dv], hq a multiple of hkv)"
        } else {
            "(expected q [b, hq, sq, d], k [b, hkv, sk, d], v [b, hkv, sk, dv], hq a multiple of hkv)"
        };
        let (&[b, x1, x2, d], &[bk, y1, y2, dk], &[bv, z1, z2, dv]) =
            (self.shape(), k.shape(), v.shape())
        else {
            // The rank is what is wrong: say which operand has it.
            let (name, shape) = [("q", self.shape()), ("k", k.shape()), ("v", v.shape())]
                .into_iter()
                .find(|(_, s)| s.len() != 4)
                .unwrap_or(("q", self.shape()));
            let axes = if bshd {
                "[batch, seq, heads, dim]"
            } else {
                "[batch, heads, seq, dim]"
            };
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!("{name} must have 4 axes {axes}, got {shape:?} {hint}"),
            });
        };
        let ((hq, sq), (hkv, sk), (hv, skv)) = if bshd {
            ((x2, x1), (y2, y1), (z2, z1))
        } else {
            ((x1, x2), (y1, y2), (z1, z2))
        };
        if b != bk || b != bv || d != dk || hkv != hv || sk != skv || hkv == 0 || hq % hkv != 0 {
            let other = if d != dk || b != bk || hkv == 0 || hq % hkv != 0 {
                k.shape()
            } else {
                v.shape()
            };
            return Err(Error::shape("attention", self.shape(), other, hint));
        }
        let layout = options.layout;
        let strides = [self, k, v].map(|t| RowStrides::of(t, layout));
        // f16 and bf16 operands of one dtype go to a backend that takes them as stored (the
        // tensor-core kernel on CUDA); elsewhere f32 copies (views copied out), the result in
        // their dtype. A view whose rows are strided is copied out; any other is read in place.
        let mut storage = DType::F32;
        let rounded = match options.precision {
            Precision::F16 => Some(DType::F16),
            Precision::Bf16 => Some(DType::BF16),
            Precision::F32 | Precision::Tf32 => None,
        };
        if let (Some(half), Some(rows)) = (rounded, strides_all(strides)) {
            let all_f32 = [self, k, v].iter().all(|t| t.dtype() == DType::F32);
            if all_f32
                && self.device().backend().attention_stores_halves(
                    half,
                    (b, hq, hkv, sq, sk, d, dv),
                    rows,
                )
            {
                let exact = AttentionOptions {
                    precision: Precision::F32,
                    ..options
                };
                let (q, k, v) = (self.cast(half)?, k.cast(half)?, v.cast(half)?);
                return q.attention(&k, &v, exact)?.cast(DType::F32);
            }
        }
        if let Some(dtype) = Tensor::promotion("attention", &[self, k, v])? {
            let rows = strides_all(strides);
            let halves = dtype.size() == 2
                && [self, k, v].iter().all(|t| t.dtype() == dtype)
                && rows.is_some_and(|r| {
                    self.device().backend().attention_stores_halves(
                        dtype,
                        (b, hq, hkv, sq, sk, d, dv),
                        r,
                    )
                });
            // An f32 query over keys and values of one half dtype (a decoder's f16 cache):
            // where the backend reads those as stored, the query is rounded to their dtype
            // rather than the keys and values converted, and the result comes back as f32.
            let kv = k.dtype();
            if self.dtype() == DType::F32
                && kv.size() == 2
                && v.dtype() == kv
                && rows.is_some_and(|r| {
                    self.device().backend().attention_stores_halves(
                        kv,
                        (b, hq, hkv, sq, sk, d, dv),
                        r,
                    )
                })
            {
                return self.cast(kv)?.attention(k, v, options)?.cast(DType::F32);
            }
            // Other mixed dtypes promote to f32 and are converted: only operands all stored
            // as f32 are read in place.
            let all_f32 = [self, k, v].iter().all(|t| t.dtype() == DType::F32);
            if halves {
                storage = dtype;
            } else if !all_f32 || rows.is_none() {
                let (qf, kf, vf) = (
                    self.floats("attention")?,
                    k.floats("attention")?,
                    v.floats("attention")?,
                );
                return qf.attention(&kf, &vf, options)?.cast(dtype);
            }
        }
        let [Some(qs), Some(ks), Some(vs)] = strides else {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: "internal error: strided rows were not copied out".into(),
            });
        };
        let dims = (b, hq, hkv, sq, sk, d, dv);
        let out = self.attend([self, k, v], dims, [qs, ks, vs], (bshd, storage), options)?;
        let (causal, scale) = (options.causal, options.scale);
        let rerun = move |t: &[&Tensor]| {
            t[0].attention(t[1], t[2], rerun_options(causal, scale, layout, t))
        };
        Self::verify_attention(out, [self, k, v], options, rerun)
    }

    /// Attention over a packed QKV projection: `self` is `[batch, seq, (heads + 2 kv_heads) *
    /// d]`, each row the query heads, then the key heads, then the value heads (a fused
    /// `linear` with `[W_q; W_k; W_v]`), read in place. Returns `[batch, seq, heads * d]`, the
    /// layout the output projection reads. Options as in [`Tensor::attention`] (its `layout`
    /// is ignored).
    pub fn attention_packed(
        &self,
        heads: usize,
        kv_heads: usize,
        options: AttentionOptions<'_>,
    ) -> Result<Tensor> {
        let &[b, s, width] = self.shape() else {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!(
                    "packed qkv must be [batch, seq, (heads + 2 kv_heads) * d], got {:?}",
                    self.shape()
                ),
            });
        };
        let parts = heads.checked_add(kv_heads.saturating_mul(2)).filter(|&p| {
            p > 0 && kv_heads > 0 && heads.is_multiple_of(kv_heads) && width.is_multiple_of(p)
        });
        let Some(parts) = parts else {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!(
                    "a row of {width} is not (heads + 2 kv_heads) * d for {heads} heads and \
                     {kv_heads} kv heads (heads a multiple of kv_heads)"
                ),
            });
        };
        let d = width / parts;
        let (_, offset) = self.layout();
        let at = |at: usize| RowStrides {
            offset: offset + at,
            batch: s * width,
            head: d,
            seq: width,
        };
        let strides = [at(0), at(heads * d), at((heads + kv_heads) * d)];
        let mut storage = DType::F32;
        if let Some(dtype) = Tensor::promotion("attention", &[self])? {
            let halves = dtype.size() == 2
                && self.is_contiguous()
                && self.device().backend().attention_stores_halves(
                    dtype,
                    (b, heads, kv_heads, s, s, d, d),
                    strides,
                );
            if !halves {
                return self
                    .floats("attention")?
                    .attention_packed(heads, kv_heads, options)?
                    .cast(dtype);
            }
            storage = dtype;
        }
        let dims = (b, heads, kv_heads, s, s, d, d);
        let out = self.attend([self, self, self], dims, strides, (true, storage), options)?;
        let out = out.reshape(&[b, s, heads * d])?;
        let (causal, scale) = (options.causal, options.scale);
        let rerun = move |t: &[&Tensor]| {
            let options = rerun_options(causal, scale, AttentionLayout::Bhsd, t);
            t[0].attention_packed(heads, kv_heads, options)
        };
        Self::verify_attention(out, [self, self, self], options, rerun)
    }

    /// Registers a verification check of an attention result (the lengths tensor, when
    /// given, is the fourth input).
    fn verify_attention(
        out: Tensor,
        [q, k, v]: [&Tensor; 3],
        options: AttentionOptions<'_>,
        rerun: impl Fn(&[&Tensor]) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Result<Tensor> {
        if !out.device().verifier().is_on() {
            return Ok(out);
        }
        let host;
        let mut inputs = vec![q, k, v];
        match (options.key_lengths, options.lengths) {
            (Some(l), _) => {
                host = q.device().tensor_of(l, &[l.len()])?;
                inputs.push(&host);
            }
            (None, Some(t)) => inputs.push(t),
            (None, None) => {}
        }
        out.verified_many("attention", &inputs, Tol::Accumulate, rerun)
    }

    /// The checks and the dispatch shared by every layout.
    fn attend(
        &self,
        [q, k, v]: [&Tensor; 3],
        (b, hq, hkv, sq, sk, d, dv): Dims,
        [qs, ks, vs]: [RowStrides; 3],
        (out_bshd, storage): (bool, DType),
        options: AttentionOptions<'_>,
    ) -> Result<Tensor> {
        q.same_device(k, "attention")?;
        q.same_device(v, "attention")?;
        if d > MAX_HEAD_DIM || dv > MAX_HEAD_DIM {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!(
                    "head dimensions up to {MAX_HEAD_DIM} are supported, got d={d}, dv={dv}"
                ),
            });
        }
        if let Some(lens) = options.key_lengths {
            if lens.len() != b {
                return Err(Error::shape(
                    "attention key_lengths",
                    &[lens.len()],
                    &[b],
                    "(one length per batch entry)",
                ));
            }
            if let Some((i, &len)) = lens.iter().enumerate().find(|(_, &l)| l as usize > sk) {
                return Err(Error::InvalidArgument {
                    op: "attention",
                    reason: format!(
                        "key_lengths[{i}] is {len}, more than the {sk} keys (a length counts real keys)"
                    ),
                });
            }
        }
        let scale = options.scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
        if !scale.is_finite() {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!("scale must be finite, got {scale}"),
            });
        }
        let host_lens;
        let lens = match (options.key_lengths, options.lengths) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument {
                    op: "attention",
                    reason: "give key_lengths or lengths, not both".into(),
                })
            }
            (Some(l), None) => {
                host_lens = q.device().tensor_of(l, &[b])?;
                Some(&host_lens)
            }
            (None, Some(t)) => {
                q.same_device(t, "attention")?;
                t.expect_integer("attention", "lengths")?;
                if t.len() != b {
                    return Err(Error::shape(
                        "attention lengths",
                        t.shape(),
                        &[b],
                        "(one length per batch entry)",
                    ));
                }
                Some(t)
            }
            (None, None) => None,
        };
        let spec = AttentionSpec {
            batch: b,
            hq,
            hkv,
            sq,
            sk,
            d,
            dv,
            causal: options.causal,
            scale,
            q: qs,
            k: ks,
            v: vs,
            out_bshd,
            storage,
        };
        // The strides were derived from the shapes; this keeps every read inside its tensor.
        for (t, s, h, n, w) in [
            (q, qs, hq, sq, d),
            (k, ks, hkv, sk, d),
            (v, vs, hkv, sk, dv),
        ] {
            if AttentionSpec::extent(s, b, h, n, w) > t.base().len() {
                return Err(Error::InvalidArgument {
                    op: "attention",
                    reason: "internal error: an operand's strides reach past its data".into(),
                });
            }
        }
        let shape = if out_bshd {
            vec![b, sq, hq, dv]
        } else {
            vec![b, hq, sq, dv]
        };
        q.device().check_output_of("attention", &shape, storage)?;
        let data = q.device().op(&spec).attention(
            q.storage(),
            k.storage(),
            v.storage(),
            lens.map(Tensor::storage),
            spec,
        )?;
        Ok(Tensor::new_typed(q.device().clone(), data, shape, storage))
    }
}

impl OpSpec for AttentionSpec {
    fn name(&self) -> &'static str {
        "attention"
    }

    /// Scores and the weighted sum of values; a causal mask skips about half of both.
    fn work(&self) -> Work {
        let rows = (self.batch * self.hq * self.sq) as f64;
        let flops = 2.0 * rows * self.sk as f64 * (self.d + self.dv) as f64;
        Work::Flops(if self.causal { flops / 2.0 } else { flops })
    }
}
