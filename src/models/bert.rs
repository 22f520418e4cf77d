//! A BERT sentence encoder (all-MiniLM-L6-v2): token, position and type embeddings, encoder
//! layers of attention on the packed QKV projection and a GELU feed-forward, each followed by
//! a residual layer norm; then the mean of the real tokens' states, L2-normalised.

use crate::error::{Error, Result};
use crate::models::WordPiece;
use crate::ops::{Activation, AttentionOptions};
use crate::{Device, Tensor};

/// The shape of a BERT encoder, as its `config.json` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// Width of the hidden states.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads (each `hidden / heads` wide).
    pub heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate: usize,
    /// Positions the model has embeddings for (the longest input).
    pub max_positions: usize,
    /// Layer norm epsilon.
    pub eps: f32,
}

fn invalid(what: &str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "embedder",
        reason: format!("{what}: {}", reason.into()),
    }
}

impl BertConfig {
    /// Reads a Hugging Face `config.json` of a BERT model.
    pub fn from_json(json: &str) -> Result<BertConfig> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| invalid("config.json", e.to_string()))?;
        let int = |key: &str| {
            v[key]
                .as_u64()
                .map(|x| x as usize)
                .filter(|&x| x > 0)
                .ok_or_else(|| invalid("config.json", format!("no positive {key}")))
        };
        if v["model_type"] != "bert" {
            return Err(invalid(
                "config.json",
                format!("model_type is {}, not bert", v["model_type"]),
            ));
        }
        if v["hidden_act"] != "gelu" {
            return Err(invalid(
                "config.json",
                format!("hidden_act {} is not gelu", v["hidden_act"]),
            ));
        }
        let c = BertConfig {
            hidden: int("hidden_size")?,
            layers: int("num_hidden_layers")?,
            heads: int("num_attention_heads")?,
            intermediate: int("intermediate_size")?,
            max_positions: int("max_position_embeddings")?,
            eps: v["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
        };
        if !c.hidden.is_multiple_of(c.heads) {
            return Err(invalid(
                "config.json",
                "hidden_size is not a multiple of the heads",
            ));
        }
        Ok(c)
    }
}

/// One encoder layer's weights (the query, key and value projections packed into one).
struct Layer {
    qkv_w: Tensor,
    qkv_b: Tensor,
    out_w: Tensor,
    out_b: Tensor,
    ln1: (Tensor, Tensor),
    ff1_w: Tensor,
    ff1_b: Tensor,
    ff2_w: Tensor,
    ff2_b: Tensor,
    ln2: (Tensor, Tensor),
}

/// Sentence embeddings on a device: text in, one L2-normalised vector per text out.
///
/// ```no_run
/// # fn main() -> gpukit::Result<()> {
/// let device = gpukit::Device::new_blocking()?;
/// let embedder = gpukit::models::Embedder::load(&device, "target/models/all-minilm-l6-v2")?;
/// let v = embedder.embed_blocking(&["GPU compute in the browser", "a cat on a mat"])?;
/// let cosine: f32 = v[0].iter().zip(&v[1]).map(|(a, b)| a * b).sum();
/// # Ok(()) }
/// ```
pub struct Embedder {
    device: Device,
    config: BertConfig,
    tokenizer: WordPiece,
    word: Tensor,
    positions: Tensor,
    token_type: Tensor,
    ln: (Tensor, Tensor),
    layers: Vec<Layer>,
}

