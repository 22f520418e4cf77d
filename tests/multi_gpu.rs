//! The collectives of a group of every CUDA device of this machine, on NCCL, against an f64
//! reference. Runs where there are at least two CUDA devices; elsewhere prints a `SKIPPED`
//! line, unless `GPUKIT_REQUIRE_GPUS=2` is set (on the two-GPU machine), which makes fewer
//! devices, or NCCL missing, a failure.
#![cfg(not(target_arch = "wasm32"))]

use gpukit::{Backend, Device, DeviceGroup, ReduceOp};

fn group() -> Option<DeviceGroup> {
    let required = std::env::var_os("GPUKIT_REQUIRE_GPUS").is_some();
    let found = DeviceGroup::cuda_all_blocking().map_err(|e| e.to_string());
    match found {
        Ok(g) if g.size() >= 2 => Some(g),
        Ok(g) if required => panic!("GPUKIT_REQUIRE_GPUS is set but {} CUDA device(s)", g.size()),
        Err(e) if required => panic!("GPUKIT_REQUIRE_GPUS is set but CUDA cannot run: {e}"),
        other => {
            use std::io::Write;
            let why = match other {
                Ok(g) => format!("{} CUDA device(s)", g.size()),
                Err(e) => e,
            };
            let _ = writeln!(std::io::stderr(), "SKIPPED (two GPUs): {why}");
            None
        }
    }
}

#[test]
fn all_reduce_over_nccl_matches_the_reference() {
    let Some(group) = group() else { return };
    if std::env::var_os("GPUKIT_REQUIRE_GPUS").is_some() {
        assert!(group.uses_nccl(), "NCCL should run the group's collectives");
    }
    let ranks = group.size();
    for n in [0usize, 1, 1023, 1 << 20] {
        let data: Vec<Vec<f32>> = (0..ranks)
            .map(|r| {
                (0..n)
                    .map(|i| ((i * 7919 + r * 104729) % 2001) as f32 / 1000.0 - 1.0)
                    .collect()
            })
            .collect();
        let tensors: Vec<_> = data
            .iter()
            .zip(group.devices())
            .map(|(d, dev)| dev.tensor(d, &[n]).unwrap())
            .collect();
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            let out = group.all_reduce_blocking(&tensors, op).unwrap();
            for (rank, t) in out.iter().enumerate() {
                assert!(t.device().same(&group.devices()[rank]));
                let got = t.read_blocking().unwrap();
                for (i, &g) in got.iter().enumerate() {
                    let column = data.iter().map(|d| d[i] as f64);
                    let want = match op {
                        ReduceOp::Sum => column.sum::<f64>(),
                        ReduceOp::Mean => column.sum::<f64>() / ranks as f64,
                        ReduceOp::Max => column.fold(f64::NEG_INFINITY, f64::max),
                        ReduceOp::Min => column.fold(f64::INFINITY, f64::min),
                    };
                    assert!(
                        (g as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{} of {n} on rank {rank}, [{i}]: {g} vs {want}",
                        op.name()
                    );
                }
            }
        }
    }
    // broadcast, all_gather and reduce_scatter on NCCL, against the host's arithmetic.
    let rows = 2 * ranks;
    let data: Vec<Vec<f32>> = (0..ranks)
        .map(|r| (0..rows * 3).map(|i| (i + 100 * r) as f32 * 0.5).collect())
        .collect();
    let tensors: Vec<_> = data
        .iter()
        .zip(group.devices())
        .map(|(d, dev)| dev.tensor(d, &[rows, 3]).unwrap())
        .collect();
    for (rank, t) in group
        .broadcast_blocking(&tensors, 1)
        .unwrap()
        .iter()
        .enumerate()
    {
        assert_eq!(
            t.read_blocking().unwrap(),
            data[1],
            "broadcast on rank {rank}"
        );
    }
    let joined: Vec<f32> = data.concat();
    for t in group.all_gather_blocking(&tensors).unwrap() {
        assert_eq!(t.shape(), &[rows * ranks, 3]);
        assert_eq!(t.read_blocking().unwrap(), joined);
    }
    let parts = group
        .reduce_scatter_blocking(&tensors, ReduceOp::Sum)
        .unwrap();
    let part = rows * 3 / ranks;
    for (rank, t) in parts.iter().enumerate() {
        assert_eq!(t.shape(), &[rows / ranks, 3]);
        let want: Vec<f32> = (rank * part..(rank + 1) * part)
            .map(|i| data.iter().map(|d| d[i]).sum())
            .collect();
        assert_eq!(
            t.read_blocking().unwrap(),
            want,
            "reduce_scatter on rank {rank}"
        );
    }
    // The host-staged path on the same devices agrees: a group of one CUDA device and the CPU.
    let mixed = DeviceGroup::new(vec![group.devices()[0].clone(), Device::cpu()]).unwrap();
    assert!(!mixed.uses_nccl());
    let a = group.devices()[0].tensor(&[1.0, 2.0], &[2]).unwrap();
    let b = Device::cpu().tensor(&[3.0, -4.0], &[2]).unwrap();
    let b = b.to_blocking(&mixed.devices()[1]).unwrap();
    let out = mixed.all_reduce_blocking(&[a, b], ReduceOp::Sum).unwrap();
    assert_eq!(out[1].read_blocking().unwrap(), vec![4.0, -2.0]);
    assert_eq!(group.devices()[0].info().backend, Backend::Cuda);
}

