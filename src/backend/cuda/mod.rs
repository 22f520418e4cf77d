//! The CUDA backend (native, feature `cuda`): kernels of `shaders/cuda/` compiled by NVRTC
//! (PTX cached on disk), matmul and conv2d products on cuBLAS, one stream per device that every
//! op is enqueued on (so a batch is one stream of work and one wait), a pooled device memory
//! allocator, and pinned staging for read backs.
//!
//! - `props`: finding the driver and libraries, device queries;
//! - `module`: NVRTC compilation, the PTX cache and typed kernel entry points;
//! - `pool`: the device memory pool;
//! - `blas`: matmul, conv2d and the quantized matmul's large-batch path on cuBLAS;
//! - `fused`: generated kernels for fused elementwise expressions;
//! - `graph`: batches captured as CUDA graphs;
//! - `errors`: CUDA, NVRTC and cuBLAS failures as gpukit errors.

mod blas;
pub(crate) mod errors;
mod fused;
pub(crate) mod graph;
mod module;
mod pool;
pub(crate) mod props;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use bytemuck::{Pod, Zeroable};
use cudarc::cublas::CudaBlas;
use cudarc::driver::result as cu;
use cudarc::driver::{CudaContext, CudaStream, PinnedHostSlice};

use crate::backend::{BackendOps, Operand};
use crate::error::{Error, Result};
use crate::info::{Backend, CudaProperties, DeviceFeatures, DeviceInfo, DeviceLimits, DeviceType};
use crate::ops::attention::AttentionSpec;
use crate::ops::conv::{ConvSpec, PoolSpec};
use crate::ops::fused::{Expr, MAX_INPUTS};
use crate::ops::layout::{CopySpec, MAX_RANK};
use crate::ops::matmul::MatmulSpec;
use crate::ops::norm::NormSpec;
use crate::ops::RopeLayout;
use crate::ops::{BinaryOp, ReduceOp, UnaryOp};
use crate::quant::QuantParts;
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
    blas: Mutex<CudaBlas>,
    kernels: Kernels,
    pool: Arc<Mutex<Pool>>,
    staging: Mutex<Option<PinnedHostSlice<f32>>>,
    /// cuBLAS's workspace, set once so that captured graphs never allocate.
    _workspace: Buffer,
    graphs: graph::CaptureState,
}

impl CudaBackend {
    /// Opens CUDA device `ordinal`, or says why it cannot be used.
    pub(crate) fn new(ordinal: usize, selection: String) -> Result<(CudaBackend, DeviceInfo)> {
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
            blas: Mutex::new(blas),
            kernels,
            pool,
            staging: Mutex::new(None),
            _workspace: workspace,
            graphs: graph::CaptureState::default(),
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
        let f = self.kernels.function(entry)?;
        self.bind()?;
        // Kernels take at most 16 arguments; a fixed array keeps launches allocation-free.
        let mut ptrs = [std::ptr::null_mut::<c_void>(); 16];
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

    fn cublas(&self) -> std::sync::MutexGuard<'_, CudaBlas> {
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

    pub(crate) fn release_cached_memory(&self) {
        if self.bind().is_ok() {
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
        if self.bind().is_ok() {
            if let Err(e) = self.stream.synchronize() {
                log::warn!("gpukit: CUDA stream failed while closing the device: {e}");
            }
            pool::lock(&self.pool).release();
        }
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
            timestamp_query: true,
        },
        memory_bytes: Some(p.total_memory),
        selection,
        policy: None,
        cuda: Some(p.clone()),
    }
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct CopyParams {
    n: u64,
    rank: u64,
    in_offset: u64,
    out_offset: u64,
    shape: [u64; MAX_RANK],
    in_strides: [u64; MAX_RANK],
    out_strides: [u64; MAX_RANK],
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct PoolParams {
    planes: u64,
    h: u64,
    w: u64,
    oh: u64,
    ow: u64,
    kh: u64,
    kw: u64,
    sh: u64,
    sw: u64,
    ph: u64,
    pw: u64,
    max: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Im2colParams {
    c: u64,
    h: u64,
    w: u64,
    kh: u64,
    kw: u64,
    ow: u64,
    sh: u64,
    sw: u64,
    ph: u64,
    pw: u64,
    dh: u64,
    dw: u64,
    groups: u64,
    cg: u64,
    oy0: u64,
    rows: u64,
}

fn u(v: usize) -> Arg<'static> {
    Arg::U(v as u64)
}

fn p(s: &CudaStorage) -> Arg<'static> {
    Arg::P(s.ptr())
}

fn opt(s: Option<&CudaStorage>) -> Arg<'static> {
    Arg::P(s.map_or(0, CudaStorage::ptr))
}

impl BackendOps for CudaBackend {
    type Storage = CudaStorage;

