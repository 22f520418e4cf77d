//! Several devices: `Tensor::to` and the collectives of a `DeviceGroup` of the device under
//! test and two CPU devices, against the f64 oracle.

use super::*;
use gpukit::DeviceGroup;

/// all_reduce (sum, mean, max, min), broadcast, all_gather and reduce_scatter over three ranks
/// (this device and two CPU devices) at sizes 0, 1, odd and large, with NaN and ±Inf on one
/// rank; `to` between devices; and every error a group reports.
pub async fn collectives(dev: &Device) {
    let group = DeviceGroup::new(vec![dev.clone(), Device::cpu(), Device::cpu()]).unwrap();
    let ranks = group.size();
    for (case, &m) in [0usize, 1, 7, 1001].iter().enumerate() {
        let shape = [ranks * 2, m];
        let n = 2 * ranks * m;
        let data: Vec<Vec<f32>> = (0..ranks)
            .map(|r| {
                let mut v = Rng::new(35_000 + (case * 10 + r) as u64).vec(n, -3.0, 3.0);
                if r == 1 && n > 2 {
                    v[0] = f32::NAN;
                    v[1] = f32::INFINITY;
                }
                v
            })
            .collect();
        let tensors: Vec<Tensor> = data
            .iter()
            .zip(group.devices())
            .map(|(d, device)| device.tensor(d, &shape).unwrap())
            .collect();
        let ctx = |what: &str| format!("{what} of {shape:?} over {ranks} ranks");
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min] {
            let out = group.all_reduce(&tensors, op).await.unwrap();
            let want: Vec<(f64, Tol)> = (0..n)
                .map(|i| {
                    let column: Vec<f64> = data.iter().map(|d| d[i] as f64).collect();
                    oracle::reduce(op, &column)
                })
                .collect();
            for (rank, t) in out.iter().enumerate() {
                assert!(
                    t.device().same(&group.devices()[rank]),
                    "{}",
                    ctx("all_reduce")
                );
                assert_eq!(t.shape(), &shape);
                let what = ctx(&format!("all_reduce {} on rank {rank}", op.name()));
                check(&what, &|i| format!("{i}"), &t.read().await.unwrap(), &want);
            }
        }
        let out = group.broadcast(&tensors, 1).await.unwrap();
        for t in &out {
            assert_eq!(t.read().await.unwrap().len(), n);
            let got = t.read().await.unwrap();
            assert!(
                got.iter()
                    .zip(&data[1])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{}",
                ctx("broadcast from rank 1")
            );
        }
        let out = group.all_gather(&tensors).await.unwrap();
        let joined: Vec<f32> = data.concat();
        for t in &out {
            assert_eq!(t.shape(), &[ranks * ranks * 2, m]);
            let got = t.read().await.unwrap();
            assert!(
                got.iter()
                    .zip(&joined)
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{}",
                ctx("all_gather")
            );
        }
        let out = group.reduce_scatter(&tensors, ReduceOp::Sum).await.unwrap();
        let part = n / ranks;
        for (rank, t) in out.iter().enumerate() {
            assert_eq!(t.shape(), &[2, m], "{}", ctx("reduce_scatter"));
            let want: Vec<(f64, Tol)> = (rank * part..(rank + 1) * part)
                .map(|i| {
                    let column: Vec<f64> = data.iter().map(|d| d[i] as f64).collect();
                    oracle::reduce(ReduceOp::Sum, &column)
                })
                .collect();
            let what = ctx(&format!("reduce_scatter on rank {rank}"));
            check(&what, &|i| format!("{i}"), &t.read().await.unwrap(), &want);
        }
    }
    // `to`: there and back, and onto the same device.
    let x = dev.tensor(&[1.5, -2.0, f32::NAN], &[3]).unwrap();
    let cpu = Device::cpu();
    let there = x.to(&cpu).await.unwrap();
    assert!(there.device().same(&cpu));
    let back = there.to(dev).await.unwrap();
    let got = back.read().await.unwrap();
    assert!(
        got[0] == 1.5 && got[1] == -2.0 && got[2].is_nan(),
        "{got:?}"
    );
    assert!(x.to(dev).await.unwrap().device().same(dev));

    // Errors.
    let t = |device: &Device, shape: &[usize]| {
        device
            .tensor(&vec![1.0; shape.iter().product()], shape)
            .unwrap()
    };
    let d = group.devices();
    let good = [t(&d[0], &[3, 2]), t(&d[1], &[3, 2]), t(&d[2], &[3, 2])];
    assert!(DeviceGroup::new(Vec::new()).is_err());
    let e = group
        .all_reduce(&good[..2], ReduceOp::Sum)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("one per rank"), "{e}");
    let swapped = [good[1].clone(), good[0].clone(), good[2].clone()];
    let e = group.all_gather(&swapped).await.unwrap_err();
    assert!(e.to_string().contains("rank 0"), "{e}");
    let mixed = [good[0].clone(), t(&d[1], &[2, 3]), good[2].clone()];
    let e = group.all_reduce(&mixed, ReduceOp::Max).await.unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(group.broadcast(&good, 3).await.is_err());
    let odd = [t(&d[0], &[2, 2]), t(&d[1], &[2, 2]), t(&d[2], &[2, 2])];
    let e = group.reduce_scatter(&odd, ReduceOp::Sum).await.unwrap_err();
    assert!(e.to_string().contains("equal parts"), "{e}");
}

