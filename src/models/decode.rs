//! The KV cache of a generation and the decode step recorded once and replayed.
//!
//! On the backends that replay graphs (wgpu and CUDA) the cache is preallocated for the whole
//! generation, `[1, capacity, kv_heads, head_dim]` a layer, and written in place at a position
//! held on the device; so one decode step has the same shapes and buffers at every position,
//! and [`Decoder`] records it once as a [`Graph`] (a CUDA graph natively on NVIDIA, the kept
//! dispatches on wgpu) that takes the token's id, its position and the key count as inputs
//! (the embedding row is gathered on the device) and gives back only the chosen id (or the
//! sampling candidates). On the CPU backend,
//! where a graph would run its ops again anyway, the cache grows in place instead and each step
//! runs its ops directly.

use crate::batch::{Graph, Value};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::models::fused_step::FusedStep;
use crate::models::linear::Linear;
use crate::models::llama::Model;
use crate::ops::{AttentionLayout, AttentionOptions, RopeLayout};
use crate::{Batch, QuantMatmulOptions, Tensor};

/// Per layer, the keys and values of every position so far.
pub(crate) struct KvCache {
    store: Store,
    /// The keys' and values' dtype.
    dtype: DType,
    /// Positions filled.
    pub len: usize,
}

/// A layer's keys and values lie side by side, `[1, positions, 2 * kv_heads, head_dim]` (the
/// keys' heads first), as the fused projection makes them, so one write stores both.
enum Store {
    /// `len` positions a layer, grown by each step (in place on the CPU).
    Grown(Vec<Option<Tensor>>),
    /// `capacity` positions a layer, written in place.
    Fixed(Vec<Tensor>),
}

impl KvCache {
    /// A cache for `capacity` positions: preallocated where the device replays graphs.
    pub(crate) fn new(model: &Model, capacity: usize) -> Result<KvCache> {
        let c = &model.config;
        let store = if model.device.backend().replays() {
            let shape = [1, capacity, 2 * c.kv_heads, c.head_dim()];
            let zero = model
                .device
                .tensor(&[0.0], &[1, 1, 1, 1])?
                .cast(model.kv_cache)?;
            let mut layers = Vec::with_capacity(c.layers);
            for _ in 0..c.layers {
                // A copy of nothing: zeros (a buffer clear on wgpu, a memset on CUDA) without a
                // kernel reading a broadcast zero.
                layers.push(zero.copies(&[], shape.to_vec())?);
            }
            Store::Fixed(layers)
        } else {
            Store::Grown(vec![None; c.layers])
        };
        Ok(KvCache {
            store,
            dtype: model.kv_cache,
            len: 0,
        })
    }

    /// Positions the cache can hold, where it is preallocated.
    pub(crate) fn capacity(&self) -> Option<usize> {
        match &self.store {
            Store::Fixed(l) => l.first().map(|t| t.shape()[1]),
            Store::Grown(_) => None,
        }
    }

    /// Where a preallocated cache takes the next rows: `len` on the device (one u32).
    pub(crate) fn position(&self, model: &Model) -> Result<Option<Tensor>> {
        match self.store {
            Store::Fixed(_) => {
                let at = position(self.len)?;
                Ok(Some(model.device.tensor_of(&[at], &[1])?))
            }
            Store::Grown(_) => Ok(None),
        }
    }

    /// Appends `n` positions' keys and values (`[1, n, 2 * kv_heads, head_dim]`, possibly a
    /// view) to layer `i` and returns every position's so far (`at` from
    /// [`KvCache::position`]).
    pub(crate) fn append(&mut self, i: usize, kv: Tensor, at: Option<&Tensor>) -> Result<Tensor> {
        let end = self.len + kv.shape()[1];
        // In the cache's dtype. `kv` is a view of the projection: `write_rows` reads its rows in
        // place; a grown cache keeps row-major copies.
        let kv = kv.cast(self.dtype)?;
        match (&mut self.store, at) {
            (Store::Fixed(layers), Some(at)) => layers[i].write_rows(1, at, &kv)?.slice(1, 0..end),
            (Store::Grown(layers), _) => {
                let kv = kv.contiguous()?;
                let all = match layers[i].take() {
                    Some(old) => old.append_rows(&kv, 1)?,
                    None => kv,
                };
                layers[i] = Some(all.clone());
                Ok(all)
            }
            (Store::Fixed(_), None) => Err(Error::InvalidArgument {
                op: "llm",
                reason: "a preallocated KV cache needs the position".into(),
            }),
        }
    }
}

/// What a decode step gives back.
#[derive(Clone, Copy)]
enum Pick {
    /// The argmax id.
    Greedy(Value),
    /// `[2, k]`: the `k` largest logits, then their ids as f32.
    Candidates(Value, usize),
}

