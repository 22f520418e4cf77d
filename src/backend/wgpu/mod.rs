//! The wgpu backend: WebGPU in the browser; Vulkan, Metal, DX12 and GL natively.
//!
//! One [`Shared`] per device holds the wgpu device and queue and, behind one lock, the buffer
//! pool, the pipeline cache and the recorder of unsubmitted work. Errors that wgpu reports
//! through its uncaptured-error handler, and device loss, are stored and returned as `Err` by
//! the next call.

pub(crate) mod adapter;
mod bind_groups;
pub(crate) mod capture;
mod kernels;
#[cfg(feature = "models")]
pub(crate) use kernels::quant::QuantCache;
#[cfg(feature = "models")]
pub(crate) use pipelines::kv_code;
mod matmul_template;
pub(crate) mod pipelines;
pub(crate) mod pool;
#[cfg(native)]
mod profile;
mod recorder;
pub(crate) mod shaders;
pub(crate) mod tuner;
#[cfg(web)]
mod web_features;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{Error, Result};
use crate::future::oneshot;
use crate::info::{Backend, DeviceInfo};
use bind_groups::BindGroupCache;
use pipelines::PipelineCache;
use pool::{BufferPool, MemoryStats};
use recorder::Recorder;

/// Work retired since the last submit beyond which a submit is forced, so that memory of
/// dropped intermediates is recycled even when nothing reads back for a long time.
const RETIRED_FLUSH_BYTES: u64 = 256 << 20;

#[derive(Clone)]
pub(crate) struct WgpuBackend {
    shared: Arc<Shared>,
}

/// A device's state. `Shared` owns it through `ManuallyDrop` so that it is dropped (the last
/// buffers, pipelines and the wgpu device itself) under the driver lock, like its creation.
pub(crate) struct Shared {
    core: std::mem::ManuallyDrop<Core>,
}

impl std::ops::Deref for Shared {
    type Target = Core;

    fn deref(&self) -> &Core {
        &self.core
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        #[cfg(native)]
        let _driver = adapter::driver_lock();
        // SAFETY: `core` is dropped exactly once, here, and never used afterwards: this is
        // `Shared`'s destructor and nothing else drops the field.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.core) }
    }
}

pub(crate) struct Core {
    device: wgpu::Device,
    queue: wgpu::Queue,
    backend: Backend,
    limits: wgpu::Limits,
    state: Mutex<State>,
    /// The first error wgpu reported since it was last taken.
    error: Arc<Mutex<Option<Error>>>,
    /// Set once the device is lost.
    lost: Arc<Mutex<Option<String>>>,
    /// Names the adapter and driver in the autotuner's records.
    adapter_key: String,
    software: bool,
    /// Whether shader-f16 is enabled on the device.
    shader_f16: bool,
    /// Whether `Precision::F16` matmuls run on cooperative matrices (`adapter::cooperative_matrix`).
    coop_matrix: bool,
    /// Whether kernels using subgroup operations run: natively, where the device has
    /// subgroups of at least 4 invocations. (In the browser WGSL needs `enable subgroups;`,
    /// which naga 30 does not accept yet, so the portable kernels run there.)
    subgroup_kernels: bool,
    /// Times replays dispatch by dispatch when `GPUKIT_PROFILE_REPLAY` asks (`profile.rs`).
    #[cfg(native)]
    profiler: Option<Mutex<profile::Profiler>>,
    /// Held while a batch is encoded: batches of several threads take turns.
    batch_turn: Mutex<()>,
    /// Matmul size classes to tune at the next wait (browser only).
    pending_tunes: Mutex<Vec<tuner::Pending>>,
}

struct State {
    pool: BufferPool,
    recorder: Recorder,
    pipelines: PipelineCache,
    bind_groups: BindGroupCache,
    /// Set while a batch is encoded (capture::BatchScope).
    batch: Option<capture::BatchScope>,
}

impl State {
    /// The batch scope, for the thread encoding the batch only: other threads' ops on the same
    /// device meanwhile are neither captured nor given (or giving) the batch's buffers.
    fn scope(&mut self) -> Option<&mut capture::BatchScope> {
        self.batch
            .as_mut()
            .filter(|b| b.owner == std::thread::current().id())
    }

