//! `Device`: backend selection and the entry point for creating tensors.
//!
//! Automatic selection ranks every usable adapter: a discrete GPU, then an integrated GPU,
//! then other wgpu adapters, then software adapters (llvmpipe, SwiftShader, WARP), then the CPU
//! backend. GL adapters come after every other API's, and are looked for only when no Vulkan,
//! Metal, DX12 or WebGPU adapter is usable. `GPUKIT_BACKEND` (native) or [`Device::with_backend`] choose explicitly; an explicit
//! choice that cannot run is an error saying why, never a silent substitute.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::open;
use crate::backend::BackendImpl;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::info::{Backend, DeviceInfo};
use crate::ops::Precision;
use crate::stats::{MemoryStats, TuneRecord};
use crate::tensor::Tensor;

/// A compute device. Cloning is cheap; clones share the device.
#[derive(Clone)]
pub struct Device {
    inner: Arc<Inner>,
}

struct Inner {
    backend: BackendImpl,
    info: DeviceInfo,
    profile: crate::profile::State,
    verify: crate::verify::Verifier,
    /// Why the device was lost, once it is (see `crate::loss`).
    lost: crate::loss::Loss,
}

static WARNED: AtomicBool = AtomicBool::new(false);

/// Logs, once per process, that work runs on a software adapter or the CPU.
fn warn_if_slow(info: &DeviceInfo) {
    if info.software && !WARNED.swap(true, Ordering::Relaxed) {
        log::warn!(
            "gpukit runs on {} ({}, {}): no hardware GPU is in use, expect it to be much slower",
            info.adapter,
            info.backend,
            info.device_type
        );
    }
}

impl Device {
    /// The best device available: `GPUKIT_BACKEND` if set (natively), otherwise automatic
    /// selection, falling back to the CPU backend (with a warning) when no adapter is usable.
    ///
    /// ```no_run
    /// # async fn demo() -> gpukit::Result<()> {
    /// let device = gpukit::Device::new().await?;
    /// println!("running on {} ({})", device.info().adapter, device.info().backend);
    /// # Ok(()) }
    /// ```
    pub async fn new() -> Result<Device> {
        #[cfg(native)]
        if let Ok(name) = std::env::var("GPUKIT_BACKEND") {
            let name = name.trim();
            if !name.is_empty() && !name.eq_ignore_ascii_case("auto") {
                let backend: Backend = name.parse()?;
                return Device::open(backend, format!("GPUKIT_BACKEND={name}")).await;
            }
        }
        Device::automatic().await
    }

    /// A device of exactly this backend, or an error that says why it cannot run here.
    pub async fn with_backend(backend: Backend) -> Result<Device> {
        Device::open(backend, format!("explicit choice of {backend}")).await
    }

    /// The best GPU adapter (hardware or software, any wgpu backend), never the CPU backend:
    /// [`Error::NoAdapter`] when there is none. For callers who would rather fail than fall back.
    pub async fn gpu() -> Result<Device> {
        Device::best_wgpu(|_, _| "explicit: Device::gpu (best adapter)".into())
            .await
            .map_err(|reason| Error::NoAdapter { reason })
    }

    /// The CPU backend; always available.
    pub fn cpu() -> Device {
        Device::from_parts(
            BackendImpl::cpu(),
            open::cpu_info("explicit choice of cpu".into()),
        )
    }

    /// The CPU backend chosen because no GPU is usable; `reason` says why, in `info().selection`
    /// and in the one warning of the process.
    pub(crate) fn cpu_fallback(reason: &str) -> Device {
        if !WARNED.swap(true, Ordering::Relaxed) {
            log::warn!("gpukit: {reason}; falling back to the CPU backend");
        }
        Device {
            inner: Arc::new(Inner {
                backend: BackendImpl::cpu(),
                info: open::cpu_info(format!("fallback: {reason}")),
                profile: Default::default(),
                verify: Default::default(),
                lost: Default::default(),
            }),
        }
    }

    /// The CPU backend without the once-per-process "no GPU in use" warning (for measuring).
    pub(crate) fn cpu_quiet() -> Device {
        Device {
            inner: Arc::new(Inner {
                backend: BackendImpl::cpu(),
                info: open::cpu_info("internal: measuring the CPU backend".into()),
                profile: Default::default(),
                verify: Default::default(),
                lost: Default::default(),
            }),
        }
    }

