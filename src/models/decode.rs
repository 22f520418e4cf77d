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
use crate::models::fused_step::FusedLayers;
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
                layers.push(zero.broadcast_to(&shape)?.contiguous()?);
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
        // Row-major in the cache's dtype (`kv` is a view of the projection).
        let kv = kv.contiguous()?.cast(self.dtype)?;
        match (&mut self.store, at) {
            (Store::Fixed(layers), Some(at)) => layers[i].write_rows(1, at, &kv)?.slice(1, 0..end),
            (Store::Grown(layers), _) => {
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

    /// [`Decoder::new`], its layers as one fused op where the device has one and `fuse` is
    /// set (see [`FusedLayers`]); if recording that fails, the step is recorded op by op.
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
            if let Some(fused) = FusedLayers::new(model, layers)? {
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
        fused: Option<FusedLayers>,
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
        let cos = b.embedding_ids(cos, rope_rows)?;
        let sin = b.embedding_ids(sin, rope_rows)?;
        let fuses = fused.is_some();
        let x = match &model.embed_table {
            Linear::Quant(q) => b.embedding_quant_by(token, q.clone())?,
            Linear::Dense(t) => {
                let table = b.tensor(t)?;
                let row = b.embedding_ids(table, token)?;
                b.apply("cast", &[row], |t| t[0].cast(DType::F32))?
            }
        };
        let inputs = StepInputs {
            cos,
            sin,
            position,
            keys,
        };
        let x = match fused {
            Some(f) => b.apply("decode_layers", &[x, cos, sin, position, keys], move |t| {
                f.run(t)
            })?,
            None => record_layers(&mut b, model, layers, x, inputs)?,
        };
        let norm = b.tensor(&model.out_norm)?;
        let logits = linear_norm(&mut b, &model.lm_head, x, norm, c.eps)?;
        let pick = match candidates {
            None => Pick::Greedy(b.argmax_last(logits)?),
            Some(k) => {
                let v = b.apply("topk", &[logits], move |t| {
                    let (values, ids) = t[0].topk_last(k)?;
                    Tensor::concat(&[&values, &ids.cast(DType::F32)?], 0)
                })?;
                Pick::Candidates(v, k)
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
        let qkv = linear_norm_rope(b, &l.qkv, x, (norm, c.eps), (cos, sin, hd))?;
        let qkv = b.reshape(qkv, &[1, 1, rows, hd])?;
        let q = b.slice(qkv, 2, 0..heads)?;
        let new = b.slice(qkv, 2, heads..rows)?;
        let cached = b.tensor(cached)?;
        let cached = b.apply("write_rows", &[cached, new, position], |t| {
            t[0].write_rows(1, t[2], &t[1].cast(t[0].dtype())?)
        })?;
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
mod tests {
    use crate::{Backend, DType, Device};

    /// `write_rows` on the devices that have it: rows land at the device-held index, rows past
    /// the end are dropped, the rest is kept, and the CPU backend refuses it.
    #[test]
    fn write_rows_writes_in_place_and_drops_rows_past_the_end() {
        let mut devices = vec![Device::with_backend_blocking(Backend::Vulkan)
            .expect("make test installs lavapipe, so a Vulkan adapter exists")];
        devices.extend(Device::with_backend_blocking(Backend::Cuda).ok());
        for d in devices {
            let dst = d.tensor(&[0.5; 12], &[1, 4, 3]).unwrap();
            let rows = d
                .tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[1, 2, 3])
                .unwrap();
            for (at, want) in [
                (
                    1u32,
                    vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.5, 0.5, 0.5],
                ),
                (
                    3,
                    vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
                ),
                (
                    4,
                    vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
                ),
                (
                    u32::MAX,
                    vec![0.5, 0.5, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 1.0, 2.0, 3.0],
                ),
            ] {
                let at = d.tensor_of(&[at], &[1]).unwrap();
                let out = dst.write_rows(1, &at, &rows).unwrap();
                assert_eq!(out.read_blocking().unwrap(), want, "{:?}", d.info().backend);
                assert_eq!(dst.read_blocking().unwrap(), want, "{:?}", d.info().backend);
            }
            // Views: a dense one (rows 1..3, read in place at an offset) and a strided one.
            let src: Vec<f32> = (0..12).map(|x| x as f32).collect();
            let src = d.tensor(&src, &[1, 4, 3]).unwrap();
            let at = d.tensor_of(&[0u32], &[1]).unwrap();
            let dense = src.slice(1, 1..3).unwrap();
            let out = dst
                .write_rows(1, &at, &dense)
                .unwrap()
                .read_blocking()
                .unwrap();
            assert_eq!(out[..6], [3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
            let strided = src.reshape(&[1, 2, 6]).unwrap().slice(2, 3..6).unwrap();
            let out = dst
                .write_rows(1, &at, &strided)
                .unwrap()
                .read_blocking()
                .unwrap();
            assert_eq!(out[..6], [3.0, 4.0, 5.0, 9.0, 10.0, 11.0]);
            let wide = d.tensor(&[1.0; 4], &[1, 1, 4]).unwrap();
            assert!(dst.write_rows(1, &at, &wide).is_err(), "a wider row");
            let halves = rows.cast(DType::F16).unwrap();
            assert!(dst.write_rows(1, &at, &halves).is_err(), "another dtype");
            assert!(dst.write_rows(1, &rows, &rows).is_err(), "an f32 index");
        }
        let cpu = Device::cpu();
        let dst = cpu.tensor(&[0.5; 3], &[1, 1, 3]).unwrap();
        let at = cpu.tensor_of(&[0u32], &[1]).unwrap();
        let e = dst.write_rows(1, &at, &dst).unwrap_err().to_string();
        assert!(e.contains("replays graphs"), "{e}");
    }
    /// The fused decoding layers (CUDA) against the same step recorded op by op, from the same
    /// cache: the 16 largest logits of each step agree within 1e-3 of the largest in size for
    /// f32 and f16 caches and 4e-3 for bf16 (whose rounding of a key or value moves with the
    /// order of the sums before it; measured 1.1e-3), after a short prompt and after one of 600 tokens (16 chunks of
    /// 64 keys a head, two rounds each).
    #[cfg(cuda)]
    #[test]
    fn fused_layers_match_the_step_op_by_op_on_cuda() {
        use super::{Decoder, KvCache, Picked};
        use crate::models::{Llm, LlmOptions};
        let device = match Device::with_backend_blocking(Backend::Cuda) {
            Ok(d) => d,
            Err(e) if std::env::var_os("GPUKIT_REQUIRE_CUDA").is_some() => {
                panic!("GPUKIT_REQUIRE_CUDA is set but CUDA cannot run: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED (cuda): {e}");
                return;
            }
        };
        let path = std::env::var_os("GPUKIT_LLM_FILE").map_or_else(
            || {
                std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
            },
            std::path::PathBuf::from,
        );
        let bytes = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}: run scripts/fetch-models.sh", path.display()));
        let long = "The quick brown fox jumps over the lazy dog near the river bank. ".repeat(45);
        for kv_cache in [DType::F32, DType::F16, DType::BF16] {
            let options = LlmOptions {
                context: Some(700),
                kv_cache,
                ..Default::default()
            };
            let llm = Llm::from_bytes(&device, &bytes, options).unwrap();
            let model = &*llm.model;
            for text in ["Name a colour.", long.as_str()] {
                let prompt = model.tokenizer.encode(&Llm::chat_prompt(text));
                let mut cache = KvCache::new(model, 700).unwrap();
                model.forward(&prompt, &mut cache).unwrap();
                let mut fused = Decoder::with_fusion(model, &cache, Some(16), true).unwrap();
                assert!(fused.fused, "CUDA records the fused layers");
                let mut plain = Decoder::with_fusion(model, &cache, Some(16), false).unwrap();
                assert!(!plain.fused);
                let mut id = prompt[prompt.len() - 1];
                for step in 0..12 {
                    let a = crate::future::block_on(fused.step(model, id, &mut cache)).unwrap();
                    cache.len -= 1;
                    let b = crate::future::block_on(plain.step(model, id, &mut cache)).unwrap();
                    let (Picked::Candidates(va, ia), Picked::Candidates(vb, ib)) = (a, b) else {
                        panic!("candidates were asked for");
                    };
                    let scale = vb.iter().fold(0f32, |m, v| m.max(v.abs()));
                    let err = va
                        .iter()
                        .zip(&vb)
                        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                    let tol = if kv_cache == DType::BF16 { 4e-3 } else { 1e-3 };
                    assert!(
                        err <= tol * scale && va.iter().all(|v| v.is_finite()),
                        "{kv_cache} cache, {} prompt tokens, step {step}: {va:?} against {vb:?}",
                        prompt.len()
                    );
                    if vb[0] - vb[1] > 2e-3 * scale {
                        assert_eq!(ia[0], ib[0], "{kv_cache} cache, step {step}");
                    }
                    id = ib[0];
                }
                println!(
                    "{kv_cache} cache, {} prompt tokens: 12 steps agree",
                    prompt.len()
                );
            }
        }
    }
}
