//! The ops that write into an existing storage rather than make a new one: a KV cache's new
//! rows (`write_rows`) and the one-row quantized product that stores its own columns there
//! (`matmul_quant_cached`). Only the backends that replay graphs have them.

use super::{BackendImpl, Storage};
use crate::error::Result;
use crate::ops::embedding::WriteRowsSpec;
#[cfg(feature = "models")]
use crate::ops::quant::{QuantAround, QuantMatmulSpec};

impl BackendImpl {
    /// Writes rows into `dst` in place (see [`WriteRowsSpec`]); only the backends that replay
    /// graphs have it.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn write_rows(
        &self,
        dst: &Storage,
        src: &Storage,
        at: &Storage,
        spec: WriteRowsSpec,
    ) -> Result<()> {
        match (self, dst, src, at) {
            (BackendImpl::Wgpu(be), Storage::Wgpu(d), Storage::Wgpu(s), Storage::Wgpu(a)) => {
                be.encode_write_rows(d, s, a, spec)
            }
            #[cfg(cuda)]
            (BackendImpl::Cuda(be), Storage::Cuda(d), Storage::Cuda(s), Storage::Cuda(a)) => {
                be.write_rows(d, s, a, spec)
            }
            (BackendImpl::Meta, ..) => Ok(()),
            _ => Err(crate::error::Error::InvalidArgument {
                op: "write_rows",
                reason: "in-place writes need a backend that replays graphs (wgpu or CUDA)".into(),
            }),
        }
    }

    /// The one-row quantized product of `spec` that also stores its columns `from..` as row
    /// `at[0]` of `cache` (`capacity` rows, held as `kv`), in one kernel: wgpu natively (see
    /// `WgpuBackend::caches_in_gemv`). `None` where the backend has no such kernel: the caller
    /// then multiplies and writes the rows apart.
    #[allow(clippy::too_many_arguments)]
    #[cfg(feature = "models")]
    pub(crate) fn matmul_quant_cached(
        &self,
        x: &Storage,
        w: &[&Storage],
        around: &QuantAround<'_, Storage>,
        spec: QuantMatmulSpec,
        (cache, at): (&Storage, &Storage),
        (from, capacity): (usize, usize),
        kv: crate::DType,
    ) -> Result<Option<Storage>> {
        match (self, x, cache, at) {
            (BackendImpl::Wgpu(be), Storage::Wgpu(x), Storage::Wgpu(c), Storage::Wgpu(a))
                if be.caches_in_gemv(&spec) =>
            {
                let w: Vec<&super::wgpu::WgpuStorage> =
                    w.iter().map(|s| s.as_wgpu()).collect::<Result<_>>()?;
                let around = around.try_map(Storage::as_wgpu)?;
                let target = super::wgpu::QuantCache {
                    cache: c,
                    at: a,
                    from: from as u64,
                    capacity: capacity as u64,
                    kv: super::wgpu::kv_code(kv),
                };
                let out = be.encode_matmul_quant_cached(
                    x,
                    spec.weight.parts(&w)?,
                    &around,
                    spec,
                    target,
                )?;
                Ok(Some(Storage::Wgpu(out)))
            }
            _ => Ok(None),
        }
    }
}
