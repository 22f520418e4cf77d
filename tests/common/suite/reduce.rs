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