impl Embedder {
    /// An embedder from a model's `config.json`, `tokenizer.json` and `model.safetensors`
    /// (the whole file), on `device`.
    pub fn from_bytes(
        device: &Device,
        config_json: &str,
        tokenizer_json: &str,
        weights: &[u8],
    ) -> Result<Embedder> {
        let config = BertConfig::from_json(config_json)?;
        let tokenizer = WordPiece::from_json(tokenizer_json, config.max_positions)?;
        let prefix = |name: &str| name.strip_prefix("bert.").unwrap_or(name).to_string();
        let mut tensors: std::collections::HashMap<String, Tensor> = device
            .load_safetensors_with(weights, |name| !name.ends_with("position_ids"))?
            .into_iter()
            .map(|(name, t)| (prefix(&name), t))
            .collect();
        let mut take = |name: &str, shape: &[usize]| -> Result<Tensor> {
            let t = tensors
                .remove(name)
                .ok_or_else(|| invalid("model.safetensors", format!("no tensor {name}")))?;
            if t.shape() != shape {
                return Err(invalid(
                    "model.safetensors",
                    format!("{name} is {:?}, not {shape:?}", t.shape()),
                ));
            }
            // Weights compute in f32 here; f16 and bf16 files are widened once, at load.
            t.cast(crate::DType::F32)
        };
        let (h, f) = (config.hidden, config.intermediate);
        let vocab = tokenizer.vocab_size();
        let word = take("embeddings.word_embeddings.weight", &[vocab, h])?;
        let positions = take(
            "embeddings.position_embeddings.weight",
            &[config.max_positions, h],
        )?;
        let token_type = take("embeddings.token_type_embeddings.weight", &[2, h])?
            .slice(0, 0..1)?
            .reshape(&[h])?;
        let mut ln = |p: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                take(&format!("{p}.weight"), &[h])?,
                take(&format!("{p}.bias"), &[h])?,
            ))
        };
        let emb_ln = ln("embeddings.LayerNorm")?;
        let layers = (0..config.layers)
            .map(|i| {
                let p = format!("encoder.layer.{i}");
                let q = (
                    take(&format!("{p}.attention.self.query.weight"), &[h, h])?,
                    take(&format!("{p}.attention.self.query.bias"), &[h])?,
                );
                let k = (
                    take(&format!("{p}.attention.self.key.weight"), &[h, h])?,
                    take(&format!("{p}.attention.self.key.bias"), &[h])?,
                );
                let v = (
                    take(&format!("{p}.attention.self.value.weight"), &[h, h])?,
                    take(&format!("{p}.attention.self.value.bias"), &[h])?,
                );
                Ok(Layer {
                    qkv_w: Tensor::concat(&[&q.0, &k.0, &v.0], 0)?,
                    qkv_b: Tensor::concat(&[&q.1, &k.1, &v.1], 0)?,
                    out_w: take(&format!("{p}.attention.output.dense.weight"), &[h, h])?,
                    out_b: take(&format!("{p}.attention.output.dense.bias"), &[h])?,
                    ln1: (
                        take(&format!("{p}.attention.output.LayerNorm.weight"), &[h])?,
                        take(&format!("{p}.attention.output.LayerNorm.bias"), &[h])?,
                    ),
                    ff1_w: take(&format!("{p}.intermediate.dense.weight"), &[f, h])?,
                    ff1_b: take(&format!("{p}.intermediate.dense.bias"), &[f])?,
                    ff2_w: take(&format!("{p}.output.dense.weight"), &[h, f])?,
                    ff2_b: take(&format!("{p}.output.dense.bias"), &[h])?,
                    ln2: (
                        take(&format!("{p}.output.LayerNorm.weight"), &[h])?,
                        take(&format!("{p}.output.LayerNorm.bias"), &[h])?,
                    ),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Embedder {
            device: device.clone(),
            config,
            tokenizer,
            word,
            positions,
            token_type,
            ln: emb_ln,
            layers,
        })
    }

    /// An embedder from a model folder holding `config.json`, `tokenizer.json` and
    /// `model.safetensors` (as `scripts/fetch-models.sh` leaves them); a missing or unreadable
    /// file is an error naming it.
    #[cfg(native)]
    pub fn load(device: &Device, dir: impl AsRef<std::path::Path>) -> Result<Embedder> {
        let dir = dir.as_ref();
        let read = |name: &str| {
            std::fs::read(dir.join(name)).map_err(|e| {
                invalid(
                    &dir.join(name).display().to_string(),
                    format!("{e} (scripts/fetch-models.sh fetches all-minilm-l6-v2)"),
                )
            })
        };
        let text =
            |name: &str| String::from_utf8(read(name)?).map_err(|_| invalid(name, "not UTF-8"));
        Embedder::from_bytes(
            device,
            &text("config.json")?,
            &text("tokenizer.json")?,
            &read("model.safetensors")?,
        )
    }

    /// The width of an embedding.
    pub fn dim(&self) -> usize {
        self.config.hidden
    }

    /// The model's shape.
    pub fn config(&self) -> &BertConfig {
        &self.config
    }

    /// The tokenizer.
    pub fn tokenizer(&self) -> &WordPiece {
        &self.tokenizer
    }

    /// One L2-normalised embedding per text, in order. Texts longer than the model's 512
    /// positions are truncated; a large batch runs in parts of at most
    /// [`Embedder::MAX_BATCH`] texts, each part sorted by length so that little padding is
    /// computed, so memory stays bounded whatever the number of texts.
    pub async fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        let ids: Vec<Vec<u32>> = texts.iter().map(|t| self.tokenizer.encode(t)).collect();
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let mut out = vec![Vec::new(); ids.len()];
        for part in order.chunks(Self::MAX_BATCH) {
            let batch: Vec<Vec<u32>> = part.iter().map(|&i| ids[i].clone()).collect();
            let values = self.forward(&batch)?.read().await?;
            for (&i, v) in part.iter().zip(values.chunks(self.dim())) {
                out[i] = v.to_vec();
            }
        }
        Ok(out)
    }

    /// The most texts one forward pass takes (at 512 tokens each, its activations stay under
    /// 1.5 GB).
    pub const MAX_BATCH: usize = 64;

    /// Blocking [`Embedder::embed`].
    #[cfg(native)]
    pub fn embed_blocking(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        crate::future::block_on(self.embed(texts))
    }

    /// The normalised embeddings `[batch, hidden]` of tokenised texts (padded to the longest).
    fn forward(&self, ids: &[Vec<u32>]) -> Result<Tensor> {
        let (b, h) = (ids.len(), self.config.hidden);
        let s = ids.iter().map(Vec::len).max().unwrap_or(0);
        let lengths: Vec<u32> = ids.iter().map(|i| i.len() as u32).collect();
        let mut flat = Vec::with_capacity(b * s);
        for row in ids {
            flat.extend(row);
            flat.extend(std::iter::repeat_n(self.tokenizer.pad_id(), s - row.len()));
        }
        let ids = self.device.tensor_of(&flat, &[b, s])?;
        let x = self
            .word
            .embedding_ids(&ids)?
            .add(&self.positions.slice(0, 0..s)?)?
            .add(&self.token_type)?;
        let mut x = x.reshape(&[b * s, h])?.layer_norm(
            Some(&self.ln.0),
            Some(&self.ln.1),
            self.config.eps,
        )?;
        let options = AttentionOptions {
            key_lengths: Some(&lengths),
            ..Default::default()
        };
        for l in &self.layers {
            let qkv = x
                .linear(&l.qkv_w, Some(&l.qkv_b), None)?
                .reshape(&[b, s, 3 * h])?;
            let a = qkv.attention_packed(self.config.heads, self.config.heads, options)?;
            let a = a
                .reshape(&[b * s, h])?
                .linear(&l.out_w, Some(&l.out_b), None)?;
            x = a
                .add(&x)?
                .layer_norm(Some(&l.ln1.0), Some(&l.ln1.1), self.config.eps)?;
            let f = x.linear(&l.ff1_w, Some(&l.ff1_b), Some(Activation::Gelu))?;
            let f = f.linear(&l.ff2_w, Some(&l.ff2_b), None)?;
            x = f
                .add(&x)?
                .layer_norm(Some(&l.ln2.0), Some(&l.ln2.1), self.config.eps)?;
        }
        let pooled = x.reshape(&[b, s, h])?.masked_mean(&lengths)?;
        let norm = pooled.mul(&pooled)?.sum_last()?.sqrt()?.reshape(&[b, 1])?;
        pooled.div(&norm)
    }
}
