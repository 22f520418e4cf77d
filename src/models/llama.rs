//! A llama-architecture decoder (SmolLM2-135M-Instruct and its kind) from a GGUF file: token
//! embeddings, layers of RMSNorm, grouped-query attention with interleaved RoPE (the layout
//! GGUF's converted weights expect) and a SwiGLU feed-forward, each added to the residual
//! stream; a final RMSNorm and the output projection (tied to the embeddings when the file has
//! no `output.weight`).
//!
//! Quantized weights (Q4_0, Q4_1, Q8_0) go to the device as blocks and are dequantised inside
//! the matmul; F16 and F32 weights go as they are. The embedding table stays on the device as
//! the file stores it (and is the output projection's weight when the two are tied): a step
//! gathers and dequantises only its tokens' rows there, from ids on the device, not a 113 MB
//! f32 copy of the table.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::models::bpe::Bpe;
use crate::models::decode::KvCache;
use crate::models::gguf::{Gguf, TensorType};
use crate::models::linear::{fused, Linear};
use crate::ops::{AttentionLayout, AttentionOptions, Precision, RopeLayout};
use crate::{Device, QuantMatmulOptions, Tensor};

pub(crate) fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "llm",
        reason: reason.into(),
    }
}

/// The shape of a llama model, as its GGUF metadata gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// Tokens in the vocabulary.
    pub vocab: usize,
    /// Width of the residual stream.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key and value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Width of the feed-forward layer.
    pub ffn: usize,
    /// The longest context the model was trained for.
    pub trained_context: usize,
    /// RoPE's frequency base.
    pub rope_base: f64,
    /// RMSNorm epsilon.
    pub eps: f32,
}

impl LlmConfig {
    /// Reads `llama.*` metadata; other architectures are refused.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<LlmConfig> {
        let arch = g.string("general.architecture")?;
        if arch != "llama" {
            return Err(invalid(format!(
                "architecture {arch:?} is not supported (llama is)"
            )));
        }
        let c = LlmConfig {
            vocab: g
                .count("llama.vocab_size")
                .or_else(|_| g.get("tokenizer.ggml.tokens").and_then(array_len))?,
            hidden: g.count("llama.embedding_length")?,
            layers: g.count("llama.block_count")?,
            heads: g.count("llama.attention.head_count")?,
            kv_heads: g.count("llama.attention.head_count_kv")?,
            ffn: g.count("llama.feed_forward_length")?,
            trained_context: g.count("llama.context_length")?,
            rope_base: g.number("llama.rope.freq_base").unwrap_or(10_000.0),
            eps: g.number("llama.attention.layer_norm_rms_epsilon")? as f32,
        };
        let hd = c.hidden / c.heads;
        if !c.hidden.is_multiple_of(c.heads)
            || !c.heads.is_multiple_of(c.kv_heads)
            || !hd.is_multiple_of(2)
            || hd > crate::ops::attention::MAX_HEAD_DIM
            || c.rope_base.is_nan()
            || c.rope_base <= 0.0
        {
            return Err(invalid(format!("inconsistent llama metadata: {c:?}")));
        }
        Ok(c)
    }

    /// Width of one head.
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

fn array_len(v: &crate::models::gguf::Value) -> Result<usize> {
    v.as_array()
        .map(<[_]>::len)
        .ok_or_else(|| invalid("no vocabulary size"))
}

pub(crate) struct Layer {
    pub(crate) attn_norm: Tensor,
    /// The query, key and value projections as one weight, their rows in that order:
    /// `[hidden + 2 * kv_heads * head_dim, hidden]`, so one product makes all three.
    pub(crate) qkv: Linear,
    pub(crate) o: Linear,
    pub(crate) ffn_norm: Tensor,
    /// The gate and up projections as one weight, gate rows first: `[2 * ffn, hidden]`.
    pub(crate) gate_up: Linear,
    pub(crate) down: Linear,
}

/// A llama model on a device, with its tokenizer (see the module docs). Cloning is cheap
/// (the weights are shared), and each [`Generation`](crate::models::Generation) holds a clone,
/// so it outlives no borrow.
#[derive(Clone)]
pub struct Llm {
    pub(crate) model: std::sync::Arc<Model>,
}

