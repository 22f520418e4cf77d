//! A BERT sentence encoder (all-MiniLM-L6-v2): token, position and type embeddings, encoder
//! layers of attention on the packed QKV projection and a GELU feed-forward, each followed by
//! a residual layer norm; then the mean of the real tokens' states, L2-normalised.

use super::bert_config::invalid;
pub use super::bert_config::BertConfig;
use crate::error::Result;
use crate::models::WordPiece;
use crate::ops::{Activation, AttentionOptions};
use crate::{DType, Device, Tensor};

mod session;
pub(crate) use session::Buckets;
pub use session::EmbedSession;

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
    /// The four linear weights again, stored `[k, n]` (`prepacked`): the CPU's products of
    /// more than [`CpuBackend::FEW_ROWS`](crate::backend::cpu::CpuBackend::FEW_ROWS) rows
    /// read them.
    packed: Option<[Tensor; 4]>,
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
    tokenizer: WordPiece,
    weights: Weights,
}

/// The model's shape and weights.
struct Weights {
    config: BertConfig,
    word: Tensor,
    positions: Tensor,
    token_type: Tensor,
    ln: (Tensor, Tensor),
    layers: Vec<Layer>,
}

/// How an [`Embedder`] holds its model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbedderOptions {
    /// The dtype of the linear layers' weights (the other tensors stay f32): `F32` (the
    /// default), or `F16`/`BF16` for half the memory. A half weight is kept only where the
    /// backend multiplies f32 rows by it as stored (wgpu and the CPU, natively and in wasm),
    /// so it also streams half the bytes; elsewhere (CUDA) the weights are f32 ([`Embedder::weight_dtype`]
    /// says which). Natively on the CPU, f32 weights are also kept a second time, stored
    /// `[k, n]` for batches gemm multiplies (twice the linear weights' memory).
    pub weights: DType,
}

