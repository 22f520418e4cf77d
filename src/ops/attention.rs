//! Fused scaled dot-product attention: multi-head and grouped-query, with optional causal and
//! padding masks, computed with an online softmax so the `[sq, sk]` score matrix is never
//! written to memory (memory grows linearly with the sequence).

use crate::error::{Error, Result};
use crate::ops::OpSpec;
use crate::profile::Work;
use crate::tensor::Tensor;
use crate::verify::Tol;

/// Masks and scale of [`Tensor::attention`].
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
}

/// Shapes of one attention call.
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
}

/// The largest head dimension the fused kernel takes.
pub const MAX_HEAD_DIM: usize = 256;

impl Tensor {
    /// `softmax(q k^T * scale + mask) v` with `self` as q: `[batch, hq, sq, d]`, `k`:
    /// `[batch, hkv, sk, d]`, `v`: `[batch, hkv, sk, dv]`, `hq` a multiple of `hkv` (query head
    /// `h` uses key/value head `h / (hq / hkv)`). Returns `[batch, hq, sq, dv]`. A query that
    /// sees no key gets zeros. Head dimensions up to [`MAX_HEAD_DIM`].
    pub fn attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        options: AttentionOptions<'_>,
    ) -> Result<Tensor> {
        let hint = "(expected q [b, hq, sq, d], k [b, hkv, sk, d], v [b, hkv, sk, dv], hq a multiple of hkv)";
        let (&[b, hq, sq, d], &[bk, hkv, sk, dk], &[bv, hv, skv, dv]) =
            (self.shape(), k.shape(), v.shape())
        else {
            // The rank is what is wrong: say which operand has it.
            let (name, shape) = [("q", self.shape()), ("k", k.shape()), ("v", v.shape())]
                .into_iter()
                .find(|(_, s)| s.len() != 4)
                .unwrap_or(("q", self.shape()));
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!(
                    "{name} must have 4 axes [batch, heads, seq, dim], got {shape:?} {hint}"
                ),
            });
        };
        if b != bk || b != bv || d != dk || hkv != hv || sk != skv || hkv == 0 || hq % hkv != 0 {
            let other = if d != dk || b != bk || hkv == 0 || hq % hkv != 0 {
                k.shape()
            } else {
                v.shape()
            };
            return Err(Error::shape("attention", self.shape(), other, hint));
        }
        self.same_device(k, "attention")?;
        self.same_device(v, "attention")?;
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
        let host_lens;
        let lens = match (options.key_lengths, options.lengths) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument {
                    op: "attention",
                    reason: "give key_lengths or lengths, not both".into(),
                })
            }
            (Some(l), None) => {
                host_lens = self.device().tensor_of(l, &[b])?;
                Some(&host_lens)
            }
            (None, Some(t)) => {
                self.same_device(t, "attention")?;
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
        if let Some(out) = Tensor::promoted("attention", &[self, k, v], |t| {
            let options = AttentionOptions {
                key_lengths: None,
                lengths: lens,
                ..options
            };
            t[0].attention(t[1], t[2], options)
        })? {
            return Ok(out);
        }
        let scale = options.scale.unwrap_or(1.0 / (d.max(1) as f32).sqrt());
        if !scale.is_finite() {
            return Err(Error::InvalidArgument {
                op: "attention",
                reason: format!("scale must be finite, got {scale}"),
            });
        }
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
        };
        self.device().check_output("attention", &[b, hq, sq, dv])?;
        let storage = self.device().op(&spec).attention(
            self.storage(),
            k.storage(),
            v.storage(),
            lens.map(Tensor::storage),
            spec,
        )?;
        let out = self.with_storage(storage, vec![b, hq, sq, dv]);
        let (causal, scale) = (options.causal, options.scale);
        let mut inputs = vec![self, k, v];
        inputs.extend(lens);
        out.verified_many("attention", &inputs, Tol::Accumulate, move |t| {
            let options = AttentionOptions {
                causal,
                key_lengths: None,
                lengths: t.get(3).copied(),
                scale,
            };
            t[0].attention(t[1], t[2], options)
        })
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