    /// A shape-only device (see `BackendImpl::Meta`), for recording batches.
    pub(crate) fn meta() -> Device {
        // Built from constants: every batch makes one, so nothing here may query the system
        // (the CPU backend's info reads /proc, which cost W5 as a batch about 0.3 ms on the H100
        // host).
        let info = DeviceInfo {
            backend: Backend::Cpu,
            adapter: "shapes only".into(),
            vendor: "gpukit".into(),
            device_type: crate::info::DeviceType::Cpu,
            software: true,
            driver: String::new(),
            limits: crate::info::DeviceLimits {
                max_storage_binding: u64::MAX,
                max_buffer: u64::MAX,
                workgroup_storage: 0,
                invocations_per_workgroup: 1,
                workgroups_per_dimension: u32::MAX,
            },
            features: crate::info::DeviceFeatures::default(),
            memory_bytes: None,
            selection: "shape-only device of a batch".into(),
            policy: None,
            cuda: None,
        };
        Device {
            inner: Arc::new(Inner {
                backend: BackendImpl::meta(),
                info,
                profile: Default::default(),
                verify: Default::default(),
                lost: Default::default(),
            }),
        }
    }

    fn from_opened((backend, info): open::Opened) -> Device {
        Device::from_parts(backend, info)
    }

    fn from_parts(backend: BackendImpl, info: DeviceInfo) -> Device {
        warn_if_slow(&info);
        let device = Device {
            inner: Arc::new(Inner {
                backend,
                info,
                profile: Default::default(),
                verify: Default::default(),
                lost: Default::default(),
            }),
        };
        // GPUKIT_VERIFY=1 checks every op of a GPU device against the CPU backend.
        #[cfg(native)]
        if device.info().backend != Backend::Cpu
            && std::env::var("GPUKIT_VERIFY").is_ok_and(|v| v.trim() == "1")
        {
            return device.with_verification();
        }
        device
    }

    async fn automatic() -> Result<Device> {
        #[cfg(cuda)]
        match open::first_cuda() {
            Ok(opened) => return Ok(Device::from_opened(opened)),
            Err(e) => log::info!("gpukit: CUDA not chosen: {e}"),
        }
        let why = |info: &DeviceInfo, total: usize| {
            let software = if info.software { ", software" } else { "" };
            format!(
                "automatic: best of {total} usable adapter(s) ({}{software})",
                info.device_type
            )
        };
        match Device::best_wgpu(why).await {
            Ok(device) if device.info().software => Ok(device.with_measured_policy().await),
            Ok(device) => Ok(device),
            Err(reason) => Ok(Device::cpu_fallback(&format!("no usable GPU ({reason})"))),
        }
    }

    /// On a software adapter: the CPU backend when the measured policy found it faster at
    /// every size, else the adapter; either way with the policy in `info().policy`. A failed
    /// measurement keeps the adapter (and says so).
    async fn with_measured_policy(self) -> Device {
        let policy = match crate::policy::for_adapter(&self).await {
            Ok(p) => p,
            Err(e) => {
                log::warn!(
                    "gpukit: could not measure {} against the CPU: {e}",
                    self.info().adapter
                );
                return self;
            }
        };
        let summary = policy.summary();
        log::info!("gpukit: {summary}");
        if policy.prefers_cpu() {
            let mut info = open::cpu_info(format!(
                "automatic: only a software adapter ({}), slower than the CPU backend at every \
                 size; {summary}",
                self.info().adapter
            ));
            info.policy = Some(policy);
            return Device::from_parts(BackendImpl::cpu(), info);
        }
        let mut info = self.inner.info.clone();
        info.selection = format!("{}; {summary}", info.selection);
        info.policy = Some(policy.clone());
        match self.backend().hybrid_with_cpu(policy) {
            Some(hybrid) => Device::from_parts(hybrid, info),
            None => self,
        }
    }

    /// A device that runs each op on `adapter` or on the CPU backend, by `policy`: ops of a
    /// class at or above the policy's crossover size on the adapter, the rest on the CPU, with
    /// inputs moved to where the op runs (in the browser, an op whose input is already on the
    /// adapter stays there, since a read back cannot block). Automatic selection builds one when
    /// the best adapter is a software one that the measurement found faster for large work;
    /// this constructor lets you set the crossovers yourself ([`DispatchPolicy::fixed`]).
    ///
    /// [`DispatchPolicy::fixed`]: crate::DispatchPolicy::fixed
    pub fn hybrid(adapter: &Device, policy: crate::DispatchPolicy) -> Result<Device> {
        let Some(hybrid) = adapter.backend().hybrid_with_cpu(policy.clone()) else {
            return Err(Error::InvalidArgument {
                op: "Device::hybrid",
                reason: format!(
                    "the adapter must be a wgpu device, not {} ({})",
                    adapter.info().adapter,
                    adapter.info().backend
                ),
            });
        };
        let mut info = adapter.info().clone();
        info.selection = format!(
            "explicit: hybrid of {} and the CPU; {}",
            info.adapter,
            policy.summary()
        );
        info.policy = Some(policy);
        Ok(Device::from_parts(hybrid, info))
    }

