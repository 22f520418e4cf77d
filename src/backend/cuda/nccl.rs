//! NCCL collectives over the CUDA devices of one process: communicators made once per group
//! (`ncclCommInitAll`), and each collective enqueued on every device's own stream inside one
//! NCCL group call, so it orders with the ops before and after it on each device. libnccl is
//! loaded at run time; a machine without it keeps the host-staged collectives.

use std::sync::{Arc, Mutex, PoisonError};

use cudarc::driver::{CudaStream, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop};
use cudarc::nccl::{result, Comm, ReduceOp as NcclOp};

use super::{CudaBackend, CudaStorage};
use crate::error::{Error, Result};
use crate::info::Backend;
use crate::ops::ReduceOp;

/// Communicators of a group, one per rank, used one collective at a time.
pub(crate) struct Nccl {
    comms: Mutex<Comms>,
    /// Ranks in all (this process may hold only some of them).
    world: usize,
}

struct Comms(Vec<Comm>);

// SAFETY: an NCCL communicator may be used from any thread as long as calls on it do not
// overlap; the mutex around every use makes them one at a time.
unsafe impl Send for Comms {}

/// A device buffer as cudarc's NCCL calls take it. Every op of a device runs on that device's
/// one stream, which is also its communicator's, so the stream orders the buffer's writes and
/// reads without events.
struct Raw<'s> {
    ptr: u64,
    len: usize,
    stream: &'s Arc<CudaStream>,
}

impl DeviceSlice<f32> for Raw<'_> {
    fn len(&self) -> usize {
        self.len
    }

    fn stream(&self) -> &Arc<CudaStream> {
        self.stream
    }
}

impl DevicePtr<f32> for Raw<'_> {
    fn device_ptr<'a>(&'a self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

impl DevicePtrMut<f32> for Raw<'_> {
    fn device_ptr_mut<'a>(&'a mut self, _stream: &'a CudaStream) -> (u64, SyncOnDrop<'a>) {
        (self.ptr, SyncOnDrop::Sync(None))
    }
}

fn nccl_error(what: &str, e: result::NcclError) -> Error {
    Error::Backend {
        backend: Backend::Cuda,
        detail: format!("NCCL {what}: {e:?}"),
    }
}

/// A new NCCL unique id (rank 0 makes it and sends it to every other rank).
pub(crate) fn unique_id() -> Result<[u8; 128]> {
    if !available() {
        return Err(Error::BackendUnavailable {
            backend: Backend::Cuda,
            reason: "NCCL (libnccl.so.2) was not found on the library path".into(),
        });
    }
    let id = cudarc::nccl::Id::new().map_err(|e| nccl_error("unique id", e))?;
    Ok(id.internal().map(|c| c as u8))
}

/// Whether libnccl can be loaded (checked before any call, which would panic without it).
pub(crate) fn available() -> bool {
    // SAFETY: only tries to open the library by its usual names.
    unsafe { cudarc::nccl::sys::is_culib_present() }
}

impl Nccl {
    /// Communicators over `backends` (distinct devices, in rank order), or why not.
    pub(crate) fn new(backends: &[&CudaBackend]) -> Result<Nccl> {
        if !available() {
            return Err(Error::BackendUnavailable {
                backend: Backend::Cuda,
                reason: "NCCL (libnccl.so.2) was not found on the library path".into(),
            });
        }
        let mut ordinals: Vec<usize> = backends.iter().map(|b| b.ctx.ordinal()).collect();
        ordinals.sort_unstable();
        if ordinals.windows(2).any(|w| w[0] == w[1]) {
            return Err(Error::InvalidArgument {
                op: "NCCL group",
                reason: "NCCL needs a different GPU for every rank".into(),
            });
        }
        let streams = backends.iter().map(|b| b.stream.clone()).collect();
        let comms = Comm::from_devices(streams).map_err(|e| nccl_error("init", e))?;
        Ok(Nccl {
            world: comms.len(),
            comms: Mutex::new(Comms(comms)),
        })
    }

    /// This process's rank of a communicator spanning processes (and nodes): `id` is the
    /// NCCL unique id rank 0 made (see [`unique_id`]) and every rank received.
    pub(crate) fn from_rank(
        backend: &CudaBackend,
        rank: usize,
        world: usize,
        id: &[u8; 128],
    ) -> Result<Nccl> {
        if !available() {
            return Err(Error::BackendUnavailable {
                backend: Backend::Cuda,
                reason: "NCCL (libnccl.so.2) was not found on the library path".into(),
            });
        }
        if i32::try_from(world).is_err() || rank >= world {
            return Err(Error::InvalidArgument {
                op: "NCCL group",
                reason: format!("rank {rank} of a world of {world}"),
            });
        }
        let internal = id.map(|b| b as std::ffi::c_char);
        let comm = Comm::from_rank(
            backend.stream.clone(),
            rank,
            world,
            cudarc::nccl::Id::uninit(internal),
        )
        .map_err(|e| nccl_error("init", e))?;
        Ok(Nccl {
            comms: Mutex::new(Comms(vec![comm])),
            world,
        })
    }