    /// Returns a buffer to the pool once no unsubmitted work can use it; inside a batch, to
    /// the batch's free list, for later ops of the same batch.
    fn retire(&mut self, buffer: wgpu::Buffer) {
        if let Some(b) = self.scope() {
            b.free.push(buffer);
            return;
        }
        let pending = self.recorder.pending();
        self.pool.retire(buffer, pending);
    }

    /// Retires a buffer that was filled by `write_buffer`: never reused inside a batch (a
    /// replay reads it again), kept by the batch until it ends.
    fn retire_upload(&mut self, buffer: wgpu::Buffer) {
        if let Some(b) = self.scope() {
            b.keep.push(buffer);
            return;
        }
        self.retire(buffer);
    }
}

/// A tensor's device buffer. Dropping it retires the buffer into the pool.
pub(crate) struct WgpuStorage {
    buffer: Option<wgpu::Buffer>,
    shared: Arc<Shared>,
    /// Filled by `write_buffer` (an upload): inside a batch it is kept until the batch ends,
    /// never handed to a later op of the batch, whose dispatch would overwrite it before a
    /// graph replays the op that reads it (the write happens once, when recorded).
    uploaded: bool,
}

impl WgpuStorage {
    /// Floats the buffer holds (at least the tensor's; pool size classes round up).
    #[cfg(native)]
    pub(crate) fn len(&self) -> usize {
        self.buffer.as_ref().map_or(0, |b| (b.size() / 4) as usize)
    }

    fn buffer(&self) -> Result<&wgpu::Buffer> {
        // Only `drop` takes the buffer, so a live storage always has one.
        self.buffer.as_ref().ok_or(Error::DeviceLost {
            reason: "tensor buffer already released".into(),
        })
    }
}