    fn upload(&self, data: &[f32]) -> Result<CudaStorage> {
        let out = self.alloc(data.len())?;
        self.write(out.ptr(), data)?;
        Ok(out)
    }

    fn unary(&self, op: UnaryOp, x: &CudaStorage, n: usize) -> Result<CudaStorage> {
        let out = self.alloc(n)?;
        if n > 0 {
            let [p0, p1] = op.params();
            let args = [
                Arg::I(op.kind() as u32),
                Arg::F(p0),
                Arg::F(p1),
                p(x),
                p(&out),
                u(n),
            ];
            self.launch_1d(Entry::Unary, (n as u64).div_ceil(4), &args)?;
        }
        Ok(out)
    }

    fn binary(
        &self,
        op: BinaryOp,
        a: Operand<'_, CudaStorage>,
        b: Operand<'_, CudaStorage>,
        n: usize,
    ) -> Result<CudaStorage> {
        let out = self.alloc(n)?;
        if n > 0 {
            let args = [
                Arg::I(op as u32),
                p(a.0),
                u(a.1.max(1)),
                p(b.0),
                u(b.1.max(1)),
                p(&out),
                u(n),
            ];
            self.launch_1d(Entry::Binary, (n as u64).div_ceil(4), &args)?;
        }
        Ok(out)
    }

    fn reduce(
        &self,
        op: ReduceOp,
        x: &CudaStorage,
        rows: usize,
        cols: usize,
    ) -> Result<CudaStorage> {
        let out = self.alloc(rows)?;
        if rows == 0 {
            return Ok(out);
        }
        if cols == 0 {
            self.zero(&out, rows as u64 * 4)?;
            return Ok(out);
        }
        let args = [Arg::I(op as u32), p(x), u(rows), u(cols), p(&out)];
        self.launch_rows(Entry::ReduceRows, rows, cols, &args)?;
        Ok(out)
    }

    fn dot(&self, a: &CudaStorage, b: &CudaStorage, n: usize) -> Result<CudaStorage> {
        let out = self.alloc(1)?;
        if n == 0 {
            self.zero(&out, 4)?;
            return Ok(out);
        }
        let blocks = (n as u64).div_ceil(u64::from(BLOCK)).clamp(1, 1024) as usize;
        let partial = self.alloc(blocks)?;
        self.launch(
            Entry::DotPartial,
            (blocks as u32, 1, 1),
            BLOCK,
            0,
            &[p(a), p(b), u(n), p(&partial)],
        )?;
        let args = [
            Arg::I(ReduceOp::Sum as u32),
            p(&partial),
            u(1),
            u(blocks),
            p(&out),
        ];
        self.launch_rows(Entry::ReduceRows, 1, blocks, &args)?;
        Ok(out)
    }

    fn softmax(&self, x: &CudaStorage, rows: usize, cols: usize, log: bool) -> Result<CudaStorage> {
        let out = self.alloc(rows * cols)?;
        if rows * cols == 0 {
            return Ok(out);
        }
        // A few long rows would leave most of the GPU idle with a block per row: split them.
        const CHUNK: usize = 16384;
        if rows < 256 && cols >= 2 * CHUNK && rows <= 65535 {
            let chunks = cols.div_ceil(CHUNK);
            let pairs = self.alloc(2 * rows * chunks)?;
            let grid = (chunks as u32, rows as u32, 1);
            let args = [p(x), u(cols), u(CHUNK), p(&pairs)];
            self.launch(Entry::SoftmaxPartial, grid, 1024, 0, &args)?;
            let args = [
                p(x),
                u(cols),
                u(CHUNK),
                p(&pairs),
                Arg::I(log as u32),
                p(&out),
            ];
            self.launch(Entry::SoftmaxFinish, grid, 1024, 0, &args)?;
            return Ok(out);
        }
        let args = [p(x), u(rows), u(cols), Arg::I(log as u32), p(&out)];
        self.launch_rows(Entry::SoftmaxRows, rows, cols, &args)?;
        Ok(out)
    }

    fn matmul(
        &self,
        a: &CudaStorage,
        b: &CudaStorage,
        bias: Option<&CudaStorage>,
        spec: MatmulSpec,
    ) -> Result<CudaStorage> {
        blas::matmul(self, a, b, bias, spec)
    }