/// What one decode step returned.
pub(crate) enum Picked {
    /// The argmax id.
    Id(u32),
    /// The largest logits and their ids, largest first.
    Candidates(Vec<f32>, Vec<u32>),
}

/// One decode step of a model over a preallocated cache, recorded once and replayed (see the
/// module docs). Not `Send`: a generation belongs to the thread that made it.
pub(crate) struct Decoder {
    graph: Graph,
    /// The token's id, `[1]` u32.
    token: Value,
    /// Per head row, the RoPE table row it rotates by (see [`Model::rope_positions`]).
    rope_rows: Value,
    /// Where the step's keys and values go: the position.
    position: Value,
    /// The keys attention sees: the position + 1.
    keys: Value,
    pick: Pick,
    /// Whether the layers run as one fused op (read by the CUDA test).
    #[cfg_attr(not(all(test, cuda)), allow(dead_code))]
    fused: bool,
}

impl Decoder {
    /// Records the step for `cache` (which must be preallocated); `candidates` is `None` for
    /// an argmax, else how many of the largest logits come back.
    pub(crate) fn new(model: &Model, cache: &KvCache, candidates: Option<usize>) -> Result<Self> {
        Self::with_fusion(model, cache, candidates, true)
    }

    /// [`Decoder::new`], the whole step as one fused op where the device has one and `fuse`
    /// is set (see [`FusedStep`]); if recording that fails, the step is recorded op by op.
    pub(crate) fn with_fusion(
        model: &Model,
        cache: &KvCache,
        candidates: Option<usize>,
        fuse: bool,
    ) -> Result<Self> {
        let Store::Fixed(layers) = &cache.store else {
            return Err(Error::InvalidArgument {
                op: "llm",
                reason: "a recorded decode step needs a preallocated KV cache".into(),
            });
        };
        if fuse {
            if let Some(fused) = FusedStep::new(model, layers, candidates.is_none())? {
                match Self::record(model, layers, candidates, Some(fused)) {
                    Ok(d) => return Ok(d),
                    Err(e) => log::warn!(
                        "gpukit: recording the fused decoding layers failed ({e}); recording \
                         the step op by op"
                    ),
                }
            }
        }
        Self::record(model, layers, candidates, None)
    }

    fn record(
        model: &Model,
        layers: &[Tensor],
        candidates: Option<usize>,
        fused: Option<FusedStep>,
    ) -> Result<Self> {
        let c = &model.config;
        let rows = model.head_rows();
        let mut b = model.device.batch();
        let token = b.upload_of(&[0u32], &[1])?;
        // Compiling runs the step once with these inputs: a position past the end, where
        // the write is dropped, leaves the cache as it is.
        let end = layers.first().map_or(0, |t| t.shape()[1]);
        let position = b.upload_of(&[self::position(end)?], &[1])?;
        let keys = b.upload_of(&[1u32], &[1])?;
        let first: Vec<u32> = model.rope_positions(0).map(|r| r as u32).collect();
        let rope_rows = b.upload_of(&first, &[rows])?;
        let (cos, sin) = (
            b.tensor(&model.rope_table.0)?,
            b.tensor(&model.rope_table.1)?,
        );
        let fuses = fused.is_some();
        let pick = match fused {
            // The fused step gives back the argmax, or the logits when candidates are asked.
            Some(f) => {
                let inputs = [token, cos, sin, rope_rows, position, keys];
                let out = b.apply("decode_step", &inputs, move |t| f.run(t))?;
                match candidates {
                    None => Pick::Greedy(out),
                    Some(k) => pick_from(&mut b, out, Some(k))?,
                }
            }
            None => {
                let x = match &model.embed_table {
                    Linear::Quant(q) => b.embedding_quant_by(token, q.clone())?,
                    Linear::Dense(t) => {
                        let table = b.tensor(t)?;
                        let row = b.embedding_ids(table, token)?;
                        b.apply("cast", &[row], |t| t[0].cast(DType::F32))?
                    }
                };
                let inputs = StepInputs {
                    cos: b.embedding_ids(cos, rope_rows)?,
                    sin: b.embedding_ids(sin, rope_rows)?,
                    position,
                    keys,
                };
                let x = record_layers(&mut b, model, layers, x, inputs)?;
                let norm = b.tensor(&model.out_norm)?;
                let logits = linear_norm(&mut b, &model.lm_head, x, norm, c.eps)?;
                pick_from(&mut b, logits, candidates)?
            }
        };
        let (Pick::Greedy(out) | Pick::Candidates(out, _)) = pick;
        b.output(out)?;
        Ok(Decoder {
            graph: b.compile()?,
            token,
            rope_rows,
            position,
            keys,
            pick,
            fused: fuses,
        })
    }

