//! A decoding step's layers in one kernel where the device has one for them: CUDA, every
//! layer's linear weights quantized (Q8_0, Q4_0 or Q4_1), head widths 32 to 256 (see
//! `backend/cuda/decode.rs` and `shaders/cuda/decode_step.cu`). Elsewhere [`FusedLayers::new`]
//! gives `None` and the step records its ops one by one. `GPUKIT_FUSED_DECODE=0` turns it off;
//! `GPUKIT_DS_PROFILE=1` logs (at info) each generation's last step, stage by stage.

use crate::error::Result;
use crate::models::llama::Model;
use crate::Tensor;

/// The layers of a recorded step as one op.
pub(crate) struct FusedLayers {
    #[cfg(cuda)]
    inner: cuda::Inner,
}

impl FusedLayers {
    /// The fused layers for `model` over the preallocated `cache` layers, or `None` where the
    /// device or the model has no such kernel (or it is turned off).
    #[cfg_attr(not(cuda), allow(unused_variables))]
    pub(crate) fn new(model: &Model, cache: &[Tensor]) -> Result<Option<FusedLayers>> {
        if std::env::var("GPUKIT_FUSED_DECODE").as_deref() == Ok("0") {
            return Ok(None);
        }
        #[cfg(cuda)]
        {
            Ok(cuda::Inner::new(model, cache)?.map(|inner| FusedLayers { inner }))
        }
        #[cfg(not(cuda))]
        Ok(None)
    }

    /// The layers for one token (see `CudaBackend::decode_layers`): `x` `[1, hidden]`, the
    /// head rows' RoPE tables, the cache position and the key count; on a recording's
    /// shape-only device, a tensor of the output's shape.
    #[cfg_attr(not(cuda), allow(unused_variables))]
    pub(crate) fn run(&self, t: &[&Tensor]) -> Result<Tensor> {
        #[cfg(cuda)]
        {
            self.inner.run(t)
        }
        #[cfg(not(cuda))]
        Err(crate::error::Error::InvalidArgument {
            op: "llm",
            reason: "fused decoding layers exist on CUDA only".into(),
        })
    }
}

#[cfg(cuda)]
mod cuda {
    use crate::backend::cuda::decode::{DecodeStack, DsDims, DsLayer, DsWeight};
    use crate::backend::{BackendImpl, Storage};
    use crate::dtype::DType;
    use crate::error::{Error, Result};
    use crate::models::linear::Linear;
    use crate::models::llama::Model;
    use crate::{QuantFormat, QuantTensor, Tensor};

    pub(super) struct Inner {
        stack: DecodeStack,
        hidden: usize,
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
        pub(super) fn new(model: &Model, cache: &[Tensor]) -> Result<Option<Inner>> {
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
            let mut table = Vec::with_capacity(c.layers);
            let (mut weights, mut tensors) = (Vec::new(), Vec::new());
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
            Ok(be.decode_stack(dims, &table)?.map(|stack| Inner {
                stack,
                hidden: c.hidden,
                _weights: weights,
                _tensors: tensors,
            }))
        }

        pub(super) fn run(&self, t: &[&Tensor]) -> Result<Tensor> {
            let [x, cos, sin, position, keys] = t else {
                return Err(Error::InvalidArgument {
                    op: "llm",
                    reason: format!("fused decoding layers take 5 inputs, not {}", t.len()),
                });
            };
            let shape = vec![1, self.hidden];
            let device = x.device().clone();
            match device.backend() {
                BackendImpl::Meta => Ok(Tensor::new_typed(
                    device.clone(),
                    Storage::Meta,
                    shape,
                    DType::F32,
                )),
                BackendImpl::Cuda(be) => {
                    let whole = |t: &Tensor| -> Result<Tensor> {
                        if t.dense_offset() == Some(0) {
                            Ok((*t).clone())
                        } else {
                            t.contiguous()
                        }
                    };
                    let (x, cos, sin) = (whole(x)?, whole(cos)?, whole(sin)?);
                    let (position, keys) = (whole(position)?, whole(keys)?);
                    fn s(t: &Tensor) -> Result<&crate::backend::cuda::CudaStorage> {
                        t.storage().as_cuda()
                    }
                    let out = be.decode_layers(
                        &self.stack,
                        s(&x)?,
                        (s(&cos)?, s(&sin)?),
                        s(&position)?,
                        s(&keys)?,
                    )?;
                    Ok(Tensor::new(device.clone(), Storage::Cuda(out), shape))
                }
                _ => Err(Error::InvalidArgument {
                    op: "llm",
                    reason: "fused decoding layers run on CUDA only".into(),
                }),
            }
        }
    }
}