impl Default for EmbedderOptions {
    fn default() -> Self {
        EmbedderOptions {
            weights: DType::F32,
        }
    }
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
        Embedder::from_bytes_with(
            device,
            config_json,
            tokenizer_json,
            weights,
            EmbedderOptions::default(),
        )
    }

    /// [`Embedder::from_bytes`] with options (the linear weights' dtype).
    pub fn from_bytes_with(
        device: &Device,
        config_json: &str,
        tokenizer_json: &str,
        weights: &[u8],
        options: EmbedderOptions,
    ) -> Result<Embedder> {
        if !matches!(options.weights, DType::F32 | DType::F16 | DType::BF16) {
            return Err(invalid(
                "EmbedderOptions::weights",
                format!("{} is not f32, f16 or bf16", options.weights.name()),
            ));
        }
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
            // Weights compute in f32 here; f16 and bf16 files are widened once, at load (the
            // linears' weights are then rounded to `linear` below).
            t.cast(DType::F32)
        };
        let (h, f) = (config.hidden, config.intermediate);
        // A linear layer's weight in the dtype asked for, where the backend reads it as stored.
        let keep_half = options.weights != DType::F32
            && device.backend().matmul_takes_half_weights(
                options.weights,
                &crate::ops::matmul::MatmulDims {
                    batch: 1,
                    m: 1,
                    k: h.min(f),
                    n: h,
                    a_stride: 0,
                    b_stride: 0,
                },
                false,
                true,
            );
        let linear = |t: Tensor| -> Result<Tensor> {
            if keep_half {
                t.cast(options.weights)
            } else {
                Ok(t)
            }
        };
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
                    qkv_w: linear(Tensor::concat(&[&q.0, &k.0, &v.0], 0)?)?,
                    qkv_b: Tensor::concat(&[&q.1, &k.1, &v.1], 0)?,
                    out_w: linear(take(
                        &format!("{p}.attention.output.dense.weight"),
                        &[h, h],
                    )?)?,
                    out_b: take(&format!("{p}.attention.output.dense.bias"), &[h])?,
                    ln1: (
                        take(&format!("{p}.attention.output.LayerNorm.weight"), &[h])?,
                        take(&format!("{p}.attention.output.LayerNorm.bias"), &[h])?,
                    ),
                    ff1_w: linear(take(&format!("{p}.intermediate.dense.weight"), &[f, h])?)?,
                    ff1_b: take(&format!("{p}.intermediate.dense.bias"), &[f])?,
                    ff2_w: linear(take(&format!("{p}.output.dense.weight"), &[h, f])?)?,
                    ff2_b: take(&format!("{p}.output.dense.bias"), &[h])?,
                    ln2: (
                        take(&format!("{p}.output.LayerNorm.weight"), &[h])?,
                        take(&format!("{p}.output.LayerNorm.bias"), &[h])?,
                    ),
                    packed: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let layers = prepacked(device, layers)?;
        Ok(Embedder {
            device: device.clone(),
            tokenizer,
            weights: Weights {
                config,
                word,
                positions,
                token_type,
                ln: emb_ln,
                layers,
            },
        })
    }

    /// An embedder from a model folder holding `config.json`, `tokenizer.json` and
    /// `model.safetensors` (as `scripts/fetch-models.sh` leaves them); a missing or unreadable
    /// file is an error naming it.
    #[cfg(native)]
    pub fn load(device: &Device, dir: impl AsRef<std::path::Path>) -> Result<Embedder> {
        Embedder::load_with(device, dir, EmbedderOptions::default())
    }

    /// [`Embedder::load`] with options (the linear weights' dtype).
    #[cfg(native)]
    pub fn load_with(
        device: &Device,
        dir: impl AsRef<std::path::Path>,
        options: EmbedderOptions,
    ) -> Result<Embedder> {
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
        Embedder::from_bytes_with(
            device,
            &text("config.json")?,
            &text("tokenizer.json")?,
            &read("model.safetensors")?,
            options,
        )
    }

    /// The dtype the linear layers' weights are held in (see [`EmbedderOptions::weights`]).
    pub fn weight_dtype(&self) -> DType {
        self.weights
            .layers
            .first()
            .map_or(DType::F32, |l| l.qkv_w.dtype())
    }

    /// The width of an embedding.
    pub fn dim(&self) -> usize {
        self.weights.config.hidden
    }

    /// The model's shape.
    pub fn config(&self) -> &BertConfig {
        &self.weights.config
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
        let ids = self.encode_all(texts);
        let mut out = vec![Vec::new(); ids.len()];
        for part in self.parts(&ids) {
            let batch: Vec<&[u32]> = part.iter().map(|&i| ids[i].as_slice()).collect();
            let x = Inputs::new(
                &batch,
                batch.len(),
                longest(&batch),
                self.tokenizer.pad_id(),
            );
            let d = &self.device;
            let (ids, lengths) = (
                d.tensor_of(&x.ids, &[x.batch, x.len])?,
                d.tensor_of(&x.lengths, &[x.batch])?,
            );
            let pool = d.tensor(&x.pool, &[x.batch, 1, x.len])?;
            let weights = self.weights.tensors();
            let config = &self.weights.config;
            // On the CPU the pass runs on the pool's threads (see `in_pool`); elsewhere here.
            let values = d
                .run_on_host_threads(|| forward(config, &weights, &ids, &lengths, &pool))?
                .read()
                .await?;
            for (&i, v) in part.iter().zip(values.chunks(self.dim())) {
                out[i] = v.to_vec();
            }
        }
        Ok(out)
    }

    /// The token ids of each text (natively on rayon's threads when there are many).
    fn encode_all(&self, texts: &[&str]) -> Vec<Vec<u32>> {
        #[cfg(native)]
        if texts.len() >= 8 {
            use rayon::prelude::*;
            return texts.par_iter().map(|t| self.tokenizer.encode(t)).collect();
        }
        texts.iter().map(|t| self.tokenizer.encode(t)).collect()
    }

    /// The texts' indices in parts of at most [`Embedder::MAX_BATCH`], each sorted by length.
    /// On the CPU a part also holds at most [`Embedder::CPU_TOKENS`] padded tokens (one text at
    /// least), so that its activations stay in the caches and the allocator reuses them.
    fn parts(&self, ids: &[Vec<u32>]) -> Vec<Vec<usize>> {
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&i| ids[i].len());
        let tokens = if self.device.info().backend == crate::Backend::Cpu {
            Self::CPU_TOKENS
        } else {
            usize::MAX
        };
        let mut parts: Vec<Vec<usize>> = Vec::new();
        for i in order {
            // Sorted by length: this text is the part's longest.
            let fits = parts.last().is_some_and(|p| {
                p.len() < Self::MAX_BATCH && (p.len() + 1).saturating_mul(ids[i].len()) <= tokens
            });
            match parts.last_mut() {
                Some(p) if fits => p.push(i),
                _ => parts.push(vec![i]),
            }
        }
        parts
    }

    /// A session that replays a compiled graph per (batch, length) bucket; see
    /// [`EmbedSession`].
    pub fn session(&self) -> EmbedSession<'_> {
        EmbedSession {
            embedder: self,
            buckets: Buckets::default(),
        }
    }

    /// The most texts one forward pass takes (at 512 tokens each, its activations stay under
    /// 1.5 GB).
    pub const MAX_BATCH: usize = 64;

    /// The most padded tokens one forward pass takes on the CPU backend.
    pub const CPU_TOKENS: usize = 1024;

    /// Blocking [`Embedder::embed`].
    #[cfg(native)]
    pub fn embed_blocking(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        crate::future::block_on(self.embed(texts))
    }
}

