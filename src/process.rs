//! One process per device: a [`ProcessGroup`] is this process's rank among `WORLD_SIZE`
//! processes (on one machine or several), found through a rendezvous at rank 0. Where every
//! rank has a CUDA device and libnccl, NCCL carries the data between processes and nodes;
//! otherwise the collectives go over the rendezvous's TCP connections through rank 0, which
//! computes them with its device's ops. Launch it as `torchrun` does: every process with
//! `RANK`, `WORLD_SIZE`, `LOCAL_RANK` (its GPU) and rank 0's `MASTER_ADDR` / `MASTER_PORT`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::backend::collective::{Collectives, Kind};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::ops::ReduceOp;
use crate::tensor::Tensor;

/// This process's place in a group of processes, each driving one device.
pub struct ProcessGroup {
    rank: usize,
    world: usize,
    device: Device,
    transport: Transport,
}

enum Transport {
    Nccl(Collectives),
    /// Rank 0: the connections to ranks 1.. in order; any other rank: the one to rank 0.
    Tcp(Mutex<Vec<TcpStream>>),
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
    /// `LOCAL_RANK` (the CUDA device, default `RANK`; without CUDA the automatic device),
    /// `MASTER_ADDR` and `MASTER_PORT` (rank 0's rendezvous, default 127.0.0.1:29500) and
    /// `GPUKIT_RENDEZVOUS_TIMEOUT` (seconds, default 120; also the longest a collective waits
    /// for a rank over TCP). Waits until every rank has joined, or fails naming the missing
    /// ranks.
    pub async fn from_env() -> Result<ProcessGroup> {
        let rank = number("RANK", None)?;
        let world = number("WORLD_SIZE", None)?;
        let local = number("LOCAL_RANK", Some(rank))?;
        let host = env("MASTER_ADDR")?.unwrap_or_else(|| "127.0.0.1".into());
        let port = number("MASTER_PORT", Some(29500))?;
        let timeout = number("GPUKIT_RENDEZVOUS_TIMEOUT", Some(120))?;
        let device = match Device::with_backend_at(crate::Backend::Cuda, local).await {
            Ok(d) => d,
            // No CUDA: the automatic device, with collectives over TCP.
            Err(Error::BackendUnavailable { reason, .. }) => {
                log::info!("gpukit: process group without CUDA ({reason})");
                Device::new().await?
            }
            Err(e) => return Err(e),
        };
        ProcessGroup::new(
            device,
            rank,
            world,
            &format!("{host}:{port}"),
            Duration::from_secs(timeout as u64),
        )
    }

