//! A decoding step in one kernel where the device has one for it: CUDA, every layer's linear
//! weights and the embedding table and LM head quantized (Q8_0, Q4_0 or Q4_1), head widths 32
//! to 256 (see `backend/cuda/decode.rs` and `shaders/cuda/decode_step.cu`). The kernel takes
//! the token's id and gives back the largest logit's index or every logit. Elsewhere
//! [`FusedStep::new`] gives `None` and the step records its ops one by one.
//! `GPUKIT_FUSED_DECODE=0` turns it off; `GPUKIT_DS_PROFILE=1` logs (at info) each
//! generation's last step, stage by stage.

use crate::error::Result;
use crate::models::llama::Model;
use crate::Tensor;

/// A recorded step's whole work, from the token's id to the pick, as one op.
pub(crate) struct FusedStep {
    #[cfg(cuda)]
    inner: cuda::Inner,
}

impl FusedStep {
    /// The fused step for `model` over the preallocated `cache` layers, giving back the
    /// largest logit's index (`argmax`) or the logits; `None` where the device or the model
    /// has no such kernel (or it is turned off).
    #[cfg_attr(not(cuda), allow(unused_variables))]
    pub(crate) fn new(model: &Model, cache: &[Tensor], argmax: bool) -> Result<Option<FusedStep>> {
        if std::env::var("GPUKIT_FUSED_DECODE").as_deref() == Ok("0") {
            return Ok(None);
        }
        #[cfg(cuda)]
        {
            Ok(cuda::Inner::new(model, cache, argmax)?.map(|inner| FusedStep { inner }))
        }
        #[cfg(not(cuda))]
        Ok(None)
    }

    /// The step for one token (see `CudaBackend::decode_layers`): the token's id, the RoPE
    /// tables, each head row's table row, the cache position and the key count (u32 `[1]`
    /// each but the tables); on a recording's shape-only device, a tensor of the output's
    /// shape and dtype: u32 `[1]` for the argmax, f32 `[1, vocab]` for the logits.
    #[cfg_attr(not(cuda), allow(unused_variables))]
    pub(crate) fn run(&self, t: &[&Tensor]) -> Result<Tensor> {
        #[cfg(cuda)]
        {
            self.inner.run(t)
        }
        #[cfg(not(cuda))]
        Err(crate::error::Error::InvalidArgument {
            op: "llm",
            reason: "the fused decoding step exists on CUDA only".into(),
        })
    }
}

#[cfg(cuda)]
mod cuda {
    use crate::backend::cuda::decode::{DecodeStack, DsDims, DsEnds, DsLayer, DsPick, DsWeight};
    use crate::backend::{BackendImpl, Storage};
    use crate::dtype::DType;
    use crate::error::{Error, Result};
    use crate::models::linear::Linear;
    use crate::models::llama::Model;
    use crate::{QuantFormat, QuantTensor, Tensor};

    pub(super) struct Inner {
        stack: DecodeStack,
        /// What the table points into: kept alive while the step may run.
        _weights: Vec<std::sync::Arc<QuantTensor>>,
        _tensors: Vec<Tensor>,
    }

    /// A whole tensor's device address.
    fn address(t: &Tensor) -> Option<u64> {
        match (t.storage(), t.dense_offset()) {
            (Storage::Cuda(s), Some(0)) => Some(s.ptr()),
            _ => None,
        }
    }

    fn weight(l: &Linear) -> Option<(DsWeight, std::sync::Arc<QuantTensor>)> {
        let Linear::Quant(q) = l else { return None };
        let ptr = |s: &Storage| s.as_cuda().ok().map(|c| c.ptr());
        let format = match q.format {
            QuantFormat::Q8_0 => 0,
            QuantFormat::Q4_0 => 1,
            QuantFormat::Q4_1 => 2,
        };
        let mins = match (&q.mins, q.format) {
            (Some(m), QuantFormat::Q4_1) => ptr(m)?,
            (None, QuantFormat::Q8_0 | QuantFormat::Q4_0) => 0,
            _ => return None,
        };
        Some((
            DsWeight {
                scales: ptr(&q.scales)?,
                mins,
                words: ptr(&q.words)?,
                format,
                pad: 0,
            },
            q.clone(),
        ))
    }

    impl Drop for Inner {
        fn drop(&mut self) {
            // The last step's stage times, where GPUKIT_DS_PROFILE asked for them (logged at
            // info).
            if let Some(BackendImpl::Cuda(be)) = self._tensors.first().map(|t| t.device().backend())
            {
                match be.decode_profile(&self.stack) {
                    Ok(Some(report)) => log::info!("gpukit: {report}"),
                    Ok(None) => {}
                    Err(e) => log::warn!("gpukit: no decode_layers profile: {e}"),
                }
            }
        }
    }