impl Drop for WgpuStorage {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            if self.uploaded {
                self.shared.state().retire_upload(b);
            } else {
                self.shared.state().retire(b);
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WgpuBackend {
    /// Opens a device on `adapter` with the adapter's own limits (not the defaults, so large
    /// tensors fit) and the optional features gpukit can use.
    pub(crate) async fn new(
        adapter: &wgpu::Adapter,
        selection: String,
    ) -> Result<(WgpuBackend, DeviceInfo)> {
        let mut info = adapter::describe(adapter);
        #[cfg(target_arch = "wasm32")]
        adapter::name_from_browser(&mut info).await;
        info.selection = selection;
        let backend = info.backend;
        let limits = adapter.limits();
        let coop_matrix = info.features.cooperative_matrix;
        let mut wanted =
            wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP | wgpu::Features::TIMESTAMP_QUERY;
        #[cfg(native)]
        if profile::wanted() {
            wanted |= wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
        }
        let mut experimental = wgpu::ExperimentalFeatures::disabled();
        if coop_matrix {
            wanted |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu asks callers of experimental features to accept that their
            // implementation may have bugs. gpukit uses only cooperative matrices, in one
            // kernel, whose results the op suite checks on the GPUs that have them, and
            // `GPUKIT_COOPERATIVE_MATRIX=0` leaves the feature off.
            experimental = unsafe { wgpu::ExperimentalFeatures::enabled() };
        }
        let descriptor = wgpu::DeviceDescriptor {
            label: Some("gpukit"),
            required_features: adapter.features() & wanted,
            required_limits: limits.clone(),
            experimental_features: experimental,
            ..Default::default()
        };
        #[cfg(native)]
        let requested = adapter::driver_serialized(|| {
            crate::future::block_on(adapter.request_device(&descriptor))
        });
        #[cfg(web)]
        let requested =
            web_features::requesting_subgroups(|| adapter.request_device(&descriptor)).await;
        let (device, queue) = requested.map_err(|e| Error::BackendUnavailable {
            backend,
            reason: format!("device request failed: {e}"),
        })?;

        let error: Arc<Mutex<Option<Error>>> = Arc::default();
        let slot = error.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut slot = lock(&slot);
            if slot.is_none() {
                *slot = Some(match e {
                    wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
                        detail: e.to_string(),
                    },
                    other => Error::Backend {
                        backend,
                        detail: other.to_string(),
                    },
                });
            }
        }));
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let lost_slot = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            *lock(&lost_slot) = Some(format!("{reason:?}: {msg}"));
        });

        let align = u64::from(limits.min_uniform_buffer_offset_alignment);
        let state = State {
            pool: BufferPool::default(),
            recorder: Recorder::new(&device, align),
            pipelines: PipelineCache::default(),
            bind_groups: BindGroupCache::default(),
            batch: None,
        };
        let shader_f16 = device.features().contains(wgpu::Features::SHADER_F16);
        #[cfg(native)]
        let subgroup_kernels = device.features().contains(wgpu::Features::SUBGROUP);
        // wgpu's web backend reports no subgroups: the device's own features say.
        #[cfg(web)]
        let subgroup_kernels = {
            info.features.subgroups = web_features::has_subgroups(&device);
            info.features.subgroups && web_features::has_subgroup_id()
        };
        let subgroup_kernels = subgroup_kernels && adapter.get_info().subgroup_min_size >= 4;
        #[cfg(native)]
        let profiler = profile::wanted()
            .then(|| {
                let stamps =
                    wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES;
                if device.features().contains(stamps) {
                    return Some(Mutex::new(profile::Profiler::new(
                        queue.get_timestamp_period(),
                    )));
                }
                log::warn!(
                    "GPUKIT_PROFILE_REPLAY: {} has no timestamps inside passes; replays are \
                     not profiled",
                    info.adapter
                );
                None
            })
            .flatten();
        let core = Core {
            device,
            queue,
            backend,
            limits,
            state: Mutex::new(state),
            error,
            lost,
            adapter_key: tuner::adapter_key(&info),
            software: info.software,
            shader_f16,
            coop_matrix,
            subgroup_kernels,
            #[cfg(native)]
            profiler,
            batch_turn: Mutex::default(),
            pending_tunes: Mutex::default(),
        };
        let shared = Shared {
            core: std::mem::ManuallyDrop::new(core),
        };
        Ok((
            WgpuBackend {
                shared: Arc::new(shared),
            },
            info,
        ))
    }

    pub(crate) fn memory_stats(&self) -> MemoryStats {
        let st = self.shared.state();
        MemoryStats {
            bind_group_hits: st.bind_groups.hits(),
            ..st.pool.stats()
        }
    }

    pub(crate) fn reset_peak_memory(&self) {
        self.shared.state().pool.reset_peak();
    }

    pub(crate) fn release_cached_memory(&self) {
        let mut st = self.shared.state();
        st.bind_groups.clear();
        st.pool.release();
    }

    /// The autotuner's records for this adapter.
    pub(crate) fn tuning(&self) -> Vec<tuner::TuneRecord> {
        self.shared.tune_records()
    }

    /// Whether the adapter runs the cooperative-matrix kernels (and so f16-storage products).
    pub(crate) fn coop_matrix(&self) -> bool {
        self.shared.coop_matrix
    }

    /// Tunes the matmul size class of `m x k x n` now, unless it has a record already.
    pub(crate) async fn tune_matmul(
        &self,
        shape: [u64; 3],
        precision: crate::ops::Precision,
    ) -> Result<tuner::TuneRecord> {
        let arith =
            pipelines::Arith::of(precision, self.shared.shader_f16, self.shared.coop_matrix);
        self.shared.tune_class(shape, arith).await
    }

    /// Destroys the device: its memory is released now, and every later call is
    /// `Error::DeviceLost`.
    pub(crate) fn destroy(&self, reason: &str) {
        let s = &self.shared;
        lock(&s.lost).get_or_insert_with(|| reason.to_string());
        s.state().pool.release();
        s.device.destroy();
    }

    /// Submits everything recorded so far without waiting.
    pub(crate) fn flush(&self) -> Result<()> {
        let s = &self.shared;
        s.submit(&mut s.state());
        s.check()
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Returns (and clears) the error wgpu reported, or the device loss.
    fn check(&self) -> Result<()> {
        if let Some(reason) = lock(&self.lost).clone() {
            return Err(Error::DeviceLost { reason });
        }
        match lock(&self.error).take() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn storage(self: &Arc<Self>, buffer: wgpu::Buffer) -> WgpuStorage {
        WgpuStorage {
            buffer: Some(buffer),
            shared: self.clone(),
            uploaded: false,
        }
    }

    /// A tensor buffer of at least `bytes`, within the device's limits.
    fn alloc(&self, st: &mut State, bytes: u64) -> Result<wgpu::Buffer> {
        if let Some(b) = st.scope() {
            if let Some(buffer) = b.take(pool::size_class(bytes)) {
                return Ok(buffer);
            }
        }
        let buffer = self.alloc_fresh(st, bytes)?;
        // A batch's footprint: what its ops took from the pool (not the tuner's scratch).
        if let Some(b) = st.scope() {
            b.taken_bytes += buffer.size();
        }
        Ok(buffer)
    }

    /// A tensor buffer from the pool, never one a batch freed: for `write_buffer` uploads,
    /// which run before the batch's dispatches and would overwrite what they read.
    fn alloc_fresh(&self, st: &mut State, bytes: u64) -> Result<wgpu::Buffer> {
        let class = pool::size_class(bytes);
        if class > self.limits.max_buffer_size {
            return Err(Error::LimitExceeded {
                what: format!("a tensor of {bytes} bytes"),
                limit: "max_buffer_size",
                needed: class,
                max: self.limits.max_buffer_size,
            });
        }
        if st.pool.retired_bytes() > RETIRED_FLUSH_BYTES {
            self.submit(st);
        }
        let buffer = st.pool.take(&self.device, bytes);
        if let Err(e) = self.check() {
            st.retire(buffer);
            return Err(e);
        }
        Ok(buffer)
    }

    fn submit(&self, st: &mut State) {
        st.recorder.submit(&self.queue);
        st.pool.submitted();
    }

    /// Blocks natively until submitted work is done (in the browser the event loop drives it).
    fn wait(&self) -> Result<()> {
        #[cfg(native)]
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::DeviceLost {
                reason: format!("waiting for the GPU failed: {e}"),
            })?;
        Ok(())
    }

    fn upload(self: &Arc<Self>, data: &[f32]) -> Result<WgpuStorage> {
        self.check()?;
        let bytes = std::mem::size_of_val(data) as u64;
        let buffer = self.alloc_fresh(&mut self.state(), bytes)?;
        if !data.is_empty() {
            self.queue
                .write_buffer(&buffer, 0, bytemuck::cast_slice(data));
        }
        Ok(WgpuStorage {
            buffer: Some(buffer),
            shared: self.clone(),
            uploaded: true,
        })
    }

    async fn read(self: &Arc<Self>, x: &WgpuStorage, n: usize) -> Result<Vec<f32>> {
        let mut all = self.read_many(&[(x, n)]).await?;
        Ok(all.pop().unwrap_or_default())
    }

    async fn synchronize(self: &Arc<Self>) -> Result<()> {
        self.submit(&mut self.state());
        self.idle().await?;
        self.check()?;
        self.tune_pending().await
    }

    /// Waits until all submitted work is done.
    async fn idle(&self) -> Result<()> {
        let (tx, rx) = oneshot();
        self.queue.on_submitted_work_done(move || tx.send(()));
        self.wait()?;
        rx.await.ok_or(Error::DeviceLost {
            reason: "the device stopped before finishing its work".into(),
        })
    }
}