    /// Joins as `rank` of `world` on `device`, meeting the others at `addr` (rank 0 listens
    /// there) within `timeout`. NCCL carries the collectives when every rank has a CUDA device
    /// and libnccl; otherwise TCP through rank 0.
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
        let capable = device.info().backend == crate::Backend::Cuda && nccl_available();
        let (payload, streams) = if rank == 0 {
            let make = |others: bool| -> Result<[u8; crate::rendezvous::PAYLOAD]> {
                let mut p = [0u8; crate::rendezvous::PAYLOAD];
                if others && capable {
                    p[0] = 1;
                    p[1..].copy_from_slice(&unique_id()?);
                }
                Ok(p)
            };
            crate::rendezvous::serve(addr, world, make, timeout)?
        } else {
            let (p, stream) = crate::rendezvous::join(addr, rank, capable, timeout)?;
            (p, vec![stream])
        };
        let transport = if payload[0] == 1 {
            let mut id = [0u8; 128];
            id.copy_from_slice(&payload[1..]);
            Transport::Nccl(for_rank(&device, rank, world, &id)?)
        } else {
            for s in &streams {
                s.set_read_timeout(Some(timeout))
                    .and_then(|()| s.set_write_timeout(Some(timeout)))
                    .map_err(|e| tcp_error(&e))?;
            }
            Transport::Tcp(Mutex::new(streams))
        };
        Ok(ProcessGroup {
            rank,
            world,
            device,
            transport,
        })
    }

    /// Whether the collectives run on NCCL (else over TCP through rank 0).
    pub fn uses_nccl(&self) -> bool {
        matches!(self.transport, Transport::Nccl(_))
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
        if t.dtype() != crate::DType::F32 {
            return Err(crate::dtype::unsupported(op, t.dtype(), "f32"));
        }
        let t = &t.contiguous()?;
        self.device.check_lost()?;
        let streams = match &self.transport {
            Transport::Nccl(nccl) => {
                let backends = [self.device.backend()];
                let mut out = nccl.run(&backends, &[t.storage()], t.len(), kind)?;
                let storage = out.pop().ok_or_else(|| Error::InvalidArgument {
                    op,
                    reason: "internal error: no output".into(),
                })?;
                return Ok(Tensor::new(self.device.clone(), storage, shape));
            }
            Transport::Tcp(streams) => streams,
        };
        let mut streams = streams.lock().unwrap_or_else(PoisonError::into_inner);
        let data = crate::future::block_on(t.read())?;
        let (shape, data) = if self.rank == 0 {
            self.tcp_root(op, &mut streams, t.shape(), data, kind)?
        } else {
            let root = streams
                .first_mut()
                .ok_or_else(|| tcp_error(&"no connection"))?;
            write_frame(root, t.shape(), &data).map_err(|e| tcp_error(&e))?;
            read_frame(root)
                .map_err(|e| tcp_error(&e))?
                .map_err(|reason| Error::InvalidArgument { op, reason })?
        };
        self.device.tensor(&data, &shape)
    }

    /// Rank 0's side of a collective over TCP: every rank's tensor in rank order, the results
    /// computed here, each rank's sent back; rank 0's returned. A mismatch is sent to every rank
    /// as an error and returned.
    fn tcp_root(
        &self,
        op: &'static str,
        streams: &mut [TcpStream],
        shape: &[usize],
        data: Vec<f32>,
        kind: Kind,
    ) -> Result<(Vec<usize>, Vec<f32>)> {
        let mut all = vec![(shape.to_vec(), data)];
        for (i, s) in streams.iter_mut().enumerate() {
            let frame = read_frame(s).map_err(|e| Error::InvalidArgument {
                op,
                reason: format!("rank {} did not take part: {e}", i + 1),
            })?;
            match frame {
                Ok(f) => all.push(f),
                Err(reason) => return Err(Error::InvalidArgument { op, reason }),
            }
        }
        let results = match self.compute(&all, kind) {
            Ok(r) => r,
            Err(e) => {
                let message = e.to_string();
                for s in streams.iter_mut() {
                    // Best effort: a rank that cannot be told times out on its own.
                    let _ = write_error(s, &message);
                }
                return Err(e);
            }
        };
        let mut results = results.into_iter();
        let own = results.next().ok_or_else(|| tcp_error(&"no result"))?;
        for (s, (shape, data)) in streams.iter_mut().zip(results) {
            write_frame(s, &shape, &data).map_err(|e| tcp_error(&e))?;
        }
        Ok(own)
    }

    /// Every rank's result from every rank's `(shape, data)`, computed on rank 0's device.
    fn compute(
        &self,
        all: &[(Vec<usize>, Vec<f32>)],
        kind: Kind,
    ) -> Result<Vec<(Vec<usize>, Vec<f32>)>> {
        let shape = &all[0].0;
        if let Some((rank, (other, _))) = all.iter().enumerate().find(|(_, (s, _))| s != shape) {
            return Err(Error::InvalidArgument {
                op: "process group",
                reason: format!("rank {rank}'s tensor is {other:?}, rank 0's {shape:?}"),
            });
        }
        let world = self.world;
        let same = |v: Vec<f32>, s: Vec<usize>| vec![(s, v); world];
        let reduce = |op: ReduceOp| -> Result<Vec<f32>> {
            let mut stacked = vec![world];
            stacked.extend(shape);
            let flat: Vec<f32> = all.iter().flat_map(|(_, d)| d.iter().copied()).collect();
            let t = self.device.tensor(&flat, &stacked)?;
            crate::future::block_on(t.reduce_axis(op, 0, false)?.read())
        };
        Ok(match kind {
            Kind::AllReduce(op) => same(reduce(op)?, shape.clone()),
            Kind::Broadcast(root) => same(all[root].1.clone(), shape.clone()),
            Kind::AllGather => {
                let mut joined_shape = shape.clone();
                joined_shape[0] *= world;
                same(
                    all.iter().flat_map(|(_, d)| d.iter().copied()).collect(),
                    joined_shape,
                )
            }
            Kind::ReduceScatter(op) => {
                let reduced = reduce(op)?;
                let part = reduced.len() / world;
                let mut part_shape = shape.clone();
                part_shape[0] /= world;
                (0..world)
                    .map(|r| {
                        (
                            part_shape.clone(),
                            reduced[r * part..(r + 1) * part].to_vec(),
                        )
                    })
                    .collect()
            }
        })
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

#[cfg(cuda)]
fn nccl_available() -> bool {
    crate::backend::cuda::nccl::available()
}

#[cfg(not(cuda))]
fn nccl_available() -> bool {
    false
}

fn tcp_error(e: &dyn std::fmt::Display) -> Error {
    Error::InvalidArgument {
        op: "process group",
        reason: format!("the connection between ranks failed: {e}"),
    }
}

/// A tensor's shape and data from another rank, or the error rank 0 sent instead.
type Frame = std::result::Result<(Vec<usize>, Vec<f32>), String>;

/// A frame: `u32` axes (`u32::MAX` for an error), then each axis as `u64` and the data as
/// little-endian f32s (or a `u32` length and the error's text).
fn write_frame(s: &mut TcpStream, shape: &[usize], data: &[f32]) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(4 + 8 * shape.len() + 4 * data.len());
    buf.extend((shape.len() as u32).to_le_bytes());
    for &d in shape {
        buf.extend((d as u64).to_le_bytes());
    }
    for v in data {
        buf.extend(v.to_le_bytes());
    }
    s.write_all(&buf)
}

