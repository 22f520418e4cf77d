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

    /// Without CUDA there is nothing faster than the host.
    #[cfg(not(cuda))]
    pub(crate) fn for_backends(_backends: &[&BackendImpl]) -> Option<Collectives> {
        None
    }

    /// `op` over `inputs` (one per rank, `n` elements each), the result on every rank.
    pub(crate) fn all_reduce(
        &self,
        backends: &[&BackendImpl],
        inputs: &[&Storage],
        n: usize,
        op: ReduceOp,
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
            let outs = self.nccl.all_reduce(&cuda, &ins, n, op)?;
            Ok(outs.into_iter().map(Storage::Cuda).collect())
        }
        #[cfg(not(cuda))]
        {
            let _ = (backends, inputs, n, op);
            Err(super::mismatch())
        }
    }
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
