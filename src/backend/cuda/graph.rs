//! Batches captured as CUDA graphs. `Batch::compile` on a CUDA device runs the batch's plan
//! with the calling thread's work going to a capture stream (other threads' launches and
//! copies on the device wait until the capture ends); the graph is then launched on the device's stream for the
//! first result, and `Graph::run` writes new inputs and launches it again: one launch for the
//! whole batch, no shape checks, planning or kernel lookups.
//!
//! While capturing, buffers the batch gives back are kept for the graph (it replays writes to
//! them) and host data an op uploads (embedding ids, key lengths) goes through pinned memory
//! the graph keeps; both are released when the graph is dropped.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

use cudarc::driver::result as cu;
use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaGraph, CudaStream, PinnedHostSlice};

use super::pool::{self, Pool};
use super::{errors, CudaBackend};
use crate::error::Result;

struct Active {
    thread: ThreadId,
    stream: Arc<CudaStream>,
    pinned: Vec<PinnedHostSlice<u8>>,
}

/// Which thread (if any) is capturing on a device.
#[derive(Default)]
pub(crate) struct CaptureState {
    flag: AtomicBool,
    active: Mutex<Option<Active>>,
    free: Condvar,
}

impl CaptureState {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Active>> {
        self.active
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The capture stream if the calling thread is capturing. Another thread's work waits
    /// until the capture ends: work on the device's stream beside a capture on the same
    /// context gave wrong results and invalidated captures on an H100 (tests on 8 threads),
    /// and a capture only records, so the wait is short.
    fn stream_of_this_thread(&self) -> Option<sys::CUstream> {
        if !self.flag.load(Ordering::Acquire) {
            return None;
        }
        let me = std::thread::current().id();
        let mut active = self.lock();
        loop {
            match active.as_ref() {
                Some(a) if a.thread == me => return Some(a.stream.cu_stream()),
                Some(_) => {
                    active = self
                        .free
                        .wait(active)
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                }
                None => return None,
            }
        }
    }

    /// Waits until no other thread captures on this device (see `stream_of_this_thread`).
    pub(crate) fn wait_for_capture(&self) {
        let _ = self.stream_of_this_thread();
    }

    pub(crate) fn capturing(&self) -> bool {
        self.stream_of_this_thread().is_some()
    }