/// data_parallel, and column- and row-parallel linear layers over three ranks, against the
/// same work on one device.
pub async fn parallel_helpers(dev: &Device) {
    let group = DeviceGroup::new(vec![dev.clone(), Device::cpu(), Device::cpu()]).unwrap();
    let mut rng = Rng::new(36_000);
    // Data parallel: 7 rows over 3 ranks (3, 3, 1), each rank scaling by rank + 1.
    let xs = rng.vec(7 * 5, -1.0, 1.0);
    let x = dev.tensor(&xs, &[7, 5]).unwrap();
    let y = group
        .data_parallel(&x, |rank, part| part.scale(rank as f32 + 1.0))
        .await
        .unwrap();
    assert!(y.device().same(dev));
    assert_eq!(y.shape(), &[7, 5]);
    let want: Vec<(f64, Tol)> = xs
        .iter()
        .enumerate()
        .map(|(i, &v)| oracle::unary(UnaryOp::Scale((i / 5 / 3) as f32 + 1.0), v as f64))
        .collect();
    check(
        "data_parallel",
        &|i| format!("{i}"),
        &y.read().await.unwrap(),
        &want,
    );
    assert!(group
        .data_parallel(&dev.scalar(1.0).unwrap(), |_, t| Ok(t.clone()))
        .await
        .is_err());

    // The reference: x [3, 6] times w [6, 6]^T plus b, on one CPU device.
    let (m, k, n) = (3usize, 6usize, 6usize);
    let (xh, wh, bh) = (
        rng.vec(m * k, -1.0, 1.0),
        rng.vec(n * k, -1.0, 1.0),
        rng.vec(n, -1.0, 1.0),
    );
    let cpu = Device::cpu();
    let full = cpu
        .tensor(&xh, &[m, k])
        .unwrap()
        .linear(
            &cpu.tensor(&wh, &[n, k]).unwrap(),
            Some(&cpu.tensor(&bh, &[n]).unwrap()),
            None,
        )
        .unwrap()
        .read()
        .await
        .unwrap();
    let want: Vec<(f64, Tol)> = full
        .iter()
        .map(|&v| {
            (
                v as f64,
                Tol {
                    atol: 1e-5,
                    rtol: 1e-5,
                },
            )
        })
        .collect();
    let ranks = group.size();
    // Column parallel: rank i holds weight rows 2i..2i+2 and bias entries 2i..2i+2.
    let per = n / ranks;
    let on =
        |r: usize, data: &[f32], shape: &[usize]| group.devices()[r].tensor(data, shape).unwrap();
    let xs: Vec<Tensor> = (0..ranks).map(|r| on(r, &xh, &[m, k])).collect();
    let ws: Vec<Tensor> = (0..ranks)
        .map(|r| on(r, &wh[r * per * k..(r + 1) * per * k], &[per, k]))
        .collect();
    let bs: Vec<Tensor> = (0..ranks)
        .map(|r| on(r, &bh[r * per..(r + 1) * per], &[per]))
        .collect();
    let outs = group
        .linear_column_parallel(&xs, &ws, Some(&bs))
        .await
        .unwrap();
    for (r, out) in outs.iter().enumerate() {
        assert_eq!(out.shape(), &[m, n]);
        check(
            &format!("column-parallel linear, rank {r}"),
            &|i| format!("{i}"),
            &out.read().await.unwrap(),
            &want,
        );
    }
    // Row parallel: rank i holds weight columns 2i..2i+2 and the same columns of x.
    let cols = k / ranks;
    let take = |data: &[f32], rows: usize, r: usize| -> Vec<f32> {
        (0..rows)
            .flat_map(|i| data[i * k + r * cols..i * k + (r + 1) * cols].to_vec())
            .collect()
    };
    let xs: Vec<Tensor> = (0..ranks)
        .map(|r| on(r, &take(&xh, m, r), &[m, cols]))
        .collect();
    let ws: Vec<Tensor> = (0..ranks)
        .map(|r| on(r, &take(&wh, n, r), &[n, cols]))
        .collect();
    let bias = dev.tensor(&bh, &[n]).unwrap();
    let outs = group
        .linear_row_parallel(&xs, &ws, Some(&bias))
        .await
        .unwrap();
    for (r, out) in outs.iter().enumerate() {
        check(
            &format!("row-parallel linear, rank {r}"),
            &|i| format!("{i}"),
            &out.read().await.unwrap(),
            &want,
        );
    }
    let e = group
        .linear_row_parallel(&xs[..2], &ws, None)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("one each per rank"), "{e}");
}