    /// Runs the step for token `id` at the cache's next position, and moves the cache past
    /// it.
    pub(crate) async fn step(
        &mut self,
        model: &Model,
        id: u32,
        cache: &mut KvCache,
    ) -> Result<Picked> {
        let at = position(cache.len)?;
        if cache.capacity().is_none_or(|cap| cache.len >= cap) {
            return Err(Error::InvalidArgument {
                op: "llm",
                reason: "the KV cache is full".into(),
            });
        }
        let rope_rows: Vec<u32> = model.rope_positions(cache.len).map(|r| r as u32).collect();
        if id as usize >= model.config.vocab {
            return Err(Error::InvalidArgument {
                op: "llm",
                reason: format!("token id {id} is outside the vocabulary"),
            });
        }
        self.graph.set_input(self.token, &[id])?;
        self.graph.set_input(self.rope_rows, &rope_rows)?;
        self.graph.set_input(self.position, &[at])?;
        self.graph.set_input(self.keys, &[at + 1])?;
        let result = self.graph.run(&[]).await?;
        cache.len += 1;
        match self.pick {
            Pick::Greedy(v) => {
                let id = result.get_as::<u32>(v)?.first().copied();
                id.map(Picked::Id).ok_or_else(|| Error::InvalidArgument {
                    op: "llm",
                    reason: "no logits".into(),
                })
            }
            Pick::Candidates(v, k) => {
                let words = result.get(v)?;
                let (values, ids) = words.split_at(k.min(words.len()));
                Ok(Picked::Candidates(
                    values.to_vec(),
                    ids.iter().map(|&x| x as u32).collect(),
                ))
            }
        }
    }
}

/// Records what a step gives back from its logits: their argmax, or (`candidates`) the `k`
/// largest and their ids.
fn pick_from(b: &mut Batch, logits: Value, candidates: Option<usize>) -> Result<Pick> {
    Ok(match candidates {
        None => Pick::Greedy(b.argmax_last(logits)?),
        Some(k) => {
            let v = b.apply("topk", &[logits], move |t| {
                let (values, ids) = t[0].topk_last(k)?;
                Tensor::concat(&[&values, &ids.cast(DType::F32)?], 0)
            })?;
            Pick::Candidates(v, k)
        }
    })
}

/// What a recorded step's layers read besides the hidden state: each head row's RoPE table
/// rows, where the new keys and values go, and how many cache rows attention sees.
#[derive(Clone, Copy)]
struct StepInputs {
    cos: Value,
    sin: Value,
    position: Value,
    keys: Value,
}

/// Records the model's layers op by op over the preallocated cache `layers`, from the hidden
/// state `x`; returns the last layer's output.
fn record_layers(
    b: &mut Batch,
    model: &Model,
    layers: &[Tensor],
    mut x: Value,
    StepInputs {
        cos,
        sin,
        position,
        keys,
    }: StepInputs,
) -> Result<Value> {
    let c = &model.config;
    let (hd, heads, kv, rows) = (c.head_dim(), c.heads, c.kv_heads, model.head_rows());
    for (l, cached) in model.layers.iter().zip(layers) {
        let norm = b.tensor(&l.attn_norm)?;
        let cached = b.tensor(cached)?;
        let (qkv, cached) = qkv_into_cache(
            b,
            &l.qkv,
            x,
            (norm, c.eps),
            (cos, sin, hd),
            (cached, position),
            heads * hd,
        )?;
        let qkv = b.reshape(qkv, &[1, 1, rows, hd])?;
        let q = b.slice(qkv, 2, 0..heads)?;
        let k = b.slice(cached, 2, 0..kv)?;
        let v = b.slice(cached, 2, kv..2 * kv)?;
        let att = b.apply("attention", &[q, k, v, keys], |t| {
            let options = AttentionOptions {
                lengths: Some(t[3]),
                layout: AttentionLayout::Bshd,
                ..Default::default()
            };
            t[0].attention(t[1], t[2], options)
        })?;
        let att = b.reshape(att, &[1, c.hidden])?;
        x = linear_add(b, &l.o, att, x)?;
        let norm = b.tensor(&l.ffn_norm)?;
        let gate_up = linear_norm(b, &l.gate_up, x, norm, c.eps)?;
        x = linear_swiglu_add(b, &l.down, gate_up, x)?;
    }
    Ok(x)
}

/// Records `x x w^T` for a linear layer's weight.
fn linear(b: &mut Batch, w: &Linear, x: Value) -> Result<Value> {
    match w {
        Linear::Quant(q) => b.matmul_quant_by(x, q.clone()),
        Linear::Dense(t) => {
            let w = b.tensor(t)?;
            b.linear(x, w, None, None)
        }
    }
}