#[cfg(all(test, native))]
mod tests {
    use super::*;
    use crate::backend::BackendOps;

    /// A wgpu validation error raised anywhere on the device is returned by the next call as
    /// `Err`, once, and the device keeps working.
    #[test]
    fn wgpu_errors_become_err_not_panics() {
        let (usable, _) = pollster::block_on(adapter::ranked(wgpu::Backends::all()));
        let (found, _) = usable
            .into_iter()
            .next()
            .expect("make test installs lavapipe, so an adapter exists");
        let (backend, _) = pollster::block_on(WgpuBackend::new(&found, String::new())).unwrap();
        // MAP_READ may only be combined with COPY_DST: wgpu reports a validation error.
        let _bad = backend
            .shared
            .device
            .create_buffer(&wgpu::BufferDescriptor {
                label: Some("invalid on purpose"),
                size: 64,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
        let e = backend
            .upload(&[1.0, 2.0])
            .err()
            .expect("the captured error is returned");
        assert!(matches!(e, Error::Backend { .. }), "{e}");
        assert!(
            e.to_string().contains("invalid on purpose") || e.to_string().contains("usage"),
            "{e}"
        );
        let s = backend
            .upload(&[1.0, 2.0])
            .expect("reported once; the device still works");
        assert_eq!(
            pollster::block_on(backend.read(&s, 2)).unwrap(),
            vec![1.0, 2.0]
        );
    }
}
