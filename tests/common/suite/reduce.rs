//! Reductions over everything and over the last axis, and dot products.

use super::*;

async fn run_reduce(dev: &Device, op: ReduceOp, x: &[f32], shape: &[usize], last: bool, ctx: &str) {
    let t = dev.tensor(x, shape).unwrap();
    let y = if last {
        t.reduce_last(op).unwrap()
    } else {
        t.reduce(op).unwrap()
    };
    let cols = if last {
        *shape.last().unwrap()
    } else {
        x.len()
    };
    let rows: usize = if last {
        shape[..shape.len() - 1].iter().product()
    } else {
        1
    };
    let expect_shape: Vec<usize> = if last {
        shape[..shape.len() - 1].to_vec()
    } else {
        vec![]
    };
    assert_eq!(y.shape(), expect_shape.as_slice(), "{ctx}: output shape");
    let got = y.read().await.unwrap();
    let xs = widen(x);
    let want: Vec<(f64, Tol)> = (0..rows)
        .map(|r| {
            if cols == 0 {
                (
                    0.0,
                    Tol {
                        atol: 0.0,
                        rtol: 0.0,
                    },
                )
            } else {
                oracle::reduce(op, &xs[r * cols..(r + 1) * cols])
            }
        })
        .collect();
    check(ctx, &|r| format!("row {r}"), &got, &want);
}

pub async fn reduce_random(dev: &Device) {
    for (k, op) in ReduceOp::ALL.into_iter().enumerate() {
        let mut shapes = shapes();
        shapes.extend([vec![3, 4097], vec![2, 65537], vec![1_000_003]]);
        for shape in shapes {
            let n: usize = shape.iter().product();
            let seed = 4000 + k as u64 * 100 + n as u64;
            let x = Rng::new(seed).vec(n, -4.0, 4.0);
            if n == 0 && op != ReduceOp::Sum {
                let t = dev.tensor(&x, &shape).unwrap();
                let e = t.reduce(op).unwrap_err();
                assert!(
                    matches!(e, Error::Empty { .. }),
                    "{} of empty: {e}",
                    op.name()
                );
                continue;
            }
            run_reduce(
                dev,
                op,
                &x,
                &shape,
                false,
                &format!("{} of all {shape:?} seed {seed}", op.name()),
            )
            .await;
            if shape.len() == 2 {
                run_reduce(
                    dev,
                    op,
                    &x,
                    &shape,
                    true,
                    &format!("{} along last axis {shape:?} seed {seed}", op.name()),
                )
                .await;
            }
        }
    }
    // The sum along an empty last axis is 0 per row; the mean has no value.
    let t = dev.tensor(&[], &[4, 0]).unwrap();
    assert_eq!(t.sum_last().unwrap().read().await.unwrap(), vec![0.0; 4]);
    assert!(matches!(t.mean_last().unwrap_err(), Error::Empty { .. }));
}

pub async fn reduce_edges(dev: &Device) {
    let rows: [&[f32]; 5] = [
        &[1.0, f32::NAN, 2.0],
        &[1.0, f32::INFINITY, 2.0],
        &[f32::NEG_INFINITY, 1.0, 2.0],
        &[f32::INFINITY, f32::NEG_INFINITY, 0.0],
        &[-0.0, 0.0, -0.0],
    ];
    for op in ReduceOp::ALL {
        for row in rows {
            run_reduce(
                dev,
                op,
                row,
                &[row.len()],
                false,
                &format!("{} of {row:?}", op.name()),
            )
            .await;
        }
        let flat: Vec<f32> = rows.concat();
        run_reduce(
            dev,
            op,
            &flat,
            &[rows.len(), 3],
            true,
            &format!("{} of edge rows", op.name()),
        )
        .await;
    }
}