    impl Inner {
        pub(super) fn new(model: &Model, cache: &[Tensor], argmax: bool) -> Result<Option<Inner>> {
            let BackendImpl::Cuda(be) = model.device.backend() else {
                return Ok(None);
            };
            let c = &model.config;
            let elem = match model.kv_cache {
                DType::F32 => 0,
                DType::F16 => 1,
                DType::BF16 => 2,
                _ => return Ok(None),
            };
            let size = |v: usize| u32::try_from(v).ok();
            let capacity = cache.first().map_or(0, |t| t.shape()[1]);
            let (Some(layers), Some(hidden), Some(heads), Some(kv_heads)) = (
                size(c.layers),
                size(c.hidden),
                size(c.heads),
                size(c.kv_heads),
            ) else {
                return Ok(None);
            };
            let (Some(head_dim), Some(ffn), Some(capacity)) =
                (size(c.head_dim()), size(c.ffn), size(capacity))
            else {
                return Ok(None);
            };
            let dims = DsDims {
                layers,
                hidden,
                heads,
                kv_heads,
                head_dim,
                ffn,
                capacity,
                elem,
                eps: c.eps,
                scale: 1.0 / (head_dim as f32).sqrt(),
                ..DsDims::default()
            };
            let (mut weights, mut tensors) = (Vec::new(), Vec::new());
            // The embedding table and the LM head (one tensor when tied), and the output norm.
            let (Some(embed), Some(head), Some(norm)) = (
                weight(&model.embed_table),
                weight(&model.lm_head),
                address(&model.out_norm),
            ) else {
                return Ok(None);
            };
            let (e, h) = (&embed.1, &head.1);
            let (Some(embed_rows), Some(vocab)) = (size(e.rows), size(h.rows)) else {
                return Ok(None);
            };
            if e.cols != c.hidden || h.cols != c.hidden || model.out_norm.dtype() != DType::F32 {
                return Ok(None);
            }
            let pick = if argmax {
                DsPick::Argmax
            } else {
                DsPick::Logits
            };
            let ends = DsEnds {
                embed: embed.0,
                head: head.0,
                norm,
                embed_rows,
                vocab,
                pick: pick as u32,
                pad: 0,
            };
            weights.extend([embed.1, head.1]);
            tensors.push(model.out_norm.clone());
            let mut table = Vec::with_capacity(c.layers);
            for (l, kv) in model.layers.iter().zip(cache) {
                let (Some(qkv), Some(o), Some(gate_up), Some(down)) = (
                    weight(&l.qkv),
                    weight(&l.o),
                    weight(&l.gate_up),
                    weight(&l.down),
                ) else {
                    return Ok(None);
                };
                let (Some(attn_norm), Some(ffn_norm), Some(cache)) =
                    (address(&l.attn_norm), address(&l.ffn_norm), address(kv))
                else {
                    return Ok(None);
                };
                if l.attn_norm.dtype() != DType::F32 || l.ffn_norm.dtype() != DType::F32 {
                    return Ok(None);
                }
                table.push(DsLayer {
                    attn_norm,
                    ffn_norm,
                    cache,
                    qkv: qkv.0,
                    o: o.0,
                    gate_up: gate_up.0,
                    down: down.0,
                });
                weights.extend([qkv.1, o.1, gate_up.1, down.1]);
                tensors.extend([l.attn_norm.clone(), l.ffn_norm.clone(), kv.clone()]);
            }
            Ok(be.decode_stack(dims, ends, &table)?.map(|stack| Inner {
                stack,
                _weights: weights,
                _tensors: tensors,
            }))
        }

        pub(super) fn run(&self, t: &[&Tensor]) -> Result<Tensor> {
            let [token, cos, sin, rope_rows, position, keys] = t else {
                return Err(Error::InvalidArgument {
                    op: "llm",
                    reason: format!("the fused decoding step takes 6 inputs, not {}", t.len()),
                });
            };
            let (shape, dtype) = match self.stack.pick() {
                DsPick::Argmax => (vec![1], DType::U32),
                DsPick::Logits => (vec![1, self.stack.vocab()], DType::F32),
            };
            let device = token.device().clone();
            match device.backend() {
                BackendImpl::Meta => Ok(Tensor::new_typed(
                    device.clone(),
                    Storage::Meta,
                    shape,
                    dtype,
                )),
                BackendImpl::Cuda(be) => {
                    let whole = |t: &Tensor| -> Result<Tensor> {
                        if t.dense_offset() == Some(0) {
                            Ok((*t).clone())
                        } else {
                            t.contiguous()
                        }
                    };
                    let (token, cos, sin) = (whole(token)?, whole(cos)?, whole(sin)?);
                    let (rope_rows, position, keys) =
                        (whole(rope_rows)?, whole(position)?, whole(keys)?);
                    fn s(t: &Tensor) -> Result<&crate::backend::cuda::CudaStorage> {
                        t.storage().as_cuda()
                    }
                    let out = be.decode_layers(
                        &self.stack,
                        s(&token)?,
                        (s(&cos)?, s(&sin)?),
                        s(&rope_rows)?,
                        s(&position)?,
                        s(&keys)?,
                    )?;
                    Ok(Tensor::new_typed(
                        device.clone(),
                        Storage::Cuda(out),
                        shape,
                        dtype,
                    ))
                }
                _ => Err(Error::InvalidArgument {
                    op: "llm",
                    reason: "the fused decoding step runs on CUDA only".into(),
                }),
            }
        }
    }
}