/// Records `rms_norm(x, norm, eps) x w^T` for a linear layer's weight: one kernel for a
/// quantized one.
fn linear_norm(b: &mut Batch, w: &Linear, x: Value, norm: Value, eps: f32) -> Result<Value> {
    match w {
        Linear::Quant(q) => b.matmul_quant_with_by(
            x,
            q.clone(),
            QuantMatmulOptions {
                rms_norm: Some((norm, eps)),
                ..Default::default()
            },
        ),
        Linear::Dense(_) => {
            let h = b.rms_norm(x, Some(norm), None, eps)?;
            linear(b, w, h)
        }
    }
}

/// Records `rope(rms_norm(x, norm, eps) x w^T)` for a linear layer's weight, the product's
/// rows of `dim` values rotated (interleaved pairs) by the tables' rows: one kernel for a
/// quantized one.
fn linear_norm_rope(
    b: &mut Batch,
    w: &Linear,
    x: Value,
    (norm, eps): (Value, f32),
    (cos, sin, dim): (Value, Value, usize),
) -> Result<Value> {
    match w {
        Linear::Quant(q) => {
            let rope = Some((cos, sin, RopeLayout::Interleaved));
            b.matmul_quant_with_by(
                x,
                q.clone(),
                QuantMatmulOptions {
                    rms_norm: Some((norm, eps)),
                    rope,
                    ..Default::default()
                },
            )
        }
        Linear::Dense(_) => {
            let y = linear_norm(b, w, x, norm, eps)?;
            let shape = b.shape(y)?.to_vec();
            let rows = shape.iter().product::<usize>() / dim.max(1);
            let y = b.reshape(y, &[rows, dim])?;
            let y = b.rope(y, cos, sin, RopeLayout::Interleaved)?;
            b.reshape(y, &shape)
        }
    }
}

/// Records [`linear_norm_rope`] of one row whose columns `from..` (the new key and value
/// rows) also go into the preallocated cache `cache` as its row `position`; returns the
/// product and the cache as written. One kernel for a quantized weight where the backend has
/// it (`Tensor::matmul_quant_caching`: wgpu natively), else the product, then `write_rows`.
fn qkv_into_cache(
    b: &mut Batch,
    w: &Linear,
    x: Value,
    (norm, eps): (Value, f32),
    (cos, sin, dim): (Value, Value, usize),
    (cache, position): (Value, Value),
    from: usize,
) -> Result<(Value, Value)> {
    let y = match w {
        Linear::Quant(q) => {
            let options = QuantMatmulOptions {
                rms_norm: Some((norm, eps)),
                rope: Some((cos, sin, RopeLayout::Interleaved)),
                ..Default::default()
            };
            b.matmul_quant_cached_by(x, q.clone(), options, (cache, position), from)?
        }
        Linear::Dense(_) => {
            let y = linear_norm_rope(b, w, x, (norm, eps), (cos, sin, dim))?;
            b.apply("write_rows", &[cache, position, y], move |t| {
                t[0].write_columns(t[1], t[2], from)?;
                Ok(t[2].clone())
            })?
        }
    };
    // The cache as read after the write: the same tensor, ordered after the product.
    let written = b.apply("cache_written", &[cache, y], |t| Ok(t[0].clone()))?;
    Ok((y, written))
}

/// Records `residual + x x w^T` for a linear layer's weight: one kernel for a quantized one.
fn linear_add(b: &mut Batch, w: &Linear, x: Value, residual: Value) -> Result<Value> {
    match w {
        Linear::Quant(q) => b.matmul_quant_with_by(
            x,
            q.clone(),
            QuantMatmulOptions {
                residual: Some(residual),
                ..Default::default()
            },
        ),
        Linear::Dense(_) => {
            let y = linear(b, w, x)?;
            b.add(residual, y)
        }
    }
}

/// Records `residual + swiglu(x) x w^T` for a linear layer's weight: one kernel for a
/// quantized one.
fn linear_swiglu_add(b: &mut Batch, w: &Linear, x: Value, residual: Value) -> Result<Value> {
    match w {
        Linear::Quant(q) => b.matmul_quant_with_by(
            x,
            q.clone(),
            QuantMatmulOptions {
                residual: Some(residual),
                swiglu: true,
                ..Default::default()
            },
        ),
        Linear::Dense(_) => {
            let gated = b.swiglu(x)?;
            linear_add(b, w, gated, residual)
        }
    }
}

/// A cache position as the u32 the kernels take.
fn position(len: usize) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::LimitExceeded {
        what: "a KV cache position".into(),
        limit: "u32 index range of the kernels",
        needed: len as u64,
        max: u32::MAX as u64,
    })
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "decode_tests.rs"]
mod tests;