#[test]
fn peer_copies_keep_every_bit_and_order_with_both_streams() {
    let Some(group) = group() else { return };
    let (d0, d1) = (&group.devices()[0], &group.devices()[1]);
    for n in [0usize, 1, 4099, 1 << 22] {
        let data: Vec<f32> = (0..n)
            .map(|i| match i % 5 {
                0 => f32::NAN,
                1 => -0.0,
                2 => f32::INFINITY,
                _ => i as f32 * 0.25 - 3.0,
            })
            .collect();
        // Written by an op just before the copy, read by an op just after it.
        let x = d0.tensor(&data, &[n]).unwrap().scale(2.0).unwrap();
        let y = x.to_blocking(d1).unwrap();
        assert!(y.device().same(d1));
        let z = y.scale(0.5).unwrap();
        drop(x);
        let got = z.read_blocking().unwrap();
        assert_eq!(got.len(), n);
        for (i, (g, w)) in got.iter().zip(&data).enumerate() {
            assert!(
                g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                "{n} elements, [{i}]: {g} vs {w}"
            );
        }
        let back = y.to_blocking(d0).unwrap().read_blocking().unwrap();
        assert_eq!(back.len(), n);
    }
}

#[test]
fn data_parallel_over_both_gpus_matches_one_gpu() {
    let Some(group) = group() else { return };
    let d0 = &group.devices()[0];
    let (rows, k, n) = (64usize, 256usize, 128usize);
    let xs: Vec<f32> = (0..rows * k)
        .map(|i| ((i * 31) % 97) as f32 / 97.0 - 0.5)
        .collect();
    let ws: Vec<f32> = (0..n * k)
        .map(|i| ((i * 17) % 89) as f32 / 89.0 - 0.5)
        .collect();
    let x = d0.tensor(&xs, &[rows, k]).unwrap();
    let weights: Vec<_> = group
        .devices()
        .iter()
        .map(|d| d.tensor(&ws, &[n, k]).unwrap())
        .collect();
    let one = x.linear(&weights[0], None, None).unwrap().gelu().unwrap();
    let both = group
        .data_parallel_blocking(&x, |rank, part| {
            part.linear(&weights[rank], None, None)?.gelu()
        })
        .unwrap();
    assert_eq!(both.shape(), one.shape());
    let (a, b) = (one.read_blocking().unwrap(), both.read_blocking().unwrap());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!((x - y).abs() <= 1e-5 * (1.0 + x.abs()), "[{i}]: {x} vs {y}");
    }
}