    fn fused(
        &self,
        expr: &Expr,
        inputs: &[Operand<'_, CudaStorage>],
        n: usize,
    ) -> Result<CudaStorage> {
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return Err(Error::InvalidArgument {
                op: "fused elementwise",
                reason: format!("{} inputs (1 to {MAX_INPUTS} supported)", inputs.len()),
            });
        }
        let out = self.alloc(n)?;
        if n == 0 {
            return Ok(out);
        }
        let entry = self.kernels.fused(expr)?;
        let mut args = Vec::with_capacity(2 * MAX_INPUTS + 2);
        for j in 0..MAX_INPUTS {
            match inputs.get(j) {
                Some((s, len)) => {
                    args.push(p(s));
                    args.push(u((*len).max(1)));
                }
                None => {
                    args.push(Arg::P(0));
                    args.push(u(1));
                }
            }
        }
        args.push(p(&out));
        args.push(u(n));
        self.launch_1d(entry, n as u64, &args)?;
        Ok(out)
    }

    fn norm(
        &self,
        x: &CudaStorage,
        weight: Option<&CudaStorage>,
        bias: Option<&CudaStorage>,
        spec: NormSpec,
    ) -> Result<CudaStorage> {
        let out = self.alloc(spec.rows * spec.cols)?;
        if spec.rows * spec.cols > 0 {
            let args = [
                p(x),
                opt(weight),
                opt(bias),
                u(spec.rows),
                u(spec.cols),
                Arg::I(spec.rms as u32),
                Arg::F(spec.eps),
                p(&out),
            ];
            self.launch_rows(Entry::NormRows, spec.rows, spec.cols, &args)?;
        }
        Ok(out)
    }

    fn copy(&self, parts: &[(&CudaStorage, CopySpec)], n: usize) -> Result<CudaStorage> {
        let out = self.alloc(n)?;
        let covered: usize = parts.iter().map(|(_, s)| s.len()).sum();
        if covered < n {
            self.zero(&out, n as u64 * 4)?;
        }
        for (src, spec) in parts {
            let total = spec.len();
            if total == 0 {
                continue;
            }
            let rank = spec.shape.len();
            if rank > MAX_RANK {
                return Err(Error::InvalidArgument {
                    op: "copy",
                    reason: format!("at most {MAX_RANK} axes, got {rank}"),
                });
            }
            let mut c = CopyParams::zeroed();
            c.n = total as u64;
            c.rank = rank.max(1) as u64;
            c.in_offset = spec.src_offset as u64;
            c.out_offset = spec.out_offset as u64;
            c.shape[0] = 1;
            for d in 0..rank {
                c.shape[d] = spec.shape[d] as u64;
                c.in_strides[d] = spec.src_strides[d] as u64;
                c.out_strides[d] = spec.out_strides[d] as u64;
            }
            let args = [Arg::Raw(bytemuck::bytes_of(&c)), p(src), p(&out)];
            self.launch_1d(Entry::CopyStrided, total as u64, &args)?;
        }
        Ok(out)
    }

    fn embedding(&self, table: &CudaStorage, ids: &[u32], dim: usize) -> Result<CudaStorage> {
        let out = self.alloc(ids.len() * dim)?;
        if ids.is_empty() || dim == 0 {
            return Ok(out);
        }
        let dev_ids = self.alloc(ids.len())?;
        self.write(dev_ids.ptr(), ids)?;
        let args = [p(table), p(&dev_ids), u(ids.len()), u(dim), p(&out)];
        self.launch_1d(Entry::Embedding, (ids.len() * dim) as u64, &args)?;
        Ok(out)
    }

    fn rope(
        &self,
        x: &CudaStorage,
        cos: &CudaStorage,
        sin: &CudaStorage,
        [n, seq, dim]: [usize; 3],
        layout: RopeLayout,
    ) -> Result<CudaStorage> {
        let out = self.alloc(n)?;
        if n == 0 || dim == 0 {
            return Ok(out);
        }
        let interleaved = matches!(layout, RopeLayout::Interleaved) as u32;
        let args = [
            p(x),
            p(cos),
            p(sin),
            u(n),
            u(seq.max(1)),
            u(dim),
            Arg::I(interleaved),
            p(&out),
        ];
        self.launch_1d(Entry::Rope, n as u64, &args)?;
        Ok(out)
    }