    /// Copies `bytes` to `dst` through pinned memory kept until the graph is dropped.
    pub(crate) fn write_pinned(
        &self,
        ctx: &Arc<CudaContext>,
        stream: sys::CUstream,
        dst: u64,
        bytes: &[u8],
    ) -> Result<()> {
        // SAFETY: page-locked host memory of this context, written below before the copy.
        let mut pinned =
            unsafe { ctx.alloc_pinned_with_flags::<u8>(bytes.len(), 0) }.map_err(errors::driver)?;
        pinned
            .as_mut_slice()
            .map_err(errors::driver)?
            .copy_from_slice(bytes);
        let host = pinned.as_slice().map_err(errors::driver)?;
        // SAFETY: `dst` holds `bytes.len()` bytes; the pinned source lives as long as the graph.
        unsafe { cu::memcpy_htod_async(dst, host, stream) }.map_err(errors::driver)?;
        if let Some(a) = self.lock().as_mut() {
            a.pinned.push(pinned);
        }
        Ok(())
    }
}

/// A captured batch: the instantiated graph and what it keeps alive.
pub(crate) struct CudaReplay {
    graph: Option<CudaGraph>,
    kept: Vec<(u64, u64)>,
    _pinned: Vec<PinnedHostSlice<u8>>,
    pool: Arc<Mutex<Pool>>,
    /// Kernel launches and copies in the graph.
    pub(crate) nodes: usize,
}

impl Drop for CudaReplay {
    fn drop(&mut self) {
        // The graph goes first; its buffers then return to the pool (work still queued on the
        // device's stream is ordered before any later use of them).
        self.graph = None;
        pool::lock(&self.pool).reclaim(std::mem::take(&mut self.kept));
    }
}

/// Held (shared) by every capture in the process and (exclusively) while a CUDA device is
/// made or dropped: creating or destroying a device (streams, cuBLAS, memory) synchronises the
/// context, which invalidates a capture running on another device of the same GPU.
static CAPTURES: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Waits for every capture of the process to end, and keeps new ones from starting while the
/// guard lives.
pub(crate) fn exclusive() -> std::sync::RwLockWriteGuard<'static, ()> {
    CAPTURES
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl CudaBackend {
    /// The stream the calling thread's work goes to: the capture stream while it captures.
    pub(super) fn cu_stream(&self) -> sys::CUstream {
        self.graphs
            .stream_of_this_thread()
            .unwrap_or_else(|| self.stream.cu_stream())
    }

    /// [`CudaBackend::capture`] of a pure `record`, captured again (up to three more times)
    /// when the capture is invalidated by work elsewhere on the GPU (another API's device
    /// being made, a driver synchronisation), by the capture itself or by an op inside it.
    pub(crate) fn capture_retrying<T>(
        &self,
        record: impl Fn() -> Result<T>,
    ) -> Result<(Result<T>, CudaReplay)> {
        let mut attempt = 0;
        loop {
            let captured = self.capture(&record);
            let retry = match &captured {
                Err(e) | Ok((Err(e), _)) => errors::is_capture_invalidated(e),
                Ok(_) => false,
            };
            if !retry || attempt == 3 {
                return captured;
            }
            attempt += 1;
        }
    }

    /// Runs `record` with the calling thread's work captured into a graph, then launches the
    /// graph once. One capture at a time per device; others wait their turn.
    pub(crate) fn capture<T>(&self, record: impl FnOnce() -> T) -> Result<(T, CudaReplay)> {
        let _shared = CAPTURES
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.bind()?;
        let stream = self.ctx.new_stream().map_err(errors::driver)?;
        {
            let mut active = self.graphs.lock();
            while active.is_some() {
                active = self
                    .graphs
                    .free
                    .wait(active)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            // The capture must not start before work already queued for its inputs.
            let ready = self.stream.record_event(None).map_err(errors::driver)?;
            stream.wait(&ready).map_err(errors::driver)?;
            *active = Some(Active {
                thread: std::thread::current().id(),
                stream: stream.clone(),
                pinned: Vec::new(),
            });
        }
        pool::lock(&self.pool).begin_capture();
        self.graphs.flag.store(true, Ordering::Release);
        let begun = stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED);
        let value = begun.is_ok().then(record);
        let ended = if begun.is_ok() {
            stream.end_capture(sys::CUgraphInstantiate_flags(0))
        } else {
            Ok(None)
        };
        self.graphs.flag.store(false, Ordering::Release);
        let kept = pool::lock(&self.pool).end_capture();
        let pinned = {
            let mut active = self.graphs.lock();
            let pinned = active.take().map(|a| a.pinned).unwrap_or_default();
            self.graphs.free.notify_all();
            pinned
        };
        let mut replay = CudaReplay {
            graph: None,
            kept,
            _pinned: pinned,
            pool: self.pool.clone(),
            nodes: 0,
        };
        begun.map_err(errors::driver)?;
        let graph = ended.map_err(errors::driver)?;
        let value = value.ok_or_else(|| crate::error::Error::Backend {
            backend: crate::info::Backend::Cuda,
            detail: "internal error: the capture recorded nothing".into(),
        })?;
        if let Some(g) = &graph {
            let mut count = 0usize;
            // SAFETY: counts the nodes of a graph this function owns.
            let counted =
                unsafe { sys::cuGraphGetNodes(g.cu_graph(), std::ptr::null_mut(), &mut count) };
            if counted == sys::CUresult::CUDA_SUCCESS {
                replay.nodes = count;
            }
        }
        replay.graph = graph;
        self.launch_replay(&replay)?;
        Ok((value, replay))
    }

    /// Launches a captured graph on the device's stream (an empty batch has none).
    pub(crate) fn launch_replay(&self, replay: &CudaReplay) -> Result<()> {
        let Some(g) = &replay.graph else {
            return Ok(());
        };
        self.bind()?;
        self.graphs.wait_for_capture();
        // SAFETY: the graph's buffers are kept by `replay`, which outlives this launch's use of
        // them in stream order.
        unsafe { cu::graph::launch(g.cu_graph_exec(), self.stream.cu_stream()) }
            .map_err(errors::driver)
    }
}
