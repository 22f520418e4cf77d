//! Batches on the backends, in backend-neutral calls: running a batch inside the backend's
//! batch scope, capturing it for replay (wgpu's encoded dispatches, or a CUDA graph), and
//! replaying the capture with new input data.

use super::{BackendImpl, Storage};
use crate::error::Result;

/// What a compiled batch replays.
pub(crate) enum Replayer {
    Wgpu(super::wgpu::capture::Replay),
    #[cfg(cuda)]
    Cuda(super::cuda::graph::CudaReplay),
}

impl Replayer {
    /// The kernels one replay launches.
    pub(crate) fn kernels(&self) -> usize {
        match self {
            Replayer::Wgpu(r) => r.dispatches,
            #[cfg(cuda)]
            Replayer::Cuda(r) => r.nodes,
        }
    }
}

/// A batch captured while it ran once.
pub(crate) struct Capture<T> {
    /// What the run returned.
    pub executed: Result<T>,
    pub replay: Replayer,
    /// Bytes the batch took from the pool, where the backend counts them.
    pub taken: Option<u64>,
}

/// A mismatch between a replay and the device it runs on: impossible through the public API,
/// since a graph keeps its device.
fn wrong_device() -> crate::error::Error {
    crate::error::Error::DeviceMismatch { op: "graph replay" }
}

impl BackendImpl {
    /// Runs `execute` as one batch: on wgpu inside a batch scope (one pass, one free list),
    /// returning the bytes it took from the pool; elsewhere op by op (a hybrid device routes
    /// each op, CUDA puts every op on its one stream).
    pub(crate) fn run_batch<T>(&self, execute: impl FnOnce() -> T) -> Result<(T, Option<u64>)> {
        match self {
            BackendImpl::Wgpu(b) => {
                let (executed, end) = b.in_batch(false, execute)?;
                Ok((executed, Some(end.taken_bytes)))
            }
            _ => Ok((execute(), None)),
        }
    }

    /// Whether [`BackendImpl::capture`] records (wgpu and CUDA) rather than declining.
    #[cfg_attr(not(feature = "models"), allow(dead_code))]
    pub(crate) fn replays(&self) -> bool {
        match self {
            BackendImpl::Wgpu(_) => true,
            #[cfg(cuda)]
            BackendImpl::Cuda(_) => true,
            _ => false,
        }
    }

    /// Runs `execute` once while capturing it for replay; `None` where this backend cannot
    /// replay (the CPU, hybrid and shape-only devices run a graph's ops again instead).
    pub(crate) fn capture<T>(&self, execute: impl Fn() -> Result<T>) -> Result<Option<Capture<T>>> {
        match self {
            BackendImpl::Wgpu(b) => {
                let (executed, end) = b.in_batch(true, execute)?;
                let taken = end.taken_bytes;
                let replay = Replayer::Wgpu(b.compile_replay(end)?);
                Ok(Some(Capture {
                    executed,
                    replay,
                    taken: Some(taken),
                }))
            }
            #[cfg(cuda)]
            BackendImpl::Cuda(b) => {
                let (executed, replay) = b.capture_retrying(execute)?;
                Ok(Some(Capture {
                    executed,
                    replay: Replayer::Cuda(replay),
                    taken: None,
                }))
            }
            _ => Ok(None),
        }
    }

    /// Writes `inputs`' new data, replays, and reads `outputs` back.
    pub(crate) async fn replay(
        &self,
        replay: &Replayer,
        inputs: &[(&Storage, &[f32])],
        outputs: &[(&Storage, usize)],
    ) -> Result<Vec<Vec<f32>>> {
        match (self, replay) {
            (BackendImpl::Wgpu(b), Replayer::Wgpu(r)) => {
                let ins = inputs
                    .iter()
                    .map(|(s, d)| Ok((s.as_wgpu()?, *d)))
                    .collect::<Result<Vec<_>>>()?;
                let outs = outputs
                    .iter()
                    .map(|(s, n)| Ok((s.as_wgpu()?, *n)))
                    .collect::<Result<Vec<_>>>()?;
                b.replay(r, &ins, &outs).await
            }
            #[cfg(cuda)]
            (BackendImpl::Cuda(b), Replayer::Cuda(r)) => {
                for (s, data) in inputs {
                    b.overwrite(s.as_cuda()?, data)?;
                }
                b.launch_replay(r)?;
                let outs = outputs
                    .iter()
                    .map(|(s, n)| Ok((s.as_cuda()?, *n)))
                    .collect::<Result<Vec<_>>>()?;
                b.read_many(&outs)
            }
            _ => Err(wrong_device()),
        }
    }
}
