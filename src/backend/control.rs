//! What a device asks of its backend besides ops, in backend-neutral calls: submitting,
//! memory statistics and limits, the matmul autotuner, profiling timers and reading many
//! tensors at once. `Device`, `batch` and `profile` call these instead of matching variants.

use web_time::Instant;

use super::{BackendImpl, Storage};
use crate::error::Result;
use crate::ops::Precision;
use crate::stats::{MemoryStats, TuneRecord};

/// When a profiled op started: a host instant, or an event on the CUDA stream.
pub(crate) enum TimerStart {
    Host(Instant),
    #[cfg(cuda)]
    Event(cudarc::driver::CudaEvent),
}

/// How long a profiled op took: host seconds, or a pair of CUDA events resolved at the summary
/// (reading them earlier would wait for the GPU).
pub(crate) enum Timing {
    Seconds(f64),
    #[cfg(cuda)]
    Events(cudarc::driver::CudaEvent, cudarc::driver::CudaEvent),
}

impl Timing {
    /// The seconds, or `None` where the events could not be read.
    pub(crate) fn seconds(&self) -> Option<f64> {
        match self {
            Timing::Seconds(t) => Some(*t),
            #[cfg(cuda)]
            Timing::Events(a, b) => a.elapsed_ms(b).ok().map(|ms| f64::from(ms) / 1e3),
        }
    }
}

impl From<super::wgpu::WgpuBackend> for BackendImpl {
    fn from(b: super::wgpu::WgpuBackend) -> BackendImpl {
        BackendImpl::Wgpu(b)
    }
}

#[cfg(cuda)]
impl From<super::cuda::CudaBackend> for BackendImpl {
    fn from(b: super::cuda::CudaBackend) -> BackendImpl {
        BackendImpl::Cuda(Box::new(b))
    }
}

impl BackendImpl {
    /// The CPU backend.
    pub(crate) fn cpu() -> BackendImpl {
        BackendImpl::Cpu(super::cpu::CpuBackend)
    }

    /// A shape-only backend, for recording batches.
    pub(crate) fn meta() -> BackendImpl {
        BackendImpl::Meta
    }

    /// This wgpu backend and the CPU behind one hybrid backend routed by `policy`; `None` for
    /// other backends.
    pub(crate) fn hybrid_with_cpu(&self, policy: crate::DispatchPolicy) -> Option<BackendImpl> {
        match self {
            BackendImpl::Wgpu(gpu) => Some(BackendImpl::Hybrid(Box::new(
                super::hybrid::Hybrid::new(gpu.clone(), policy),
            ))),
            _ => None,
        }
    }

    /// Whether the matmul takes operands of `dtype` (f16 or bf16) as they are stored, with
    /// the output in that dtype: cuBLAS on CUDA; the cooperative-matrix kernel on wgpu for f16
    /// with k and n multiples of 4 and nothing transposed. Elsewhere half-precision operands
    /// are converted around an f32 product.
    pub(crate) fn matmul_stores_halves(
        &self,
        dtype: crate::DType,
        dims: &crate::ops::matmul::MatmulDims,
        transposed: bool,
    ) -> bool {
        #[cfg(cuda)]
        if self.cuda().is_some() {
            return true;
        }
        match self {
            BackendImpl::Wgpu(b) => {
                b.coop_matrix()
                    && dtype == crate::DType::F16
                    && !transposed
                    && dims.k.is_multiple_of(4)
                    && dims.n.is_multiple_of(4)
            }
            _ => false,
        }
    }

    /// Whether the matmul takes a weight of `dtype` (f16 or bf16) as stored under f32 rows
    /// and output: on wgpu every shape (the tiled and GEMV kernels widen it as they read it,
    /// on every adapter: no shader-f16 needed); on the CPU the few-row products (rows up to
    /// 32, one product): a weight `[n, k]` read transposed with k at least 128 on every CPU,
    /// a weight `[k, n]` where AVX-512 runs. Elsewhere the weight is converted to f32 for the
    /// product.
    pub(crate) fn matmul_takes_half_weights(
        &self,
        dtype: crate::DType,
        dims: &crate::ops::matmul::MatmulDims,
        transpose_a: bool,
        transpose_b: bool,
    ) -> bool {
        let half = matches!(dtype, crate::DType::F16 | crate::DType::BF16);
        match self {
            BackendImpl::Wgpu(_) => half,
            BackendImpl::Cpu(_) => {
                half && !transpose_a
                    && dims.batch == 1
                    && super::cpu::CpuBackend::takes_half_weights(dims.m, dims.k, transpose_b)
            }
            _ => false,
        }
    }