    /// A device of `backend` on its adapter number `index`: the CUDA device ordinal for
    /// [`Backend::Cuda`], the index among that API's usable adapters (best first, as
    /// `gpukit devices` lists them) for wgpu backends, and only 0 for the CPU.
    pub async fn with_backend_at(backend: Backend, index: usize) -> Result<Device> {
        let selection = format!("explicit choice of {backend} device {index}");
        let opened = match backend {
            Backend::Cpu if index == 0 => open::cpu(selection),
            Backend::Cpu => {
                return Err(Error::BackendUnavailable {
                    backend,
                    reason: format!("the CPU backend has only device 0, not {index}"),
                })
            }
            Backend::Cuda => open::cuda(index, selection)?,
            _ => open::wgpu_at(backend, index, selection).await?,
        };
        Ok(Device::from_opened(opened))
    }

    /// The best usable wgpu adapter, or why none could be opened.
    async fn best_wgpu(
        why: impl Fn(&DeviceInfo, usize) -> String,
    ) -> std::result::Result<Device, String> {
        open::best_wgpu(why).await.map(Device::from_opened)
    }

    async fn open(backend: Backend, selection: String) -> Result<Device> {
        let opened = match backend {
            Backend::Cpu => open::cpu(selection),
            Backend::Cuda => open::cuda(0, selection)?,
            other => open::wgpu_at(other, 0, selection).await?,
        };
        Ok(Device::from_opened(opened))
    }

