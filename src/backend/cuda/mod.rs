//! The CUDA backend (native, feature `cuda`): kernels of `shaders/cuda/` compiled by NVRTC
//! (PTX cached on disk), matmul and conv2d products on cuBLAS, one stream per device that every
//! op is enqueued on (so a batch is one stream of work and one wait), a pooled device memory
//! allocator, and pinned staging for read backs.
//!
//! - `ops`: the `BackendOps` implementation (one launch or a few per op);
//! - `props`: finding the driver and libraries, device queries;
//! - `module`: NVRTC compilation, the PTX cache and typed kernel entry points;
//! - `pool`: the device memory pool;
//! - `blas`: matmul, conv2d and the quantized matmul's large-batch path on cuBLAS;
//! - `fused`: generated kernels for fused elementwise expressions;
//! - `graph`: batches captured as CUDA graphs;
//! - `errors`: CUDA, NVRTC and cuBLAS failures as gpukit errors.

mod attention;
mod blas;
#[cfg(feature = "models")]
pub(crate) mod decode;
mod elementwise;
pub(crate) mod errors;
mod fused;
pub(crate) mod graph;
mod module;
pub(crate) mod nccl;
mod ops;
mod pool;
pub(crate) mod props;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;
use cudarc::cublas::CudaBlas;
use cudarc::driver::result as cu;
use cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};

use crate::error::{Error, Result};
use crate::info::{Backend, CudaProperties, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
use crate::MemoryStats;
use module::{Entry, Kernels};
use pool::{Buffer, Pool};

/// A tensor's device memory on the CUDA backend.
pub(crate) struct CudaStorage {
    buf: Buffer,
}

impl CudaStorage {
    pub(crate) fn ptr(&self) -> u64 {
        self.buf.ptr()
    }
}

/// One kernel argument, passed by value.
#[derive(Clone, Copy)]
enum Arg<'a> {
    /// A device pointer (0 is null).
    P(u64),
    /// A 64-bit size.
    U(u64),
    /// A 32-bit code or flag.
    I(u32),
    F(f32),
    /// A `#[repr(C)]` parameter struct.
    Raw(&'a [u8]),
}

/// Threads per block of the grid-stride kernels.
const BLOCK: u32 = 256;

pub(crate) struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    /// Dropped by hand (see `Drop`): cudarc's drop unwraps cuBLAS's destroy, which can fail
    /// on a context lost to a fault.
    blas: Mutex<std::mem::ManuallyDrop<CudaBlas>>,
    kernels: Kernels,
    pool: Arc<Mutex<Pool>>,
    staging: Mutex<Option<PinnedHostSlice<f32>>>,
    /// cuBLAS's workspace, set once so that captured graphs never allocate.
    _workspace: Buffer,
    graphs: graph::CaptureState,
    /// The most shared memory one block may ask for (beyond 48 KB by opting in per kernel).
    shared_optin: u32,
    /// Streaming multiprocessors: how many blocks fill the GPU.
    multiprocessors: u32,
    /// Compute capability 8.0 or later: `mma.sync` on f16 and bf16, `cp.async`, `ldmatrix`.
    mma: bool,
    /// Kernels launch with programmatic stream serialization (compute capability 9.0 and
    /// later, unless `GPUKIT_CUDA_PDL=0`): each may start while the one before it finishes
    /// and waits in `WAIT_PRIOR` (common.cuh) for its writes, so launch latency overlaps the
    /// previous kernel's tail.
    pdl: bool,
}