/// The longest of some token lists.
fn longest(ids: &[&[u32]]) -> usize {
    ids.iter().map(|i| i.len()).max().unwrap_or(0)
}

/// One forward pass's device inputs, padded to `batch` texts of `len` tokens: the ids, each
/// text's length (a padding text gets 1, so its row stays finite), and the pooling weights,
/// `1 / length` on a text's real tokens and 0 on its padding.
struct Inputs {
    batch: usize,
    len: usize,
    ids: Vec<u32>,
    lengths: Vec<u32>,
    pool: Vec<f32>,
}

impl Inputs {
    fn new(texts: &[&[u32]], batch: usize, len: usize, pad: u32) -> Inputs {
        let mut x = Inputs {
            batch,
            len,
            ids: Vec::with_capacity(batch * len),
            lengths: Vec::with_capacity(batch),
            pool: Vec::with_capacity(batch * len),
        };
        for r in 0..batch {
            let row = texts.get(r).copied().unwrap_or(&[]);
            let n = row.len().clamp(1, len.max(1));
            x.ids.extend(row);
            x.ids.extend(std::iter::repeat_n(pad, len - row.len()));
            x.lengths.push(n as u32);
            x.pool.extend(std::iter::repeat_n(1.0 / n as f32, n));
            x.pool.extend(std::iter::repeat_n(0.0, len - n));
        }
        x
    }
}

/// `layers` with a `[k, n]` copy of each linear weight where that makes the products faster,
/// natively on the CPU:
/// - f32 weights: gemm packs a weight on every call; from a weight stored `[n, k]` and read
///   transposed that packing is a strided gather, which made 32 sentences 10% slower on a
///   2-core EPYC (BENCHMARKS.md), and a few rows by a `[k, n]` weight run from it as stored
///   (`matmul_kn`). The copies double the linear weights' memory (42 MB more for
///   all-MiniLM-L6-v2).
/// - f16 and bf16 weights, where the CPU runs the few-row product by a `[k, n]` half-precision
///   weight (AVX-512): that product, for up to 32 rows. Both copies together take the memory
///   of the one f32 copy.
///
/// Other devices keep one copy.
fn prepacked(device: &Device, mut layers: Vec<Layer>) -> Result<Vec<Layer>> {
    let cpu = cfg!(native) && matches!(device.backend(), crate::backend::BackendImpl::Cpu(_));
    if !cpu {
        return Ok(layers);
    }
    for l in &mut layers {
        let ws = [&l.qkv_w, &l.out_w, &l.ff1_w, &l.ff2_w];
        let dtype = ws[0].dtype();
        if ws.iter().any(|w| w.dtype() != dtype) {
            continue;
        }
        if dtype != DType::F32 {
            let dims = crate::ops::matmul::MatmulDims {
                batch: 1,
                m: 1,
                k: ws[0].shape()[1],
                n: ws[0].shape()[0],
                a_stride: 0,
                b_stride: 0,
            };
            let backend = device.backend();
            if !backend.matmul_takes_half_weights(dtype, &dims, false, false) {
                continue;
            }
        }
        let t = |w: &Tensor| w.transpose(0, 1)?.contiguous();
        l.packed = Some([t(ws[0])?, t(ws[1])?, t(ws[2])?, t(ws[3])?]);
    }
    Ok(layers)
}

