//! Several GPUs, both ways gpukit drives them.
//!
//! One process for every GPU of the machine (a `DeviceGroup`):
//!     cargo run --release --example multi_gpu
//! One process per GPU, launched as torchrun launches (a `ProcessGroup`), e.g. two on one node:
//!     RANK=0 WORLD_SIZE=2 cargo run --release --example multi_gpu &
//!     RANK=1 WORLD_SIZE=2 cargo run --release --example multi_gpu
//! (`LOCAL_RANK` picks the GPU, default `RANK`; `MASTER_ADDR`/`MASTER_PORT` name rank 0, default
//! 127.0.0.1:29500, so several nodes work too, with NCCL between them.)
//! Without CUDA (or NCCL) the processes run on their automatic device and exchange data over
//! TCP through rank 0. Each rank adds up everyone's data and checks the result.

use gpukit::{DeviceGroup, ProcessGroup, ReduceOp};

fn main() -> gpukit::Result<()> {
    let n = 1 << 20;
    if std::env::var_os("RANK").is_some() {
        let group = ProcessGroup::from_env_blocking()?;
        let (rank, world) = (group.rank(), group.world_size());
        let x = group.device().tensor(&vec![rank as f32 + 1.0; n], &[n])?;
        let sum = group.all_reduce(&x, ReduceOp::Sum)?.read_blocking()?;
        let want = (world * (world + 1) / 2) as f32;
        assert!(
            sum.iter().all(|&v| v == want),
            "rank {rank}: {} vs {want}",
            sum[0]
        );
        let gathered = group.all_gather(&x)?.read_blocking()?;
        assert_eq!(gathered.len(), n * world);
        // The last rank's data everywhere, and each rank's part of the sum.
        let last = group.broadcast(&x, world - 1)?.read_blocking()?;
        assert!(
            last.iter().all(|&v| v == world as f32),
            "rank {rank}: broadcast"
        );
        let part = group.reduce_scatter(&x, ReduceOp::Sum)?.read_blocking()?;
        assert!(part.len() == n / world && part.iter().all(|&v| v == want));
        let transport = if group.uses_nccl() { "NCCL" } else { "TCP" };
        println!("rank {rank} of {world} ({transport}): all four collectives agree (sum {want})");
        return Ok(());
    }
    let group = DeviceGroup::cuda_all_blocking()?;
    let tensors = group
        .devices()
        .iter()
        .enumerate()
        .map(|(r, d)| d.tensor(&vec![r as f32 + 1.0; n], &[n]))
        .collect::<gpukit::Result<Vec<_>>>()?;
    let world = group.size();
    let want = (world * (world + 1) / 2) as f32;
    for (rank, t) in group
        .all_reduce_blocking(&tensors, ReduceOp::Sum)?
        .iter()
        .enumerate()
    {
        let sum = t.read_blocking()?;
        assert!(sum.iter().all(|&v| v == want), "rank {rank}");
    }
    println!(
        "{world} GPUs in one process ({}): all_reduce agrees (sum {want})",
        if group.uses_nccl() {
            "NCCL"
        } else {
            "through rank 0"
        }
    );
    Ok(())
}
