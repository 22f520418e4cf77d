//! A device group's fast collectives: NCCL when every rank is a different CUDA device of this
//! process and libnccl loads; `None` otherwise, and the group stages through the host.

use super::{BackendImpl, Storage};
use crate::error::Result;
use crate::ops::ReduceOp;

/// Collectives run by the backends themselves.
pub(crate) struct Collectives {
    #[cfg(cuda)]
    nccl: super::cuda::nccl::Nccl,
}

impl Collectives {
    /// NCCL over `backends` where it can run; `None` (logging why) elsewhere.
    #[cfg(cuda)]
    pub(crate) fn for_backends(backends: &[&BackendImpl]) -> Option<Collectives> {
        let cuda: Option<Vec<_>> = backends.iter().map(|b| b.cuda()).collect();
        let cuda = cuda?;
        match super::cuda::nccl::Nccl::new(&cuda) {
            Ok(nccl) => Some(Collectives { nccl }),
            Err(e) => {
                log::info!("gpukit: the group's collectives stage through the host: {e}");
                None
            }
        }
    }

    /// This process's rank of an NCCL communicator over several processes.
    #[cfg(cuda)]
    pub(crate) fn for_rank(
        backend: &BackendImpl,
        rank: usize,
        world: usize,
        id: &[u8; 128],
    ) -> Result<Collectives> {
        let cuda = backend
            .cuda()
            .ok_or_else(|| crate::error::Error::InvalidArgument {
                op: "ProcessGroup",
                reason: "one process per GPU needs a CUDA device".into(),
            })?;
        Ok(Collectives {
            nccl: super::cuda::nccl::Nccl::from_rank(cuda, rank, world, id)?,
        })
    }

    /// Without CUDA there is nothing faster than the host.
    #[cfg(not(cuda))]
    pub(crate) fn for_backends(_backends: &[&BackendImpl]) -> Option<Collectives> {
        None
    }

    /// `kind` over `inputs` (one per rank, `n` elements each): one storage per rank.
    pub(crate) fn run(
        &self,
        backends: &[&BackendImpl],
        inputs: &[&Storage],
        n: usize,
        kind: Kind,
    ) -> Result<Vec<Storage>> {
        #[cfg(cuda)]
        {
            let cuda = backends
                .iter()
                .map(|b| b.cuda().ok_or_else(super::mismatch))
                .collect::<Result<Vec<_>>>()?;
            let ins = inputs
                .iter()
                .map(|s| s.as_cuda())
                .collect::<Result<Vec<_>>>()?;
            let nccl = &self.nccl;
            let outs = match kind {
                Kind::AllReduce(op) => nccl.all_reduce(&cuda, &ins, n, op)?,
                Kind::Broadcast(root) => nccl.broadcast(&cuda, &ins, n, root)?,
                Kind::AllGather => nccl.all_gather(&cuda, &ins, n)?,
                Kind::ReduceScatter(op) => nccl.reduce_scatter(&cuda, &ins, n, op)?,
            };
            Ok(outs.into_iter().map(Storage::Cuda).collect())
        }
        #[cfg(not(cuda))]
        {
            let _ = (backends, inputs, n, kind);
            Err(super::mismatch())
        }
    }
}

/// A collective and its parameter (read only by the CUDA build's NCCL path).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(cuda), allow(dead_code))]
pub(crate) enum Kind {
    /// The reduction on every rank.
    AllReduce(ReduceOp),
    /// The root rank's tensor on every rank.
    Broadcast(usize),
    /// Every rank's tensor, in rank order, on every rank.
    AllGather,
    /// The reduction, rank `i` keeping part `i`.
    ReduceScatter(ReduceOp),
}

impl BackendImpl {
    /// The first `n` elements of `x` on `dst` without going through the host, where both are
    /// CUDA devices (a peer copy); `None` where the data must go through the host.
    pub(crate) fn copy_to_device(
        &self,
        x: &Storage,
        n: usize,
        dst: &BackendImpl,
    ) -> Option<Result<Storage>> {
        #[cfg(cuda)]
        if let (Some(src), Some(to), Storage::Cuda(x)) = (self.cuda(), dst.cuda(), x) {
            return Some(src.copy_to_peer(x, n, to).map(Storage::Cuda));
        }
        let _ = (x, n, dst);
        None
    }
}