impl CudaBackend {
    /// Opens CUDA device `ordinal`, or says why it cannot be used.
    pub(crate) fn new(ordinal: usize, selection: String) -> Result<(CudaBackend, DeviceInfo)> {
        let _exclusive = graph::exclusive();
        let count = props::device_count()?;
        if ordinal >= count {
            return Err(Error::BackendUnavailable {
                backend: Backend::Cuda,
                reason: if count == 0 {
                    "the driver found no CUDA device".into()
                } else {
                    format!(
                        "there is no CUDA device {ordinal} ({count} found: 0 to {})",
                        count - 1
                    )
                },
            });
        }
        let ctx = CudaContext::new(ordinal).map_err(errors::driver)?;
        // SAFETY: gpukit runs all work on one stream and manages buffers itself, so cudarc's
        // per-slice events (for several streams) are not needed.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(errors::driver)?;
        let blas = CudaBlas::new(stream.clone()).map_err(errors::blas)?;
        let (name, mut props) = props::query(ordinal)?;
        let (free, _) = ctx.mem_get_info().map_err(errors::driver)?;
        props.free_memory = free as u64;
        let pool = Arc::new(Mutex::new(Pool::default()));
        ctx.bind_to_thread().map_err(errors::driver)?;
        let workspace = pool::take(&pool, 32 << 20)?;
        // SAFETY: the workspace is device memory of this context that outlives the handle's
        // use (both live in the backend; the handle is dropped first, as declared first).
        unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                workspace.ptr() as *mut c_void,
                workspace.bytes() as usize,
            )
        }
        .result()
        .map_err(errors::blas)?;
        let kernels = Kernels::new(ctx.clone(), props.compute_capability, props.driver_version);
        let info = info(&name, &props, selection);
        let backend = CudaBackend {
            ctx,
            stream,
            blas: Mutex::new(std::mem::ManuallyDrop::new(blas)),
            kernels,
            pool,
            staging: Mutex::new(None),
            _workspace: workspace,
            graphs: graph::CaptureState::default(),
            shared_optin: props.shared_memory_per_block_optin,
            multiprocessors: props.multiprocessors,
            mma: props.compute_capability >= (8, 0),
            pdl: props.compute_capability >= (9, 0)
                && std::env::var("GPUKIT_CUDA_PDL").as_deref() != Ok("0"),
        };
        Ok((backend, info))
    }

    fn bind(&self) -> Result<()> {
        self.ctx.bind_to_thread().map_err(errors::driver)
    }

    /// A device buffer of `n` f32s (uninitialised).
    fn alloc(&self, n: usize) -> Result<CudaStorage> {
        self.alloc_bytes(n as u64 * 4)
    }

    fn alloc_bytes(&self, bytes: u64) -> Result<CudaStorage> {
        self.bind()?;
        Ok(CudaStorage {
            buf: pool::take(&self.pool, bytes)?,
        })
    }

    /// Enqueues a zero fill of the first `bytes` of `s`.
    fn zero(&self, s: &CudaStorage, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: `s` holds at least `bytes`; the fill is ordered on the stream.
        unsafe { cu::memset_d8_async(s.ptr(), 0, bytes as usize, self.cu_stream()) }
            .map_err(errors::driver)
    }

    /// Copies host values into device memory at `dst` (stream-ordered). While a graph is
    /// captured the values go through pinned memory that the graph keeps.
    fn write<T: Pod>(&self, dst: u64, data: &[T]) -> Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        self.bind()?;
        if self.graphs.capturing() {
            let bytes = bytemuck::cast_slice(data);
            return self
                .graphs
                .write_pinned(&self.ctx, self.cu_stream(), dst, bytes);
        }
        // SAFETY: `dst` holds at least `data`'s bytes (callers allocate it so); a copy from
        // pageable memory is staged by the driver before this returns.
        unsafe { cu::memcpy_htod_async(dst, data, self.cu_stream()) }.map_err(errors::driver)
    }

    /// A grid size for `items` work items of a grid-stride kernel.
    fn grid(items: u64) -> u32 {
        items.div_ceil(u64::from(BLOCK)).clamp(1, 1 << 20) as u32
    }

    fn launch(
        &self,
        entry: Entry,
        grid: (u32, u32, u32),
        block: u32,
        shared: u32,
        args: &[Arg<'_>],
    ) -> Result<()> {
        self.launch_as(entry, grid, block, shared, args, false)
    }

    /// Lets `f` launch with `shared` bytes of dynamic shared memory: past 48 KB a kernel opts
    /// in, and the opt-in is one attribute of the function, shared by every thread launching
    /// it. So it is set to the most the device allows beside the kernel's static shared
    /// memory, the same value from every caller: set to each launch's own size, a launch on
    /// another thread could lower it between this one's setting and launching (which then
    /// failed with CUDA_ERROR_INVALID_VALUE).
    pub(crate) fn opt_in_shared(
        &self,
        f: &cudarc::driver::CudaFunction,
        shared: u32,
    ) -> Result<()> {
        if shared <= 48 << 10 {
            return Ok(());
        }
        let fixed = f.shared_size_bytes().map_err(errors::driver)?.max(0) as u64;
        let most = u64::from(self.shared_optin).saturating_sub(fixed);
        if u64::from(shared) > most {
            return Err(Error::LimitExceeded {
                what: "a kernel's dynamic shared memory".into(),
                limit: "CUDA shared memory per block (opt-in)",
                needed: u64::from(shared),
                max: most,
            });
        }
        f.set_attribute(
            cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            most as i32,
        )
        .map_err(errors::driver)?;
        Ok(())
    }

    /// [`CudaBackend::launch`], cooperatively when `cooperative` (every block resident at
    /// once, as a grid-wide barrier needs; the driver refuses a grid too big for that) and
    /// then without programmatic serialization.
    fn launch_as(
        &self,
        entry: Entry,
        grid: (u32, u32, u32),
        block: u32,
        shared: u32,
        args: &[Arg<'_>],
        cooperative: bool,
    ) -> Result<()> {
        let f = self.kernels.function(entry)?;
        self.bind()?;
        self.opt_in_shared(&f, shared)?;
        // Kernels take at most 20 arguments; a fixed array keeps launches allocation-free.
        let mut ptrs = [std::ptr::null_mut::<c_void>(); 20];
        if args.len() > ptrs.len() {
            return Err(Error::Backend {
                backend: Backend::Cuda,
                detail: format!("internal error: {} kernel arguments", args.len()),
            });
        }
        for (slot, a) in ptrs.iter_mut().zip(args) {
            *slot = match a {
                Arg::P(v) | Arg::U(v) => v as *const u64 as *mut c_void,
                Arg::I(v) => v as *const u32 as *mut c_void,
                Arg::F(v) => v as *const f32 as *mut c_void,
                Arg::Raw(b) => b.as_ptr() as *mut c_void,
            };
        }
        let ptrs = &mut ptrs[..args.len()];
        // SAFETY: each pointer points at a live argument of the type and order the kernel
        // declares (the launch sites mirror the .cu signatures); buffers are large enough for
        // the sizes passed, which the ops layer validated.
        if self.pdl || cooperative {
            use cudarc::driver::sys;
            // SAFETY: an all-zero launch attribute value is a valid union of integers.
            let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
            let id = if cooperative {
                value.cooperative = 1;
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            } else {
                value.programmaticStreamSerializationAllowed = 1;
                sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            };
            let mut attr = sys::CUlaunchAttribute {
                id,
                pad: [0; 4],
                value,
            };
            let config = sys::CUlaunchConfig {
                gridDimX: grid.0,
                gridDimY: grid.1,
                gridDimZ: grid.2,
                blockDimX: block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: shared,
                hStream: self.cu_stream(),
                attrs: &mut attr,
                numAttrs: 1,
            };
            // SAFETY: as below; `config` and its attribute outlive the call, and every kernel
            // waits for the grid before it (WAIT_PRIOR) before it reads or writes memory.
            return unsafe {
                sys::cuLaunchKernelEx(
                    &config,
                    f.cu_function(),
                    ptrs.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            }
            .result()
            .map_err(errors::driver);
        }
        unsafe {
            cu::launch_kernel(
                f.cu_function(),
                grid,
                (block, 1, 1),
                shared,
                self.cu_stream(),
                ptrs,
            )
        }
        .map_err(errors::driver)
    }

    /// Launches a kernel that writes to an address no allocation holds, for tests of device
    /// loss: the context's next synchronisation fails with `CUDA_ERROR_ILLEGAL_ADDRESS`, a
    /// sticky error, and the context cannot run anything again.
    pub(crate) fn launch_faulting_kernel(&self) -> Result<()> {
        const SOURCE: &str =
            "extern \"C\" __global__ void fault(float* p) { p[threadIdx.x] = 1.0f; }";
        let ptx = cudarc::nvrtc::compile_ptx(SOURCE).map_err(|e| Error::ShaderCompilation {
            shader: "fault (test kernel)",
            detail: e.to_string(),
        })?;
        self.bind()?;
        let module = self.ctx.load_module(ptx).map_err(errors::driver)?;
        let f = module.load_function("fault").map_err(errors::driver)?;
        let bad: u64 = 0x10;
        let mut args = [&bad as *const u64 as *mut c_void];
        // SAFETY: deliberately unsound on the device (the point of the test): the kernel writes
        // through an invalid device pointer; the host passes one valid u64 argument as declared.
        unsafe {
            cu::launch_kernel(
                f.cu_function(),
                (1, 1, 1),
                (32, 1, 1),
                0,
                self.cu_stream(),
                &mut args,
            )
        }
        .map_err(errors::driver)
    }

    /// A grid-stride launch over `items` work items.
    fn launch_1d(&self, entry: Entry, items: u64, args: &[Arg<'_>]) -> Result<()> {
        self.launch(entry, (Self::grid(items), 1, 1), BLOCK, 0, args)
    }

    /// One block per row (up to 65535 blocks striding over the rows), threads by row length.
    fn launch_rows(&self, entry: Entry, rows: usize, cols: usize, args: &[Arg<'_>]) -> Result<()> {
        let threads = (cols.next_power_of_two() as u32).clamp(32, 1024);
        let blocks = rows.clamp(1, 65535) as u32;
        self.launch(entry, (blocks, 1, 1), threads, 0, args)
    }

    fn cublas(&self) -> std::sync::MutexGuard<'_, std::mem::ManuallyDrop<CudaBlas>> {
        self.blas
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn memory_stats(&self) -> MemoryStats {
        pool::lock(&self.pool).stats()
    }

    pub(crate) fn reset_peak_memory(&self) {
        pool::lock(&self.pool).reset_peak();
    }

    /// Frees the pool's buffers once the work queued on the stream is done: a pooled buffer
    /// may still be read by a queued kernel, and freed memory can go to another device of the
    /// same context at once.
    pub(crate) fn release_cached_memory(&self) {
        if self.bind().is_ok() {
            if let Err(e) = self.stream.synchronize() {
                log::warn!("gpukit: CUDA stream failed before releasing memory: {e}");
            }
            pool::lock(&self.pool).release();
        }
    }

    pub(crate) fn set_memory_limit(&self, limit: Option<u64>) {
        pool::lock(&self.pool).set_limit(limit);
    }

    /// Records an event on the stream (for profiling).
    pub(crate) fn event(&self) -> Result<cudarc::driver::CudaEvent> {
        self.bind()?;
        self.stream
            .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(errors::driver)
    }

    /// Waits for every enqueued op (blocking).
    pub(crate) fn wait(&self) -> Result<()> {
        self.bind()?;
        self.graphs.wait_for_capture();
        self.stream.synchronize().map_err(errors::driver)
    }

    /// Copies the first `n` floats of `x` to the host through a reused pinned buffer.
    pub(crate) fn read_blocking(&self, x: &CudaStorage, n: usize) -> Result<Vec<f32>> {
        let mut all = self.read_many(&[(x, n)])?;
        Ok(all.pop().unwrap_or_default())
    }

    /// Copies several tensors to the host with one wait: every copy is enqueued into one
    /// reused pinned buffer, then the stream is waited on once.
    pub(crate) fn read_many(&self, parts: &[(&CudaStorage, usize)]) -> Result<Vec<Vec<f32>>> {
        let total: usize = parts.iter().map(|(_, n)| n).sum();
        if total == 0 {
            return Ok(parts.iter().map(|_| Vec::new()).collect());
        }
        self.bind()?;
        self.graphs.wait_for_capture();
        let mut staging = self
            .staging
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if staging.as_ref().is_none_or(|s| s.len() < total) {
            let len = crate::backend::wgpu::pool::size_class(total as u64 * 4) as usize / 4;
            *staging = None;
            // SAFETY: plain page-locked host memory (not write-combined: the host reads it).
            let fresh = unsafe { self.ctx.alloc_pinned_with_flags::<f32>(len, 0) }
                .map_err(errors::driver)?;
            *staging = Some(fresh);
        }
        let Some(pinned) = staging.as_mut() else {
            return Err(Error::Backend {
                backend: Backend::Cuda,
                detail: "internal error: no staging buffer".into(),
            });
        };
        let host = pinned.as_mut_slice().map_err(errors::driver)?;
        let mut at = 0;
        for (x, n) in parts {
            if *n > 0 {
                // SAFETY: `x` holds at least `n` floats and the staging range is `n` long; the
                // wait below finishes the copy before the host reads it.
                unsafe {
                    cu::memcpy_dtoh_async(&mut host[at..at + n], x.ptr(), self.stream.cu_stream())
                }
                .map_err(errors::driver)?;
            }
            at += n;
        }
        self.stream.synchronize().map_err(errors::driver)?;
        let mut at = 0;
        Ok(parts
            .iter()
            .map(|(_, n)| {
                let v = host[at..at + n].to_vec();
                at += n;
                v
            })
            .collect())
    }

    /// Writes new values into an existing tensor (graph inputs).
    pub(crate) fn overwrite(&self, x: &CudaStorage, data: &[f32]) -> Result<()> {
        if data.len() as u64 * 4 > x.buf.bytes() {
            return Err(Error::Backend {
                backend: Backend::Cuda,
                detail: "internal error: new input data is larger than its tensor".into(),
            });
        }
        self.write(x.ptr(), data)
    }
}

impl Drop for CudaBackend {
    /// Frees what the pool keeps once queued work is done (live tensors cannot outlive the
    /// device: they hold it).
    fn drop(&mut self) {
        let _exclusive = graph::exclusive();
        let healthy = self.bind().is_ok() && {
            match self.stream.synchronize() {
                Ok(()) => true,
                Err(e) => {
                    log::warn!("gpukit: CUDA stream failed while closing the device: {e}");
                    false
                }
            }
        };
        if healthy {
            pool::lock(&self.pool).release();
        }
        let blas = self
            .blas
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if healthy {
            // SAFETY: dropped once, here; the field is never used after the backend's drop.
            unsafe { std::mem::ManuallyDrop::drop(blas) };
        }
        // On a lost context the handle is left to the process's end: destroying it may fail,
        // and cudarc would panic on that failure.
    }
}

fn info(name: &str, p: &CudaProperties, selection: String) -> DeviceInfo {
    DeviceInfo {
        backend: Backend::Cuda,
        adapter: name.to_string(),
        vendor: "nvidia".into(),
        device_type: DeviceType::Discrete,
        software: false,
        driver: format!(
            "CUDA driver {}.{}, compute capability {}.{}",
            p.driver_version.0, p.driver_version.1, p.compute_capability.0, p.compute_capability.1
        ),
        limits: DeviceLimits {
            max_storage_binding: p.total_memory,
            max_buffer: p.total_memory,
            workgroup_storage: p.shared_memory_per_block,
            invocations_per_workgroup: p.max_threads_per_block,
            workgroups_per_dimension: p.max_grid[0],
        },
        features: DeviceFeatures {
            shader_f16: p.compute_capability >= (5, 3),
            subgroups: true,
            cooperative_matrix: p.compute_capability >= (7, 0),
            timestamp_query: true,
        },
        memory_bytes: Some(p.total_memory),
        selection,
        policy: None,
        cuda: Some(p.clone()),
    }
}
