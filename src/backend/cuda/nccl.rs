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
            comms: Mutex::new(Comms(comms)),
        })
    }

    /// `op` over `inputs` (one per rank, `n` elements each), the result on every rank.
    pub(crate) fn all_reduce(
        &self,
        backends: &[&CudaBackend],
        inputs: &[&CudaStorage],
        n: usize,
        op: ReduceOp,
    ) -> Result<Vec<CudaStorage>> {
        let op = match op {
            ReduceOp::Sum => NcclOp::Sum,
            ReduceOp::Mean => NcclOp::Avg,
            ReduceOp::Max => NcclOp::Max,
            ReduceOp::Min => NcclOp::Min,
        };
        let outputs = backends
            .iter()
            .map(|b| b.alloc(n))
            .collect::<Result<Vec<_>>>()?;
        if n == 0 {
            return Ok(outputs);
        }
        let comms = self.comms.lock().unwrap_or_else(PoisonError::into_inner);
        result::group_start().map_err(|e| nccl_error("group start", e))?;
        let mut failure = None;
        for (((comm, b), input), output) in comms.0.iter().zip(backends).zip(inputs).zip(&outputs) {
            let send = Raw {
                ptr: input.ptr(),
                len: n,
                stream: &b.stream,
            };
            let mut recv = Raw {
                ptr: output.ptr(),
                len: n,
                stream: &b.stream,
            };
            if let Err(e) = comm.all_reduce(&send, &mut recv, &op) {
                failure.get_or_insert(nccl_error("all_reduce", e));
            }
        }
        // The group is closed even after a failed call, so NCCL is not left inside it.
        let end = result::group_end().map_err(|e| nccl_error("group end", e));
        match (failure, end) {
            (Some(e), _) | (None, Err(e)) => Err(e),
            (None, Ok(_)) => Ok(outputs),
        }
    }
}