/// What an [`Llm`] shares among its clones.
pub(crate) struct Model {
    pub(crate) device: Device,
    pub(crate) config: LlmConfig,
    pub(crate) tokenizer: Bpe,
    pub(crate) layers: Vec<Layer>,
    pub(crate) out_norm: Tensor,
    pub(crate) lm_head: Linear,
    /// The token embeddings, `[vocab, hidden]`: `lm_head` itself when the two are tied.
    pub(crate) embed_table: Linear,
    /// `cos` and `sin` of every position up to the context, then a row of ones and zeros
    /// (position [`Model::identity_row`], which leaves values unrotated): `[context + 1,
    /// head_dim / 2]`.
    rope: (Vec<f32>, Vec<f32>),
    /// The same tables on the device, for a recorded step to gather its rows.
    pub(crate) rope_table: (Tensor, Tensor),
    pub(crate) context: usize,
    /// The KV cache's dtype.
    pub(crate) kv_cache: DType,
    /// The arithmetic of a prompt's products.
    pub(crate) prompt_precision: Precision,
    /// Ids that end an answer (`<|im_end|>`, the end-of-sequence token).
    pub(crate) stop_ids: Vec<u32>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let m = &self.model;
        f.debug_struct("Llm")
            .field("config", &m.config)
            .field("context", &m.context)
            .field("kv_cache", &m.kv_cache)
            .field("prompt_precision", &m.prompt_precision)
            .field("backend", &m.device.info().backend)
            .finish()
    }
}

/// The context [`Llm::load`] prepares for when none is given.
pub const DEFAULT_CONTEXT: usize = 2048;

/// How [`Llm::from_bytes`] prepares a model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlmOptions {
    /// The longest sequence (prompt and answer) a generation holds: [`DEFAULT_CONTEXT`] when
    /// `None`, the model's trained context at most.
    pub context: Option<usize>,
    /// The KV cache's dtype: F32 (the default), or F16 or BF16 for half the memory. CUDA's
    /// attention kernels read a half-precision cache as stored (the query rounded to its
    /// dtype); other backends convert the cache's keys and values to f32 for each attention,
    /// which saves memory, not time.
    pub kv_cache: DType,
    /// The arithmetic of the prompt's products and attention (prefill; each new token's
    /// few-row products multiply in f32 whatever this says). `None` (the default) picks [`Precision::F16`]
    /// where the device has tensor cores ([`crate::DeviceFeatures::cooperative_matrix`]:
    /// CUDA, NVIDIA over Vulkan), as llama.cpp's prompt kernels do, and [`Precision::F32`]
    /// elsewhere, where rounding would cost time and gain none.
    pub prompt_precision: Option<Precision>,
}

impl Default for LlmOptions {
    fn default() -> Self {
        LlmOptions {
            context: None,
            kv_cache: DType::F32,
            prompt_precision: None,
        }
    }
}

impl Llm {
    /// Reads a GGUF file and loads it onto `device`, for a context of [`DEFAULT_CONTEXT`]
    /// tokens (or the model's own, when shorter).
    pub fn load(device: &Device, path: impl AsRef<std::path::Path>) -> Result<Llm> {
        let path = path.as_ref();
        let bytes = std::fs::read(path)
            .map_err(|e| invalid(format!("cannot read {}: {e}", path.display())))?;
        Llm::from_bytes(device, &bytes, LlmOptions::default())
    }

