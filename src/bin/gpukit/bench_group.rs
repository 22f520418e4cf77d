//! `gpukit bench-group`: all_reduce (sum) over every CUDA device of the machine, from 1 MB to
//! 1 GB per rank, as algorithm and bus bandwidth (NCCL's definitions: bus = algorithm x
//! 2 (n - 1) / n), each the median of timed runs, every device synchronised after each.
//! Then peer copies from device 0 to device 1 (`Tensor::to`) of 64 MiB and 1 GiB, and a
//! data-parallel workload on one GPU and on the group.
//! `scripts/peers/torch_all_reduce.py` measures PyTorch the same way.

use gpukit::{DeviceGroup, ReduceOp};
use serde::Serialize;

use crate::bench::{median, time};

#[derive(Serialize)]
struct Copy {
    bytes: usize,
    us: f64,
    gbs: f64,
}

#[derive(Serialize)]
struct Row {
    bytes: usize,
    us: f64,
    algbw_gbs: f64,
    busbw_gbs: f64,
}

pub fn run(args: &[String]) -> Result<(), String> {
    let json = args.iter().any(|a| a == "--json");
    if let Some(other) = args.iter().find(|a| *a != "--json") {
        return Err(format!("unknown bench-group option {other:?}"));
    }
    let group = DeviceGroup::cuda_all_blocking().map_err(|e| e.to_string())?;
    let ranks = group.size();
    let mut rows = Vec::new();
    for mb in [1usize, 8, 64, 256, 1024] {
        let bytes = mb << 20;
        let n = bytes / 4;
        let tensors = group
            .devices()
            .iter()
            .enumerate()
            .map(|(r, d)| d.tensor(&vec![r as f32 + 0.5; n], &[n]))
            .collect::<gpukit::Result<Vec<_>>>()
            .map_err(|e| e.to_string())?;
        let runs = if mb >= 256 { 5 } else { 20 };
        let t = time(3, runs, || {
            drop(group.all_reduce_blocking(&tensors, ReduceOp::Sum)?);
            for d in group.devices() {
                d.synchronize_blocking()?;
            }
            Ok(())
        })?;
        let secs = median(t);
        let algbw = bytes as f64 / secs / 1e9;
        rows.push(Row {
            bytes,
            us: secs * 1e6,
            algbw_gbs: algbw,
            busbw_gbs: algbw * 2.0 * (ranks as f64 - 1.0) / ranks as f64,
        });
    }
    // Peer copies, device 0 to device 1.
    let mut copies = Vec::new();
    if let [d0, d1, ..] = group.devices() {
        for mb in [64usize, 1024] {
            let n = (mb << 20) / 4;
            let x = d0.tensor(&vec![1.5; n], &[n]).map_err(|e| e.to_string())?;
            let t = time(3, 10, || {
                drop(x.to_blocking(d1)?);
                d0.synchronize_blocking()?;
                d1.synchronize_blocking()
            })?;
            let secs = median(t);
            copies.push(Copy {
                bytes: mb << 20,
                us: secs * 1e6,
                gbs: (mb << 20) as f64 / secs / 1e9,
            });
        }
    }
    // Data parallel: 8192 rows through four linear [4096, 4096] + gelu layers, on device 0
    // alone and split over the group (the split, the copies there and back and the join
    // included).
    let (n_rows, k, layers) = (8192usize, 4096usize, 4);
    let d0 = &group.devices()[0];
    let x = d0
        .tensor(&crate::bench::data(n_rows * k, 40), &[n_rows, k])
        .map_err(|e| e.to_string())?;
    let w = crate::bench::data(k * k, 41);
    let weights = group
        .devices()
        .iter()
        .map(|d| d.tensor(&w, &[k, k]))
        .collect::<gpukit::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let forward = |rank: usize, t: &gpukit::Tensor| -> gpukit::Result<gpukit::Tensor> {
        let mut t = t.clone();
        for _ in 0..layers {
            t = t.linear(&weights[rank], None, None)?.gelu()?;
        }
        Ok(t)
    };
    let one = median(time(1, 5, || {
        drop(forward(0, &x)?);
        d0.synchronize_blocking()
    })?);
    let split = median(time(1, 5, || {
        drop(group.data_parallel_blocking(&x, forward)?);
        for d in group.devices() {
            d.synchronize_blocking()?;
        }
        Ok(())
    })?);
    let flops = 2.0 * (n_rows * k * k * layers) as f64;
    let parallel = serde_json::json!({
        "workload": format!("{n_rows} rows through {layers} x (linear [{k}, {k}] + gelu)"),
        "one_gpu_ms": one * 1e3,
        "group_ms": split * 1e3,
        "one_gpu_tflops": flops / one / 1e12,
        "group_tflops": flops / split / 1e12,
        "speedup": one / split,
    });
    if json {
        let out = serde_json::json!({
            "ranks": ranks,
            "nccl": group.uses_nccl(),
            "rows": rows,
            "peer_copies": copies,
            "data_parallel": parallel,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
        );
        return Ok(());
    }
    println!(
        "all_reduce (sum) over {ranks} CUDA devices, {}",
        if group.uses_nccl() {
            "NCCL"
        } else {
            "through the host"
        }
    );
    for r in &rows {
        println!(
            "{:>6} MiB  {:>10.1} us  alg {:>7.1} GB/s  bus {:>7.1} GB/s",
            r.bytes >> 20,
            r.us,
            r.algbw_gbs,
            r.busbw_gbs
        );
    }
    for c in &copies {
        println!(
            "peer copy 0 -> 1, {:>6} MiB  {:>10.1} us  {:>7.1} GB/s",
            c.bytes >> 20,
            c.us,
            c.gbs
        );
    }
    println!(
        "data parallel, {}: one GPU {:.2} ms, {ranks} GPUs {:.2} ms ({:.2}x)",
        parallel["workload"].as_str().unwrap_or(""),
        one * 1e3,
        split * 1e3,
        one / split
    );
    Ok(())
}