fn write_error(s: &mut TcpStream, message: &str) -> std::io::Result<()> {
    let mut buf = u32::MAX.to_le_bytes().to_vec();
    buf.extend((message.len() as u32).to_le_bytes());
    buf.extend(message.as_bytes());
    s.write_all(&buf)
}

/// Reads a frame: `Ok(Ok((shape, data)))`, `Ok(Err(message))` for an error frame, or the I/O
/// error. Sizes are bounded (8 axes, 2^32 elements) so a corrupt stream cannot make it
/// allocate without end.
fn read_frame(s: &mut TcpStream) -> std::io::Result<Frame> {
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut word = [0u8; 4];
    s.read_exact(&mut word)?;
    let rank = u32::from_le_bytes(word);
    if rank == u32::MAX {
        s.read_exact(&mut word)?;
        let len = u32::from_le_bytes(word) as usize;
        if len > 1 << 20 {
            return Err(bad("an error message longer than 1 MiB"));
        }
        let mut text = vec![0u8; len];
        s.read_exact(&mut text)?;
        return Ok(Err(String::from_utf8_lossy(&text).into_owned()));
    }
    if rank > crate::ops::layout::MAX_RANK as u32 {
        return Err(bad("a tensor of more than 8 axes"));
    }
    let mut shape = Vec::with_capacity(rank as usize);
    let mut n: u64 = 1;
    for _ in 0..rank {
        let mut d = [0u8; 8];
        s.read_exact(&mut d)?;
        let d = u64::from_le_bytes(d);
        n = n
            .checked_mul(d)
            .filter(|&n| n <= 1 << 32)
            .ok_or_else(|| bad("a tensor of more than 2^32 elements"))?;
        shape.push(usize::try_from(d).map_err(|_| bad("an axis too long for this machine"))?);
    }
    let n = usize::try_from(n).map_err(|_| bad("a tensor too large for this machine"))?;
    let mut bytes = vec![0u8; n * 4];
    s.read_exact(&mut bytes)?;
    let data = bytes
        .chunks_exact(4)
        .map(|w| f32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect();
    Ok(Ok((shape, data)))
}