pub async fn dot_random(dev: &Device) {
    for n in SIZES.into_iter().chain([1_000_003]) {
        let seed = 5000 + n as u64;
        let mut rng = Rng::new(seed);
        let (a, b) = (rng.vec(n, -2.0, 2.0), rng.vec(n, -2.0, 2.0));
        let got = dev
            .tensor(&a, &[n])
            .unwrap()
            .dot(&dev.tensor(&b, &[n]).unwrap())
            .unwrap()
            .read()
            .await
            .unwrap();
        let prods: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| x as f64 * y as f64)
            .collect();
        let (want, tol) = oracle::reduce(ReduceOp::Sum, &prods);
        check(
            &format!("dot n={n} seed {seed}"),
            &|_| "".into(),
            &got,
            &[(want, tol)],
        );
    }
    let a = dev.tensor(&[1.0, 2.0], &[2]).unwrap();
    let b = dev.tensor(&[1.0, 2.0, 3.0], &[3]).unwrap();
    assert!(matches!(
        a.dot(&b).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// `shape` without `axis` (or with it as 1), and the f64 rows along `axis` of `x`, in the
/// output's order.
fn axis_rows(x: &[f32], shape: &[usize], axis: usize) -> Vec<Vec<f64>> {
    let outer: usize = shape[..axis].iter().product();
    let size = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut rows = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            rows.push(
                (0..size)
                    .map(|k| x[(o * size + k) * inner + i] as f64)
                    .collect(),
            );
        }
    }
    rows
}