    fn attention(
        &self,
        q: &CudaStorage,
        k: &CudaStorage,
        v: &CudaStorage,
        lens: Option<&[u32]>,
        a: AttentionSpec,
    ) -> Result<CudaStorage> {
        const WARPS: usize = 4;
        let out = self.alloc(a.batch * a.hq * a.sq * a.dv)?;
        if a.batch * a.hq * a.sq * a.dv == 0 {
            return Ok(out);
        }
        let heads = a.batch * a.hq;
        if heads > 65535 {
            return Err(Error::LimitExceeded {
                what: "attention batch x heads".into(),
                limit: "CUDA grid y dimension",
                needed: heads as u64,
                max: 65535,
            });
        }
        let dev_lens = match lens {
            Some(l) => {
                let s = self.alloc(l.len())?;
                self.write(s.ptr(), l)?;
                Some(s)
            }
            None => None,
        };
        let shared = |tk: usize| (WARPS * a.d + tk * (a.d + 1) + tk * a.dv) * 4;
        let tk = if shared(32) <= 48 << 10 { 32 } else { 16 };
        let args = [
            p(q),
            p(k),
            p(v),
            opt(dev_lens.as_ref()),
            u(a.hq),
            u(a.hkv.max(1)),
            u(a.sq),
            u(a.sk),
            u(a.d),
            u(a.dv),
            Arg::I(a.causal as u32),
            Arg::F(a.scale),
            Arg::I(tk as u32),
            p(&out),
        ];
        let grid = (a.sq.div_ceil(WARPS) as u32, heads as u32, 1);
        self.launch(
            Entry::Attention,
            grid,
            (WARPS * 32) as u32,
            shared(tk) as u32,
            &args,
        )?;
        Ok(out)
    }

    fn topk(
        &self,
        x: &CudaStorage,
        rows: usize,
        cols: usize,
        k: usize,
    ) -> Result<(CudaStorage, CudaStorage)> {
        let values = self.alloc(rows * k)?;
        let indices = self.alloc(rows * k)?;
        if rows * k > 0 {
            let args = [p(x), u(rows), u(cols), u(k), p(&values), p(&indices)];
            let blocks = rows.clamp(1, 65535) as u32;
            self.launch(Entry::TopkRows, (blocks, 1, 1), BLOCK, 0, &args)?;
        }
        Ok((values, indices))
    }

    fn matmul_quant(
        &self,
        x: &CudaStorage,
        w: QuantParts<'_, CudaStorage>,
        m: usize,
    ) -> Result<CudaStorage> {
        blas::matmul_quant(self, x, w, m)
    }

    fn dequantize(&self, w: QuantParts<'_, CudaStorage>) -> Result<CudaStorage> {
        let n = w.rows * w.cols;
        let out = self.alloc(n)?;
        if n > 0 {
            let args = [
                Arg::I(w.format as u32),
                p(w.scales),
                opt(w.mins),
                p(w.words),
                u(w.rows),
                u(w.cols),
                p(&out),
            ];
            self.launch_1d(Entry::Dequantize, n as u64, &args)?;
        }
        Ok(out)
    }

    fn conv2d(
        &self,
        x: &CudaStorage,
        w: &CudaStorage,
        bias: Option<&CudaStorage>,
        spec: ConvSpec,
    ) -> Result<CudaStorage> {
        blas::conv2d(self, x, w, bias, spec)
    }

    fn pool2d(&self, x: &CudaStorage, s: PoolSpec) -> Result<CudaStorage> {
        let total = s.planes * s.oh * s.ow;
        let out = self.alloc(total)?;
        if total > 0 {
            let o = &s.opts;
            let params = PoolParams {
                planes: s.planes as u64,
                h: s.h as u64,
                w: s.w as u64,
                oh: s.oh as u64,
                ow: s.ow as u64,
                kh: o.kernel[0] as u64,
                kw: o.kernel[1] as u64,
                sh: o.stride[0] as u64,
                sw: o.stride[1] as u64,
                ph: o.padding[0] as u64,
                pw: o.padding[1] as u64,
                max: s.max as u32,
                _pad: 0,
            };
            let args = [Arg::Raw(bytemuck::bytes_of(&params)), p(x), p(&out)];
            self.launch_1d(Entry::Pool2d, total as u64, &args)?;
        }
        Ok(out)
    }

    async fn read(&self, x: &CudaStorage, n: usize) -> Result<Vec<f32>> {
        self.read_blocking(x, n)
    }

    async fn synchronize(&self) -> Result<()> {
        self.wait()
    }
}

impl Kernels {
    /// The entry point of the fused kernel of `expr`, generating its source on first use.
    fn fused(&self, expr: &Expr) -> Result<Entry> {
        let mut key = Vec::new();
        expr.key(&mut key);
        if let Some(id) = self.fused_id_of(&key) {
            return Ok(Entry::Fused(id));
        }
        let source = fused::fused_source(expr)?;
        let id = fused::fused_id(&source);
        self.register_fused(key, id, source);
        Ok(Entry::Fused(id))
    }
}