    /// Loads a model from the bytes of a GGUF file with `options` (the context and the KV
    /// cache's dtype). Checks first that the weights, the KV cache and the activations fit the
    /// device's memory, where the device reports it.
    pub fn from_bytes(device: &Device, bytes: &[u8], options: LlmOptions) -> Result<Llm> {
        let LlmOptions {
            context,
            kv_cache,
            prompt_precision,
        } = options;
        let prompt_precision =
            prompt_precision.unwrap_or(match device.info().features.cooperative_matrix {
                true => Precision::F16,
                false => Precision::F32,
            });
        if !matches!(kv_cache, DType::F32 | DType::F16 | DType::BF16) {
            return Err(invalid(format!(
                "the KV cache holds F32, F16 or BF16, not {kv_cache:?}"
            )));
        }
        let g = Gguf::parse(bytes)?;
        let config = LlmConfig::from_gguf(&g)?;
        let tokenizer = Bpe::from_gguf(&g)?;
        if tokenizer.vocab_size() != config.vocab {
            return Err(invalid(format!(
                "the tokenizer has {} tokens, the model {}",
                tokenizer.vocab_size(),
                config.vocab
            )));
        }
        let context = context
            .unwrap_or(DEFAULT_CONTEXT)
            .min(config.trained_context);
        if context == 0 {
            return Err(invalid("the context must hold at least one token"));
        }
        let need = memory_estimate(&g, &config, context, kv_cache)?;
        if let Some(have) = device.info().memory_bytes {
            if need > have {
                return Err(Error::OutOfMemory {
                    detail: format!(
                        "the model with a {context}-token context needs about {} MB; the device \
                         has {} MB",
                        need >> 20,
                        have >> 20
                    ),
                });
            }
        }
        let c = &config;
        let (hd, kv) = (c.head_dim(), c.kv_heads * c.head_dim());
        let vector = |name: &str| -> Result<Tensor> {
            let (t, data) = g.tensor(name)?;
            let n: usize = t.dims.iter().product();
            if n != c.hidden || t.kind != TensorType::F32 {
                return Err(invalid(format!(
                    "{name} is {:?} {:?}, not F32 [{}]",
                    t.kind, t.dims, c.hidden
                )));
            }
            device.tensor_from_bytes(data, DType::F32, &[n])
        };
        let linear = |name: &str, rows: usize, cols: usize| -> Result<Linear> {
            fused(device, &g, &[(name, rows)], cols)
        };
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: vector(&n("attn_norm"))?,
                qkv: fused(
                    device,
                    &g,
                    &[
                        (&n("attn_q"), c.hidden),
                        (&n("attn_k"), kv),
                        (&n("attn_v"), kv),
                    ],
                    c.hidden,
                )?,
                o: linear(&n("attn_output"), c.hidden, c.hidden)?,
                ffn_norm: vector(&n("ffn_norm"))?,
                gate_up: fused(
                    device,
                    &g,
                    &[(&n("ffn_gate"), c.ffn), (&n("ffn_up"), c.ffn)],
                    c.hidden,
                )?,
                down: linear(&n("ffn_down"), c.hidden, c.ffn)?,
            });
        }
        let (embd, _) = g.tensor("token_embd.weight")?;
        if embd.dims != [c.hidden, c.vocab] {
            return Err(invalid(format!(
                "token_embd.weight is {:?}, expected [{}, {}]",
                embd.dims, c.hidden, c.vocab
            )));
        }
        let tied = g.tensor("output.weight").is_err();
        let lm_head = linear(
            if tied {
                "token_embd.weight"
            } else {
                "output.weight"
            },
            c.vocab,
            c.hidden,
        )?;
        let embed_table = if tied {
            lm_head.clone()
        } else {
            linear("token_embd.weight", c.vocab, c.hidden)?
        };
        let half = hd / 2;
        let mut cos = Vec::with_capacity((context + 1) * half);
        let mut sin = Vec::with_capacity((context + 1) * half);
        for p in 0..context {
            for j in 0..half {
                let angle = p as f64 * c.rope_base.powf(-2.0 * j as f64 / hd as f64);
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        cos.extend(std::iter::repeat_n(1.0, half));
        sin.extend(std::iter::repeat_n(0.0, half));
        let mut stop_ids: Vec<u32> = ["<|im_end|>", "<|endoftext|>"]
            .iter()
            .filter_map(|t| tokenizer.token_id(t))
            .collect();
        if let Some(eos) = g
            .metadata
            .get("tokenizer.ggml.eos_token_id")
            .and_then(|v| v.as_u64())
        {
            stop_ids.push(eos as u32);
        }
        let model = Model {
            device: device.clone(),
            layers,
            out_norm: vector("output_norm.weight")?,
            embed_table,
            lm_head,
            rope_table: (
                device.tensor(&cos, &[context + 1, half])?,
                device.tensor(&sin, &[context + 1, half])?,
            ),
            rope: (cos, sin),
            context,
            kv_cache,
            prompt_precision,
            stop_ids,
            tokenizer,
            config,
        };
        Ok(Llm {
            model: std::sync::Arc::new(model),
        })
    }

    /// The arithmetic of a prompt's products ([`LlmOptions::prompt_precision`] as resolved
    /// for this device).
    pub fn prompt_precision(&self) -> Precision {
        self.model.prompt_precision
    }

    /// The model's shape.
    pub fn config(&self) -> &LlmConfig {
        &self.model.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &Bpe {
        &self.model.tokenizer
    }

    /// The device the model runs on.
    pub fn device(&self) -> &Device {
        &self.model.device
    }

    /// The longest sequence (prompt and answer) a generation can hold.
    pub fn context(&self) -> usize {
        self.model.context
    }

    /// The KV cache's dtype (see [`LlmOptions::kv_cache`]).
    pub fn kv_cache_dtype(&self) -> DType {
        self.model.kv_cache
    }

    /// The chat template's prompt for one user message, without a system prompt:
    /// `<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n`.
    pub fn chat_prompt(message: &str) -> String {
        format!("<|im_start|>user\n{message}<|im_end|>\n<|im_start|>assistant\n")
    }

    /// The logits of the token after `ids` (run from an empty context): `vocab` values, for
    /// scoring or checking the model.
    pub async fn logits(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let mut cache = KvCache::new(&self.model, ids.len())?;
        self.model.forward(ids, &mut cache)?.read().await
    }

    /// Blocking [`Llm::logits`].
    #[cfg(not(target_arch = "wasm32"))]
    pub fn logits_blocking(&self, ids: &[u32]) -> Result<Vec<f32>> {
        pollster::block_on(self.logits(ids))
    }
}

impl Model {
    /// The embedding rows of `ids`, `[ids.len(), hidden]` f32, gathered on the device.
    pub(crate) fn embed(&self, ids: &[u32]) -> Result<Tensor> {
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= self.config.vocab) {
            return Err(invalid(format!("token id {id} is outside the vocabulary")));
        }
        let ids = self.device.tensor_of(ids, &[ids.len()])?;
        match &self.embed_table {
            Linear::Quant(q) => q.embedding_ids(&ids),
            Linear::Dense(t) => t.embedding_ids(&ids)?.cast(DType::F32),
        }
    }

    /// The row of the RoPE tables that leaves values as they are.
    pub(crate) fn identity_row(&self) -> usize {
        self.context
    }

    /// Head rows a token's fused projection makes: queries, keys, values.
    pub(crate) fn head_rows(&self) -> usize {
        self.config.heads + 2 * self.config.kv_heads
    }

    /// Which table row each of a token's [`Model::head_rows`] rotates by at position `p`:
    /// the queries' and keys' at `p`, the values' by nothing.
    pub(crate) fn rope_positions(&self, p: usize) -> impl Iterator<Item = usize> {
        let rotated = self.config.heads + self.config.kv_heads;
        let identity = self.identity_row();
        (0..self.head_rows()).map(move |r| if r < rotated { p } else { identity })
    }

    /// RoPE tables for `n` tokens from position `start`, one row per head row of each token:
    /// `[n * head_rows, head_dim / 2]`, matching the fused projection's `[n * head_rows,
    /// head_dim]`.
    fn rope_rows(&self, start: usize, n: usize) -> Result<(Tensor, Tensor)> {
        let half = self.config.head_dim() / 2;
        let rows = n * self.head_rows();
        let mut c = Vec::with_capacity(rows * half);
        let mut s = Vec::with_capacity(rows * half);
        for p in start..start + n {
            for r in self.rope_positions(p) {
                c.extend_from_slice(&self.rope.0[r * half..(r + 1) * half]);
                s.extend_from_slice(&self.rope.1[r * half..(r + 1) * half]);
            }
        }
        Ok((
            self.device.tensor(&c, &[rows, half])?,
            self.device.tensor(&s, &[rows, half])?,
        ))
    }

    /// Runs `ids` at positions `cache.len ..` through the model, appending their keys and
    /// values to `cache`, and returns the last position's logits, `[1, vocab]`.
    pub(crate) fn forward(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let c = &self.config;
        let n = ids.len();
        let start = cache.len;
        if n == 0 {
            return Err(invalid("no tokens to run"));
        }
        if start + n > self.context {
            return Err(invalid(format!(
                "{} tokens do not fit the {}-token context",
                start + n,
                self.context
            )));
        }
        let hd = c.head_dim();
        let mut x = self.embed(ids)?;
        // The fused projection's output, `[n, head_rows * head_dim]`, is rotated as `[n *
        // head_rows, head_dim]` rows in one RoPE (the values' rows by the identity), then seen
        // as `[1, n, head_rows, head_dim]`: queries, then keys and values side by side, as the
        // cache keeps them.
        let (cos, sin) = self.rope_rows(start, n)?;
        let rows = self.head_rows();
        let (h, kv) = (c.heads, c.kv_heads);
        // The prompt's attention in its products' precision (tensor cores on CUDA in f16).
        let options = AttentionOptions {
            causal: true,
            layout: AttentionLayout::Bshd,
            precision: if n > 1 {
                self.prompt_precision
            } else {
                Precision::F32
            },
            ..Default::default()
        };
        let at = cache.position(self)?;
        let precision = self.prompt_precision;
        // A product's options: the norm before it, the residual after, SwiGLU inputs.
        fn with<'a>(
            precision: Precision,
            rms_norm: Option<(&'a Tensor, f32)>,
            residual: Option<&'a Tensor>,
            swiglu: bool,
        ) -> QuantMatmulOptions<&'a Tensor> {
            QuantMatmulOptions {
                rms_norm,
                residual,
                swiglu,
                precision,
                ..Default::default()
            }
        }
        for (i, l) in self.layers.iter().enumerate() {
            let qkv = l.qkv.apply(
                &x,
                with(precision, Some((&l.attn_norm, c.eps)), None, false),
            )?;
            let qkv = qkv.reshape(&[n * rows, hd])?;
            let qkv = qkv.rope(&cos, &sin, RopeLayout::Interleaved)?;
            let qkv = qkv.reshape(&[1, n, rows, hd])?;
            let cached = cache.append(i, qkv.slice(2, h..rows)?, at.as_ref())?;
            let (k, v) = (cached.slice(2, 0..kv)?, cached.slice(2, kv..2 * kv)?);
            let q = qkv.slice(2, 0..h)?;
            let att = q.attention(&k, &v, options)?.reshape(&[n, c.hidden])?;
            x = l.o.apply(&att, with(precision, None, Some(&x), false))?;
            let gate_up = l
                .gate_up
                .apply(&x, with(precision, Some((&l.ffn_norm, c.eps)), None, false))?;
            x = l
                .down
                .apply(&gate_up, with(precision, None, Some(&x), true))?;
        }
        cache.len += n;
        let last = if n == 1 { x } else { x.slice(0, n - 1..n)? };
        self.lm_head.apply(
            &last,
            with(precision, Some((&self.out_norm, c.eps)), None, false),
        )
    }
}