    /// What this device is and why it was chosen.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    pub(crate) fn backend(&self) -> &BackendImpl {
        &self.inner.backend
    }

    /// Runs `f`, a sequence of ops, on the CPU backend's worker threads when this is the CPU
    /// device (its parallel kernels then share work with the other workers directly instead of
    /// each handing it over from outside and sleeping); elsewhere on this thread.
    #[cfg(native)]
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn run_on_host_threads<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        match self.backend() {
            BackendImpl::Cpu(_) => crate::backend::cpu::par::in_pool(f),
            _ => f(),
        }
    }

    /// In wasm the CPU backend has one thread: `f` runs here.
    #[cfg(web)]
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn run_on_host_threads<T>(&self, f: impl FnOnce() -> T) -> T {
        f()
    }

    /// The backend for the op of `spec`, timed while a profiler is on.
    pub(crate) fn op(&self, spec: &impl crate::ops::OpSpec) -> crate::profile::OpScope<'_> {
        crate::profile::OpScope::new(self, spec.name(), spec.work())
    }

    pub(crate) fn verifier(&self) -> &crate::verify::Verifier {
        &self.inner.verify
    }

    pub(crate) fn loss(&self) -> &crate::loss::Loss {
        &self.inner.lost
    }

    pub(crate) fn profile_state(&self) -> &crate::profile::State {
        &self.inner.profile
    }

    /// Starts collecting per-op timings (see [`Profiler`](crate::Profiler)); they stop when
    /// the profiler is dropped.
    pub fn profiler(&self) -> crate::Profiler {
        crate::Profiler::start(self)
    }

    /// Whether `other` is a handle to this same device (clones are; two devices opened on one
    /// adapter are not).
    pub fn same(&self, other: &Device) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Uploads `data` as a tensor of `shape` (`data.len()` must be the product of `shape`).
    /// The copy is enqueued; this returns at once.
    pub fn tensor(&self, data: &[f32], shape: &[usize]) -> Result<Tensor> {
        let n = self.check_output("tensor", shape)?;
        if n != data.len() {
            return Err(Error::shape(
                "tensor",
                &[data.len()],
                shape,
                "(the data length must be the product of the shape)",
            ));
        }
        let storage = self.inner.backend.upload(data)?;
        Ok(Tensor::new(self.clone(), storage, shape.to_vec()))
    }

    /// Uploads elements of any [`Element`](crate::Element) type as a tensor of its dtype:
    /// `device.tensor_of(&[1u32, 5, 9], &[3])` holds u32 ids, a slice of [`crate::f16`] an f16
    /// tensor (two bytes an element).
    pub fn tensor_of<T: crate::Element>(&self, data: &[T], shape: &[usize]) -> Result<Tensor> {
        let n = self.check_output_of("tensor_of", shape, T::DTYPE)?;
        if n != data.len() {
            return Err(Error::shape(
                "tensor_of",
                &[data.len()],
                shape,
                "(the data length must be the product of the shape)",
            ));
        }
        self.tensor_words(&crate::dtype::from_elements(data), shape, T::DTYPE)
    }

    /// A tensor of `dtype` from its stored words (see [`crate::dtype`]; `shape` checked).
    pub(crate) fn tensor_words(
        &self,
        words: &[f32],
        shape: &[usize],
        dtype: DType,
    ) -> Result<Tensor> {
        let n = self.check_output_of("tensor", shape, dtype)?;
        let want = crate::dtype::words("tensor", dtype, n)?;
        if words.len() != want {
            return Err(Error::shape(
                "tensor",
                &[words.len()],
                shape,
                "(the stored words do not match the shape)",
            ));
        }
        let storage = self.inner.backend.upload(words)?;
        Ok(Tensor::new_typed(
            self.clone(),
            storage,
            shape.to_vec(),
            dtype,
        ))
    }

    /// Checks that a tensor of `shape` can exist on this device, before anything is allocated:
    /// its element count fits `usize` (see [`crate::shape`]) and its bytes the device's largest
    /// buffer (`max_buffer`: the adapter's limit, the GPU's memory, or the host's memory for
    /// the CPU backend). Every op calls it for its output. Returns the element count.
    #[inline(never)]
    pub(crate) fn check_output(&self, op: &'static str, shape: &[usize]) -> Result<usize> {
        self.check_output_of(op, shape, DType::F32)
    }

    /// [`Device::check_output`] for an output of `dtype`.
    #[inline(never)]
    pub(crate) fn check_output_of(
        &self,
        op: &'static str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<usize> {
        self.check_lost()?;
        let n = crate::shape::numel(op, shape)?;
        crate::shape::bytes(op, shape, n, dtype.size(), self.info().limits.max_buffer)?;
        Ok(n)
    }

    /// A one-element tensor of shape `[]`, for broadcasting.
    pub fn scalar(&self, value: f32) -> Result<Tensor> {
        self.tensor(&[value], &[])
    }

    /// Submits all enqueued work without waiting for it.
    pub fn flush(&self) -> Result<()> {
        self.inner.backend.flush()
    }

    /// Waits until all enqueued work has finished on the device.
    pub async fn synchronize(&self) -> Result<()> {
        self.check_lost()?;
        self.note_loss(self.inner.backend.synchronize().await)?;
        self.verify_pending().await
    }

    /// What the matmul autotuner measured on this device's adapter: one record per size class
    /// tuned so far, in this process or (natively) an earlier one. Empty on the CPU backend.
    pub fn tuning(&self) -> Vec<TuneRecord> {
        self.inner.backend.tuning()
    }

    /// Tunes the matmul size class of an `[m, k] x [k, n]` product now instead of at its first
    /// use (in the browser, first uses run the default tile and tune at the next wait). Returns
    /// the class's record, which exists already if it was tuned before; `None` on the CPU
    /// backend, which has no tiles.
    pub async fn tune_matmul(
        &self,
        m: usize,
        k: usize,
        n: usize,
        precision: Precision,
    ) -> Result<Option<TuneRecord>> {
        self.inner.backend.tune_matmul([m, k, n], precision).await
    }

    /// Memory pool statistics (all zero on the CPU backend): bytes in use and pooled, the
    /// peak, allocations, reuses ([`MemoryStats::hit_rate`]).
    pub fn memory_stats(&self) -> MemoryStats {
        self.inner.backend.memory_stats()
    }

    /// Starts `peak_live_bytes` of [`Device::memory_stats`] again from the bytes live now, to
    /// measure the peak of the work that follows.
    pub fn reset_peak_memory(&self) {
        self.inner.backend.reset_peak_memory();
    }

    /// Frees the buffers the pool keeps for reuse (live tensors keep theirs).
    pub fn release_cached_memory(&self) {
        self.inner.backend.release_cached_memory();
    }

    /// Caps the bytes the device's memory pool holds (tensors and buffers kept for reuse):
    /// an allocation beyond it first frees the pooled buffers, then fails with
    /// [`Error::OutOfMemory`] instead of taking more of the device. `None` removes the cap.
    /// Only the CUDA backend's pool has a limit; elsewhere this is an error saying so.
    pub fn set_memory_limit(&self, bytes: Option<u64>) -> Result<()> {
        if self.inner.backend.set_memory_limit(bytes) {
            return Ok(());
        }
        Err(Error::InvalidArgument {
            op: "set_memory_limit",
            reason: format!(
                "the {} backend's memory has no pool limit (only CUDA's has one)",
                self.info().backend
            ),
        })
    }
}

/// Why CUDA cannot be chosen in this build (one without the `cuda` feature).
#[cfg(not(cuda))]
pub(crate) fn cuda_unavailable() -> String {
    if cfg!(web) {
        "CUDA does not exist in the browser".into()
    } else {
        "this build of gpukit was made without the `cuda` feature; use vulkan on NVIDIA GPUs".into()
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("backend", &self.inner.info.backend)
            .field("adapter", &self.inner.info.adapter)
            .finish()
    }
}
