//! One process per GPU: a [`ProcessGroup`] is this process's rank among `WORLD_SIZE`
//! processes (on one machine or several), found through a rendezvous at rank 0 and joined by
//! NCCL, which carries the data between processes and nodes. Launch it as `torchrun` does:
//! every process with `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (its GPU) and rank 0's
//! `MASTER_ADDR` / `MASTER_PORT`.

use std::time::Duration;

use crate::backend::collective::{Collectives, Kind};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::ReduceOp;
use crate::tensor::Tensor;

/// This process's place in a group of processes, each driving one CUDA device.
pub struct ProcessGroup {
    rank: usize,
    world: usize,
    device: Device,
    nccl: Collectives,
}

fn env(name: &'static str) -> Result<Option<String>> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(Error::InvalidArgument {
            op: "ProcessGroup::from_env",
            reason: format!("{name}: {e}"),
        }),
    }
}

fn number(name: &'static str, default: Option<usize>) -> Result<usize> {
    match (env(name)?, default) {
        (Some(v), _) => v.trim().parse().map_err(|_| Error::InvalidArgument {
            op: "ProcessGroup::from_env",
            reason: format!("{name}={v:?} is not a number"),
        }),
        (None, Some(d)) => Ok(d),
        (None, None) => Err(Error::InvalidArgument {
            op: "ProcessGroup::from_env",
            reason: format!("{name} is not set (launch one process per GPU as torchrun does)"),
        }),
    }
}

impl ProcessGroup {
    /// Joins the group the environment describes: `RANK` and `WORLD_SIZE` (required),
    /// `LOCAL_RANK` (the CUDA device, default `RANK`), `MASTER_ADDR` and `MASTER_PORT` (rank 0's
    /// rendezvous, default 127.0.0.1:29500) and `GPUKIT_RENDEZVOUS_TIMEOUT` (seconds, default
    /// 120). Waits until every rank has joined, or fails naming the missing ranks.
    pub async fn from_env() -> Result<ProcessGroup> {
        let rank = number("RANK", None)?;
        let world = number("WORLD_SIZE", None)?;
        let local = number("LOCAL_RANK", Some(rank))?;
        let host = env("MASTER_ADDR")?.unwrap_or_else(|| "127.0.0.1".into());
        let port = number("MASTER_PORT", Some(29500))?;
        let timeout = number("GPUKIT_RENDEZVOUS_TIMEOUT", Some(120))?;
        let device = Device::with_backend_at(crate::Backend::Cuda, local).await?;
        ProcessGroup::new(
            device,
            rank,
            world,
            &format!("{host}:{port}"),
            Duration::from_secs(timeout as u64),
        )
    }

    /// Joins as `rank` of `world` on `device` (CUDA), meeting the others at `addr` (rank 0
    /// listens there) within `timeout`.
    pub fn new(
        device: Device,
        rank: usize,
        world: usize,
        addr: &str,
        timeout: Duration,
    ) -> Result<ProcessGroup> {
        if world == 0 || rank >= world {
            return Err(Error::InvalidArgument {
                op: "ProcessGroup::new",
                reason: format!("rank {rank} is not a rank of a world of {world}"),
            });
        }
        if device.info().backend != crate::Backend::Cuda {
            return Err(Error::InvalidArgument {
                op: "ProcessGroup::new",
                reason: format!(
                    "one process per GPU needs a CUDA device, not {}",
                    device.info().backend
                ),
            });
        }
        let id = if rank == 0 {
            let id = unique_id()?;
            crate::rendezvous::serve(addr, world, &id, timeout)?;
            id
        } else {
            crate::rendezvous::join(addr, rank, timeout)?
        };
        let nccl = for_rank(&device, rank, world, &id)?;
        Ok(ProcessGroup {
            rank,
            world,
            device,
            nccl,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.world
    }

    /// This process's device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    fn run(&self, op: &'static str, t: &Tensor, kind: Kind, shape: Vec<usize>) -> Result<Tensor> {
        if !t.device().same(&self.device) {
            return Err(Error::InvalidArgument {
                op,
                reason: "the tensor is not on this process's device".into(),
            });
        }
        self.device.check_lost()?;
        let backends = [self.device.backend()];
        let mut out = self.nccl.run(&backends, &[t.storage()], t.len(), kind)?;
        let storage = out.pop().ok_or_else(|| Error::InvalidArgument {
            op,
            reason: "internal error: no output".into(),
        })?;
        Ok(Tensor::new(self.device.clone(), storage, shape))
    }

    /// `op` over every process's `t` (the same shape on every rank), enqueued on this device's
    /// stream; every rank gets the result.
    pub fn all_reduce(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        self.run("all_reduce", t, Kind::AllReduce(op), t.shape().to_vec())
    }

    /// Rank `root`'s `t` on every rank (every rank passes a tensor of the same shape).
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<Tensor> {
        if root >= self.world {
            return Err(Error::InvalidArgument {
                op: "broadcast",
                reason: format!("root {root} is not a rank of a world of {}", self.world),
            });
        }
        self.run("broadcast", t, Kind::Broadcast(root), t.shape().to_vec())
    }

    /// Every rank's `t` joined along axis 0, in rank order.
    pub fn all_gather(&self, t: &Tensor) -> Result<Tensor> {
        let Some((&rows, rest)) = t.shape().split_first() else {
            return Err(Error::InvalidArgument {
                op: "all_gather",
                reason: "a tensor of shape [] has no axis 0 to join along".into(),
            });
        };
        let mut shape = vec![rows * self.world];
        shape.extend(rest);
        self.run("all_gather", t, Kind::AllGather, shape)
    }

    /// `op` over every rank's `t`, rank `i` keeping part `i` of axis 0 (a multiple of the
    /// world size).
    pub fn reduce_scatter(&self, t: &Tensor, op: ReduceOp) -> Result<Tensor> {
        let rows = t.shape().first().copied().unwrap_or(0);
        if t.shape().is_empty() || !rows.is_multiple_of(self.world) {
            return Err(Error::InvalidArgument {
                op: "reduce_scatter",
                reason: format!(
                    "axis 0 of {:?} does not split into {} equal parts",
                    t.shape(),
                    self.world
                ),
            });
        }
        let mut shape = t.shape().to_vec();
        shape[0] = rows / self.world;
        self.run("reduce_scatter", t, Kind::ReduceScatter(op), shape)
    }
}

#[cfg(cuda)]
fn unique_id() -> Result<[u8; 128]> {
    crate::backend::cuda::nccl::unique_id()
}

#[cfg(cuda)]
fn for_rank(device: &Device, rank: usize, world: usize, id: &[u8; 128]) -> Result<Collectives> {
    Collectives::for_rank(device.backend(), rank, world, id)
}

#[cfg(not(cuda))]
fn unique_id() -> Result<[u8; 128]> {
    Err(Error::BackendUnavailable {
        backend: crate::Backend::Cuda,
        reason: crate::device::cuda_unavailable(),
    })
}

#[cfg(not(cuda))]
fn for_rank(_: &Device, _: usize, _: usize, _: &[u8; 128]) -> Result<Collectives> {
    Err(Error::BackendUnavailable {
        backend: crate::Backend::Cuda,
        reason: crate::device::cuda_unavailable(),
    })
}
