"""PyTorch's all_reduce (NCCL backend, one process per GPU) at the sizes and with the timing of
`gpukit bench-group`: the median of timed runs after warm-up, the GPU synchronised after each.
In place (gpukit's all_reduce writes a new tensor; NCCL's kernels are the same).
Prints JSON like `gpukit bench-group --json`. Run on a machine with two or more GPUs."""
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, out):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29512")
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    rows = []
    for mb in [1, 8, 64, 256, 1024]:
        n = (mb << 20) // 4
        x = torch.full((n,), rank + 0.5, device=f"cuda:{rank}")
        runs = 5 if mb >= 256 else 20
        times = []
        for i in range(3 + runs):
            dist.barrier()
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            # In place, as PyTorch programs call it (NCCL runs the same kernels either way).
            dist.all_reduce(x)
            torch.cuda.synchronize()
            if i >= 3:
                times.append(time.perf_counter() - t0)
        secs = statistics.median(times)
        algbw = (mb << 20) / secs / 1e9
        rows.append({"bytes": mb << 20, "us": secs * 1e6, "algbw_gbs": algbw,
                     "busbw_gbs": algbw * 2 * (world - 1) / world})
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def peer_copies():
    """x.to("cuda:1") from cuda:0, as gpukit's Tensor::to, timed the same way."""
    rows = []
    for mb in [64, 1024]:
        x = torch.full(((mb << 20) // 4,), 1.5, device="cuda:0")
        times = []
        for i in range(3 + 10):
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            t0 = time.perf_counter()
            y = x.to("cuda:1")
            torch.cuda.synchronize(0)
            torch.cuda.synchronize(1)
            if i >= 3:
                times.append(time.perf_counter() - t0)
            del y
        secs = statistics.median(times)
        rows.append({"bytes": mb << 20, "us": secs * 1e6, "gbs": (mb << 20) / secs / 1e9})
    return rows


if __name__ == "__main__":
    world = torch.cuda.device_count()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.spawn(worker, args=(world, q), nprocs=world, join=False)
    rows = q.get()
    copies = peer_copies() if world >= 2 else []
    print(json.dumps({"ranks": world, "torch": torch.__version__,
                      "nccl": ".".join(map(str, torch.cuda.nccl.version())), "rows": rows,
                      "peer_copies": copies}, indent=2))