    /// Whether attention of `dims` (batch, hq, hkv, sq, sk, d, dv) takes q, k and v of `dtype`
    /// (f16 or bf16) as stored, with the output in that dtype: the tensor-core kernel on CUDA
    /// (see `CudaBackend::attention_takes_halves` for the shapes it takes), the split decode
    /// kernel on wgpu (`WgpuBackend::attention_takes_halves`). Elsewhere half-precision
    /// operands are converted around the f32 kernels.
    pub(crate) fn attention_stores_halves(
        &self,
        dtype: crate::DType,
        dims: crate::ops::attention::Dims,
        strides: [crate::ops::attention::RowStrides; 3],
    ) -> bool {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            let (b, hq, _, sq, _, d, dv) = dims;
            return c.attention_takes_halves(dtype, (b, hq, sq), (d, dv), strides);
        }
        match self {
            BackendImpl::Wgpu(w) => w.attention_takes_halves(dtype, dims, strides),
            _ => false,
        }
    }

    /// Whether products longer than [`WGPU_MAX_K`](crate::ops::matmul::WGPU_MAX_K) are split
    /// along k: natively on wgpu adapters (lavapipe's loop limit).
    #[cfg(native)]
    pub(crate) fn splits_long_products(&self) -> bool {
        self.wgpu().is_some()
    }

    /// Destroys the adapter's device on wgpu (elsewhere the loss flag alone stops work).
    pub(crate) fn destroy(&self, reason: &str) {
        if let Some(b) = self.wgpu() {
            b.destroy(reason);
        }
    }

    /// On CUDA, launches a kernel that writes through an invalid pointer and returns `true`;
    /// elsewhere `false` (the caller destroys the device instead).
    pub(crate) fn inject_fault(&self) -> Result<bool> {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            return c.launch_faulting_kernel().map(|()| true);
        }
        Ok(false)
    }

    /// Submits all enqueued work without waiting for it.
    pub(crate) fn flush(&self) -> Result<()> {
        match self.wgpu() {
            Some(b) => b.flush(),
            None => Ok(()),
        }
    }

    /// The matmul autotuner's records for this device's adapter (none without tiles).
    pub(crate) fn tuning(&self) -> Vec<TuneRecord> {
        match self.wgpu() {
            Some(b) => b.tuning(),
            None => Vec::new(),
        }
    }

    /// Tunes the size class of an `[m, k] x [k, n]` product; `None` without tiles.
    pub(crate) async fn tune_matmul(
        &self,
        [m, k, n]: [usize; 3],
        precision: Precision,
    ) -> Result<Option<TuneRecord>> {
        match self.wgpu() {
            Some(b) => {
                let shape = [m, n, k].map(|v| v as u64);
                b.tune_matmul(shape, precision).await.map(Some)
            }
            None => Ok(None),
        }
    }

    /// The memory pool's statistics (zero without a pool).
    pub(crate) fn memory_stats(&self) -> MemoryStats {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            return c.memory_stats();
        }
        match self.wgpu() {
            Some(b) => b.memory_stats(),
            None => MemoryStats::default(),
        }
    }

    /// Starts the peak of live bytes again from the bytes live now.
    pub(crate) fn reset_peak_memory(&self) {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            c.reset_peak_memory();
        }
        if let Some(b) = self.wgpu() {
            b.reset_peak_memory();
        }
    }

    /// Frees the buffers the pool keeps for reuse.
    pub(crate) fn release_cached_memory(&self) {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            c.release_cached_memory();
        }
        if let Some(b) = self.wgpu() {
            b.release_cached_memory();
        }
    }

    /// Caps the pool's bytes; `false` where this backend's pool has no limit.
    pub(crate) fn set_memory_limit(&self, bytes: Option<u64>) -> bool {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            c.set_memory_limit(bytes);
            return true;
        }
        let _ = bytes;
        false
    }

    /// Starts timing an op: an event on the CUDA stream (no waiting), else the host clock.
    pub(crate) fn start_timer(&self) -> Option<TimerStart> {
        #[cfg(cuda)]
        if let Some(c) = self.cuda() {
            return c.event().ok().map(TimerStart::Event);
        }
        Some(TimerStart::Host(Instant::now()))
    }

    /// Ends timing an op. Natively, wgpu work is waited for first, so the host time covers
    /// it; in the browser nothing can wait, and the time is the op's recording.
    pub(crate) fn stop_timer(&self, start: TimerStart) -> Option<Timing> {
        match start {
            #[cfg(cuda)]
            TimerStart::Event(begin) => {
                let end = self.cuda()?.event().ok()?;
                Some(Timing::Events(begin, end))
            }
            TimerStart::Host(t0) => {
                #[cfg(native)]
                if self.wgpu().is_some() {
                    if let Err(e) = crate::future::block_on(self.synchronize()) {
                        log::warn!("gpukit profiler: {e}");
                    }
                }
                Some(Timing::Seconds(t0.elapsed().as_secs_f64()))
            }
        }
    }

    /// Reads `(storage, length)` pairs in one submission and one wait on wgpu and CUDA; `None`
    /// elsewhere, where the caller reads tensor by tensor (a hybrid device's storages may sit
    /// on either side).
    pub(crate) async fn read_many(
        &self,
        xs: &[(&Storage, usize)],
    ) -> Result<Option<Vec<Vec<f32>>>> {
        match self {
            BackendImpl::Wgpu(b) => {
                let refs = xs
                    .iter()
                    .map(|(s, n)| Ok((s.as_wgpu()?, *n)))
                    .collect::<Result<Vec<_>>>()?;
                b.read_many(&refs).await.map(Some)
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(b) => {
                let refs = xs
                    .iter()
                    .map(|(s, n)| Ok((s.as_cuda()?, *n)))
                    .collect::<Result<Vec<_>>>()?;
                b.read_many(&refs).map(Some)
            }
            BackendImpl::Cpu(_) | BackendImpl::Hybrid(_) | BackendImpl::Meta => Ok(None),
        }
    }
}