/// sum, mean, max, min and argmax along every axis of random shapes of up to 6 axes, with and
/// without keepdim, NaN and ±Inf among the inputs; masked_mean with lengths from 0 to the
/// whole sequence and NaN in the padding; and the errors for a missing axis and bad lengths.
pub async fn reduce_axes(dev: &Device) {
    for seed in 0..24u64 {
        let mut rng = Rng::new(32_000 + seed);
        let rank = 1 + (rng.next_u64() % 6) as usize;
        let shape: Vec<usize> = (0..rank)
            .map(|_| [1usize, 2, 3, 5, 7][(rng.next_u64() % 5) as usize])
            .collect();
        let n: usize = shape.iter().product();
        let mut x = rng.vec(n, -4.0, 4.0);
        if seed % 3 == 0 {
            x[(rng.next_u64() % n as u64) as usize] = EDGES[(seed as usize / 3) % 3];
        }
        let t = dev.tensor(&x, &shape).unwrap();
        for axis in 0..rank {
            let rows = axis_rows(&x, &shape, axis);
            for (k, op) in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min]
                .into_iter()
                .enumerate()
            {
                let keepdim = (seed as usize + k + axis).is_multiple_of(2);
                let y = t.reduce_axis(op, axis, keepdim).unwrap();
                let mut want_shape = shape.clone();
                if keepdim {
                    want_shape[axis] = 1;
                } else {
                    want_shape.remove(axis);
                }
                let ctx = format!(
                    "{} axis {axis} of {shape:?} (keepdim {keepdim}), seed {}",
                    op.name(),
                    32_000 + seed
                );
                assert_eq!(y.shape(), &want_shape[..], "{ctx}");
                let want: Vec<(f64, Tol)> = rows.iter().map(|r| oracle::reduce(op, r)).collect();
                check(
                    &ctx,
                    &|i| format!("row {i}"),
                    &y.read().await.unwrap(),
                    &want,
                );
            }
            let y = t.argmax_axis(axis, false).unwrap();
            let want: Vec<(f64, Tol)> = rows
                .iter()
                .map(|r| {
                    // The first NaN, else the first largest.
                    let at = r.iter().position(|v| v.is_nan()).unwrap_or_else(|| {
                        let m = r.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                        r.iter().position(|&v| v == m).unwrap_or(0)
                    });
                    (
                        at as f64,
                        Tol {
                            atol: 0.0,
                            rtol: 0.0,
                        },
                    )
                })
                .collect();
            let ctx = format!("argmax axis {axis} of {shape:?}, seed {}", 32_000 + seed);
            check(
                &ctx,
                &|i| format!("row {i}"),
                &y.read().await.unwrap(),
                &want,
            );
        }
        let e = t.reduce_axis(ReduceOp::Sum, rank, false).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(t.argmax_axis(rank, true).is_err());
    }

    // Mean pooling: [3, 5, 4] with lengths 5, 2 and 0; the padding holds NaN.
    let (b, s, d) = (3, 5, 4);
    let mut x = Rng::new(32_500).vec(b * s * d, -2.0, 2.0);
    let lengths = [5u32, 2, 0];
    for (i, &l) in lengths.iter().enumerate() {
        for p in l as usize..s {
            x[(i * s + p) * d] = f32::NAN;
        }
    }
    let t = dev.tensor(&x, &[b, s, d]).unwrap();
    let y = t.masked_mean(&lengths).unwrap();
    assert_eq!(y.shape(), &[b, d]);
    let want: Vec<(f64, Tol)> = (0..b * d)
        .map(|j| {
            let (i, c) = (j / d, j % d);
            let l = lengths[i] as usize;
            let sum: f64 = (0..l).map(|p| x[(i * s + p) * d + c] as f64).sum();
            let tol = Tol {
                atol: 1e-6,
                rtol: 1e-6,
            };
            (if l == 0 { f64::NAN } else { sum / l as f64 }, tol)
        })
        .collect();
    check(
        "masked_mean",
        &|i| format!("{i}"),
        &y.read().await.unwrap(),
        &want,
    );
    assert!(t.masked_mean(&[1, 2]).is_err());
    assert!(t.masked_mean(&[1, 6, 0]).is_err());
    assert!(dev.tensor(&[1.0], &[1]).unwrap().masked_mean(&[1]).is_err());

    // The same lengths as a device tensor (u32 and i32), eagerly and replayed with new ones.
    for lens in [
        dev.tensor_of(&lengths, &[b]).unwrap(),
        dev.tensor_of(&lengths.map(|l| l as i32), &[b]).unwrap(),
    ] {
        let y = t.masked_mean_by(&lens).unwrap();
        assert_eq!(y.shape(), &[b, d]);
        check(
            "masked_mean_by",
            &|i| format!("{i} ({})", lens.dtype()),
            &y.read().await.unwrap(),
            &want,
        );
    }
    // Beyond seq counts as seq; a negative i32 length averages nothing (NaN).
    let over = dev.tensor_of(&[9i32, -3, 1], &[b]).unwrap();
    let got = t.masked_mean_by(&over).unwrap().read().await.unwrap();
    let whole = t.masked_mean(&[5, 0, 1]).unwrap().read().await.unwrap();
    for (j, (g, w)) in got.iter().zip(&whole).enumerate() {
        assert!(g == w || (g.is_nan() && w.is_nan()), "{j}: {g} vs {w}");
    }
    assert!(got[d..2 * d].iter().all(|v| v.is_nan()));
    let mut batch = dev.batch();
    let xv = batch.tensor(&t).unwrap();
    let lv = batch.upload_of(&lengths, &[b]).unwrap();
    let pooled = batch
        .apply("masked_mean", &[xv, lv], |v| v[0].masked_mean_by(v[1]))
        .unwrap();
    batch.output(pooled).unwrap();
    let mut graph = batch.compile().unwrap();
    for new in [[1u32, 1, 3], [5, 2, 0]] {
        graph.set_input(lv, &new).unwrap();
        let got = graph.run(&[]).await.unwrap().get(pooled).unwrap().to_vec();
        let want = t.masked_mean(&new).unwrap().read().await.unwrap();
        for (j, (g, w)) in got.iter().zip(&want).enumerate() {
            let close = (g - w).abs() <= 1e-6 * w.abs().max(1.0);
            assert!(
                close || (g.is_nan() && w.is_nan()),
                "graph {new:?} {j}: {g} vs {w}"
            );
        }
    }
    let float_lengths = dev.tensor(&[1.0, 2.0, 3.0], &[b]).unwrap();
    let e = t.masked_mean_by(&float_lengths).unwrap_err();
    assert!(e.to_string().contains("u32"), "{e}");
    let short = dev.tensor_of(&[1u32, 2], &[2]).unwrap();
    assert!(t.masked_mean_by(&short).is_err());
}