impl Weights {
    /// Every weight tensor, in the order [`forward`] reads them: per layer
    /// [`PER_LAYER`] tensors, then the four `[k, n]` copies where the layer has them.
    fn tensors(&self) -> Vec<&Tensor> {
        let mut w = vec![
            &self.word,
            &self.positions,
            &self.token_type,
            &self.ln.0,
            &self.ln.1,
        ];
        for l in &self.layers {
            w.extend([
                &l.qkv_w, &l.qkv_b, &l.out_w, &l.out_b, &l.ln1.0, &l.ln1.1, &l.ff1_w, &l.ff1_b,
                &l.ff2_w, &l.ff2_b, &l.ln2.0, &l.ln2.1,
            ]);
            w.extend(l.packed.iter().flatten());
        }
        w
    }
}

/// Weights per encoder layer in [`Weights::tensors`].
const PER_LAYER: usize = 12;

/// The normalised embeddings `[batch, hidden]` of token ids `[batch, len]` with their lengths
/// `[batch]` and pooling weights `[batch, 1, len]`, all device tensors (so a compiled graph
/// takes new ones); `w` holds the weights as [`Weights::tensors`] lists them (in a batch they
/// are its recorded tensors).
fn forward(
    config: &BertConfig,
    w: &[&Tensor],
    ids: &Tensor,
    lengths: &Tensor,
    pool: &Tensor,
) -> Result<Tensor> {
    let (&[b, s], h) = (ids.shape(), config.hidden) else {
        return Err(invalid("forward", "ids must be [batch, len]"));
    };
    // Per layer PER_LAYER weights, or those and the four `[k, n]` copies (`prepacked`).
    let per_layer = w.len().saturating_sub(5) / config.layers.max(1);
    if ![PER_LAYER, PER_LAYER + 4].contains(&per_layer) || w.len() != 5 + per_layer * config.layers
    {
        return Err(invalid("forward", "wrong number of weights"));
    }
    let rows = b * s;
    // Linear layer `i` (query-key-value, output, FFN up, FFN down) of layer weights `l`: the
    // weight `[n, k]` read transposed, or its `[k, n]` copy (`prepacked`): in f32 for more
    // rows than the CPU's unpacked product takes, or for every row count where a few rows run
    // from it as stored; in f16 or bf16 for a few rows.
    let few = rows <= crate::backend::cpu::CpuBackend::FEW_ROWS;
    let linear = |x: &Tensor, l: &[&Tensor], i: usize, act: Option<Activation>| {
        let (weight, bias) = ([0, 2, 6, 8][i], [1, 3, 7, 9][i]);
        let kn = |p: &Tensor| match p.dtype() {
            DType::F32 => !few || crate::backend::cpu::CpuBackend::few_rows_by_kn(),
            _ => few,
        };
        match l.get(PER_LAYER + i) {
            Some(packed) if kn(packed) => {
                let options = crate::ops::matmul::MatmulOptions {
                    bias: Some(l[bias]),
                    activation: act,
                    ..Default::default()
                };
                x.matmul_with(packed, options)
            }
            _ => x.linear(l[weight], Some(l[bias]), act),
        }
    };
    let x = w[0]
        .embedding_ids(ids)?
        .add(&w[1].slice(0, 0..s)?)?
        .add(w[2])?;
    let mut x = x
        .reshape(&[b * s, h])?
        .layer_norm(Some(w[3]), Some(w[4]), config.eps)?;
    let options = AttentionOptions {
        lengths: Some(lengths),
        ..Default::default()
    };
    for l in w[5..].chunks_exact(per_layer) {
        let qkv = linear(&x, l, 0, None)?.reshape(&[b, s, 3 * h])?;
        let a = qkv.attention_packed(config.heads, config.heads, options)?;
        let a = linear(&a.reshape(&[b * s, h])?, l, 1, None)?;
        x = a.add(&x)?.layer_norm(Some(l[4]), Some(l[5]), config.eps)?;
        let f = linear(&x, l, 2, Some(Activation::Gelu))?;
        let f = linear(&f, l, 3, None)?;
        x = f
            .add(&x)?
            .layer_norm(Some(l[10]), Some(l[11]), config.eps)?;
    }
    // Mean pooling over each text's real tokens: [b, 1, s] weights times [b, s, h].
    let pooled = pool.matmul(&x.reshape(&[b, s, h])?)?.reshape(&[b, h])?;
    let norm = pooled.mul(&pooled)?.sum_last()?.sqrt()?.reshape(&[b, 1])?;
    pooled.div(&norm)
}