    /// One collective: an output of `out_len` elements per rank, and `call(comm, input,
    /// output)` for every rank inside one NCCL group call (each input `in_len` elements).
    fn collective(
        &self,
        what: &str,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        (in_len, out_len): (usize, usize),
        call: impl Fn(
            &Comm,
            &Raw<'_>,
            &mut Raw<'_>,
        ) -> std::result::Result<result::NcclStatus, result::NcclError>,
    ) -> Result<Vec<CudaStorage>> {
        let outputs = backends
            .iter()
            .map(|b| b.alloc(out_len))
            .collect::<Result<Vec<_>>>()?;
        if out_len == 0 {
            return Ok(outputs);
        }
        let comms = self.comms.lock().unwrap_or_else(PoisonError::into_inner);
        result::group_start().map_err(|e| nccl_error("group start", e))?;
        let mut failure = None;
        let ranks = comms.0.iter().zip(backends).zip(inputs).zip(&outputs);
        for (((comm, b), input), output) in ranks {
            let send = Raw {
                ptr: input.ptr(),
                len: in_len,
                stream: &b.stream,
            };
            let mut recv = Raw {
                ptr: output.ptr(),
                len: out_len,
                stream: &b.stream,
            };
            if let Err(e) = call(comm, &send, &mut recv) {
                failure.get_or_insert(nccl_error(what, e));
            }
        }
        // The group is closed even after a failed call, so NCCL is not left inside it.
        let end = result::group_end().map_err(|e| nccl_error("group end", e));
        match (failure, end) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(_)) => Ok(outputs),
        }
    }

    /// `op` over `inputs` (one per rank, `n` elements each), the result on every rank.
    pub(crate) fn all_reduce(
        &self,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        n: usize,
        op: ReduceOp,
    ) -> Result<Vec<CudaStorage>> {
        let op = nccl_op(op);
        self.collective(
            "all_reduce",
            backends,
            inputs,
            (n, n),
            |comm, send, recv| comm.all_reduce(send, recv, &op),
        )
    }

    /// Rank `root`'s `n` elements on every rank.
    pub(crate) fn broadcast(
        &self,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        n: usize,
        root: usize,
    ) -> Result<Vec<CudaStorage>> {
        let root_rank = i32::try_from(root).map_err(|_| Error::InvalidArgument {
            op: "broadcast",
            reason: format!("root {root} is not a rank"),
        })?;
        self.collective("broadcast", backends, inputs, (n, n), |comm, send, recv| {
            // The communicator's own rank: a process group holds one rank, not rank 0.
            comm.broadcast((comm.rank() == root).then_some(send), recv, root_rank)
        })
    }

    /// Every rank's `n` elements, in rank order, on every rank.
    pub(crate) fn all_gather(
        &self,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        n: usize,
    ) -> Result<Vec<CudaStorage>> {
        let total = n * self.world;
        self.collective(
            "all_gather",
            backends,
            inputs,
            (n, total),
            |comm, send, recv| comm.all_gather(send, recv),
        )
    }

    /// `op` over `inputs` (`n` elements each, a multiple of the ranks), rank `i` keeping part
    /// `i` of `n / ranks` elements.
    pub(crate) fn reduce_scatter(
        &self,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        n: usize,
        op: ReduceOp,
    ) -> Result<Vec<CudaStorage>> {
        let op = nccl_op(op);
        let part = n / self.world.max(1);
        self.collective(
            "reduce_scatter",
            backends,
            inputs,
            (n, part),
            |comm, send, recv| comm.reduce_scatter(send, recv, &op),
        )
    }
}

fn nccl_op(op: ReduceOp) -> NcclOp {
    match op {
        ReduceOp::Sum => NcclOp::Sum,
        ReduceOp::Mean => NcclOp::Avg,
        ReduceOp::Max => NcclOp::Max,
        ReduceOp::Min => NcclOp::Min,
    }
}

/// Whether device `a` can read and write device `b`'s memory directly (NVLink or PCIe P2P).
pub(crate) fn can_access_peer(a: &CudaBackend, b: &CudaBackend) -> bool {
    let mut can = 0;
    // SAFETY: both devices are open; the call only queries the topology.
    let r = unsafe {
        cudarc::driver::sys::cuDeviceCanAccessPeer(&mut can, a.ctx.cu_device(), b.ctx.cu_device())
    };
    r == cudarc::driver::sys::CUresult::CUDA_SUCCESS && can == 1
}

impl CudaBackend {
    /// A copy of the first `n` elements of `x` on `dst`'s device, by one `cuMemcpyPeerAsync`
    /// (over NVLink or PCIe P2P where the devices can reach each other, with peer access
    /// enabled once per pair; the driver stages through the host otherwise). `dst`'s stream
    /// waits for this stream's work before the copy, and this stream for the copy before
    /// anything after it, so neither side's later work can overtake it.
    pub(crate) fn copy_to_peer(
        &self,
        x: &CudaStorage,
        n: usize,
        dst: &CudaBackend,
    ) -> Result<CudaStorage> {
        let out = dst.alloc(n)?;
        if n == 0 {
            return Ok(out);
        }
        if can_access_peer(dst, self) {
            dst.bind()?;
            // SAFETY: enables access from dst's context to this one's; "already enabled" is fine.
            let r = unsafe { cudarc::driver::sys::cuCtxEnablePeerAccess(self.ctx.cu_ctx(), 0) };
            let ok = matches!(
                r,
                cudarc::driver::sys::CUresult::CUDA_SUCCESS
                    | cudarc::driver::sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            );
            if !ok {
                log::info!(
                    "gpukit: peer access from CUDA device {} was refused: {r:?}",
                    dst.ctx.ordinal()
                );
            }
        }
        dst.stream
            .join(&self.stream)
            .map_err(super::errors::driver)?;
        // SAFETY: both buffers are live device allocations of at least n * 4 bytes, on the
        // contexts named; the stream is dst's.
        unsafe {
            cudarc::driver::result::memcpy_peer_async(
                dst.ctx.cu_ctx(),
                out.ptr(),
                self.ctx.cu_ctx(),
                x.ptr(),
                n * 4,
                dst.stream.cu_stream(),
            )
        }
        .map_err(super::errors::driver)?;
        self.stream
            .join(&dst.stream)
            .map_err(super::errors::driver)?;
        Ok(out)
    }
}