/// Bytes the model needs on its device for a context of `context` tokens: the weights as they
/// lie there, the KV cache, and the activations of a prefill of the whole context.
fn memory_estimate(g: &Gguf<'_>, c: &LlmConfig, context: usize, kv: DType) -> Result<u64> {
    // Saturating: sizes from a hostile header give a huge estimate, never a wrap.
    let prod = |xs: &[usize]| xs.iter().fold(1u64, |a, &x| a.saturating_mul(x as u64));
    let weights = g
        .tensors()
        .iter()
        .map(|t| {
            let n = usize::try_from(prod(&t.dims)).unwrap_or(usize::MAX);
            Linear::device_bytes(t.kind, n.min(usize::MAX / 4)) as u64
        })
        .fold(0u64, u64::saturating_add);
    let kv = prod(&[c.layers, context, c.kv_heads, c.head_dim(), 2, kv.size()]);
    // A prefill holds a few [context, hidden] and [context, ffn] activations at once, and the
    // concatenation copies one layer's cache.
    let width = c
        .hidden
        .saturating_mul(4)
        .saturating_add(c.ffn.saturating_mul(3));
    let act = prod(&[context, width, 4]).saturating_add(prod(&[c.vocab, 4]));
    Ok(weights.saturating_add(kv).saturating_add(act))
}
