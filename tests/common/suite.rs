//! The op suite, written once. Each function takes the device to test; `tests/ops.rs`
//! instantiates every function for every backend. Inputs are seeded random data (never zeros),
//! the edge values in `EDGES`, and the sizes in `SIZES`; every result is compared with the f64
//! oracle within the op's tolerance.

pub use super::reliability::*;

use super::oracle::{self, Tol};
use super::{check, Rng, EDGES, SHAPE_2D, SIZES};
use gpukit::{BinaryOp, Device, Error, ReduceOp, Tensor, UnaryOp};

fn shapes() -> Vec<Vec<usize>> {
    let mut s: Vec<Vec<usize>> = SIZES.iter().map(|&n| vec![n]).collect();
    s.push(SHAPE_2D.to_vec());
    s
}

fn widen(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// Random inputs where the op is defined (log and sqrt get positive values; their negative
/// and zero inputs are covered by the edge test).
fn unary_input(op: UnaryOp, rng: &mut Rng, n: usize) -> Vec<f32> {
    match op {
        UnaryOp::Log | UnaryOp::Sqrt => rng.vec(n, 0.01, 4.0),
        _ => rng.vec(n, -4.0, 4.0),
    }
}

async fn run_unary(dev: &Device, op: UnaryOp, x: &[f32], shape: &[usize], ctx: &str) {
    let t = dev.tensor(x, shape).unwrap();
    let y = t.unary(op).unwrap();
    assert_eq!(y.shape(), shape, "{ctx}: output shape");
    let got = y.read().await.unwrap();
    let want: Vec<(f64, Tol)> = x.iter().map(|&v| oracle::unary(op, v as f64)).collect();
    check(ctx, &|i| format!("{:e}", x[i]), &got, &want);
}

pub async fn unary_random(dev: &Device) {
    for (k, op) in UnaryOp::ALL.into_iter().enumerate() {
        for shape in shapes() {
            let n: usize = shape.iter().product();
            let seed = 1000 + k as u64 * 100 + n as u64;
            let x = unary_input(op, &mut Rng::new(seed), n);
            run_unary(
                dev,
                op,
                &x,
                &shape,
                &format!("{} shape {shape:?} seed {seed}", op.name()),
            )
            .await;
        }
    }
}

pub async fn unary_edges(dev: &Device) {
    for op in UnaryOp::ALL {
        run_unary(
            dev,
            op,
            &EDGES,
            &[EDGES.len()],
            &format!("{} on NaN/inf/edge values", op.name()),
        )
        .await;
    }
}

async fn run_binary(
    dev: &Device,
    op: BinaryOp,
    (a, sa): (&[f32], &[usize]),
    (b, sb): (&[f32], &[usize]),
    ctx: &str,
) {
    let ta = dev.tensor(a, sa).unwrap();
    let tb = dev.tensor(b, sb).unwrap();
    let y = ta.binary(op, &tb).unwrap();
    let got = y.read().await.unwrap();
    let n = got.len();
    assert_eq!(n, y.len(), "{ctx}: read length");
    assert_eq!(n, a.len().max(b.len()), "{ctx}: output size");
    let want: Vec<(f64, Tol)> = (0..n)
        .map(|i| oracle::binary(op, a[i % a.len()] as f64, b[i % b.len()] as f64))
        .collect();
    check(
        ctx,
        &|i| format!("({:e}, {:e})", a[i % a.len()], b[i % b.len()]),
        &got,
        &want,
    );
}

fn operands(op: BinaryOp, rng: &mut Rng, na: usize, nb: usize) -> (Vec<f32>, Vec<f32>) {
    let a = rng.vec(na, -4.0, 4.0);
    let b = if op == BinaryOp::Div {
        rng.signed_vec(nb, 0.5, 4.0)
    } else {
        rng.vec(nb, -4.0, 4.0)
    };
    (a, b)
}

pub async fn binary_random(dev: &Device) {
    for (k, op) in BinaryOp::ALL.into_iter().enumerate() {
        for shape in shapes() {
            let n: usize = shape.iter().product();
            let seed = 2000 + k as u64 * 100 + n as u64;
            let (a, b) = operands(op, &mut Rng::new(seed), n, n);
            run_binary(
                dev,
                op,
                (&a, &shape),
                (&b, &shape),
                &format!("{} {shape:?} seed {seed}", op.name()),
            )
            .await;
        }
        // Broadcasting: a row over the last axis, a scalar, on either side; odd sizes.
        let cases: [(&[usize], &[usize]); 7] = [
            (&[37, 129], &[129]),
            (&[129], &[37, 129]),
            (&[1, 129], &[37, 129]),
            (&[37, 129], &[]),
            (&[1], &[65537]),
            (&[65537], &[1]),
            (&[3, 4097], &[4097]),
        ];
        for (sa, sb) in cases {
            let seed = 3000 + k as u64;
            let (a, b) = operands(
                op,
                &mut Rng::new(seed),
                sa.iter().product(),
                sb.iter().product(),
            );
            run_binary(
                dev,
                op,
                (&a, sa),
                (&b, sb),
                &format!("{} {sa:?} with {sb:?} seed {seed}", op.name()),
            )
            .await;
        }
    }
}

pub async fn binary_edges(dev: &Device) {
    let n = EDGES.len();
    let a: Vec<f32> = (0..n * n).map(|i| EDGES[i / n]).collect();
    let b: Vec<f32> = (0..n * n).map(|i| EDGES[i % n]).collect();
    for op in BinaryOp::ALL {
        run_binary(
            dev,
            op,
            (&a, &[n * n]),
            (&b, &[n * n]),
            &format!("{} on all pairs of edge values", op.name()),
        )
        .await;
    }
}

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

async fn run_softmax(dev: &Device, x: &[f32], shape: &[usize], log: bool, ctx: &str) {
    let t = dev.tensor(x, shape).unwrap();
    let y = if log {
        t.log_softmax().unwrap()
    } else {
        t.softmax().unwrap()
    };
    assert_eq!(y.shape(), shape, "{ctx}: shape");
    let got = y.read().await.unwrap();
    let cols = *shape.last().unwrap();
    let xs = widen(x);
    let want: Vec<(f64, Tol)> = if cols == 0 {
        vec![]
    } else {
        xs.chunks(cols)
            .flat_map(|row| {
                let (v, tol) = oracle::softmax(row, log);
                v.into_iter().map(move |w| (w, tol))
            })
            .collect()
    };
    check(ctx, &|i| format!("{:e}", x[i]), &got, &want);
}

pub async fn softmax_random(dev: &Device) {
    let shapes: [&[usize]; 9] = [
        &[1],
        &[3],
        &[257],
        &[37, 129],
        &[4, 4097],
        &[2, 65537],
        &[1000, 7],
        &[0, 5],
        &[3, 0],
    ];
    for log in [false, true] {
        for shape in shapes {
            let n: usize = shape.iter().product();
            let seed = 6000 + n as u64;
            let x = Rng::new(seed).vec(n, -8.0, 8.0);
            let name = if log { "log_softmax" } else { "softmax" };
            run_softmax(
                dev,
                &x,
                shape,
                log,
                &format!("{name} {shape:?} seed {seed}"),
            )
            .await;
        }
        // Large values: stability needs the maximum subtracted first.
        let x: Vec<f32> = Rng::new(7).vec(300, 1.0e4, 1.0e4 + 10.0);
        run_softmax(dev, &x, &[3, 100], log, "softmax of values near 1e4").await;
    }
}

pub async fn softmax_edges(dev: &Device) {
    let x: Vec<f32> = vec![
        1.0,
        2.0,
        3.0, //
        f32::NEG_INFINITY,
        0.0,
        1.0, //
        f32::NAN,
        1.0,
        2.0, //
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY, //
        f32::INFINITY,
        0.0,
        1.0, //
        -1e30,
        1e30,
        0.0,
    ];
    for log in [false, true] {
        run_softmax(
            dev,
            &x,
            &[6, 3],
            log,
            &format!("softmax(log={log}) of edge rows"),
        )
        .await;
    }
    // A long row whose first chunk is all -inf exercises merging an empty chunk.
    let mut long = vec![f32::NEG_INFINITY; 5000];
    long[4500] = 1.0;
    long[4999] = 2.0;
    run_softmax(
        dev,
        &long,
        &[5000],
        false,
        "softmax with an all -inf first chunk",
    )
    .await;
    // Rows long enough to be split across blocks (CUDA): chunks of only -inf before finite
    // values, a row of only -inf, a +inf and a NaN far from the start.
    let cols = 40000;
    let mut rows = Rng::new(8).vec(4 * cols, -4.0, 4.0);
    rows[..17000].fill(f32::NEG_INFINITY);
    rows[cols..2 * cols].fill(f32::NEG_INFINITY);
    rows[2 * cols + 30000] = f32::INFINITY;
    rows[3 * cols + 35000] = f32::NAN;
    for log in [false, true] {
        run_softmax(
            dev,
            &rows,
            &[4, cols],
            log,
            &format!("softmax(log={log}) of long rows with -inf chunks, +inf and NaN"),
        )
        .await;
    }
}

/// 100 chained elementwise ops on one tensor, one read at the end: results stay on the device
/// and must match the same chain in f64.
pub async fn chained_ops(dev: &Device) {
    let n = 4097;
    let x = Rng::new(99).vec(n, -1.0, 1.0);
    let mut t: Tensor = dev.tensor(&x, &[n]).unwrap();
    let mut want = widen(&x);
    let bias = dev.tensor(&[0.25], &[]).unwrap();
    for i in 0..100 {
        t = match i % 4 {
            0 => t.relu().unwrap(),
            1 => t.scale(1.5).unwrap(),
            2 => t.add(&bias).unwrap(),
            _ => t.clip(-2.0, 2.0).unwrap(),
        };
        for w in &mut want {
            *w = match i % 4 {
                0 => w.max(0.0),
                1 => *w * 1.5,
                2 => *w + 0.25,
                _ => w.clamp(-2.0, 2.0),
            };
        }
    }
    let got = t.read().await.unwrap();
    let tol = Tol {
        atol: 1e-5,
        rtol: 1e-5,
    };
    let want: Vec<(f64, Tol)> = want.into_iter().map(|w| (w, tol)).collect();
    check("100 chained ops", &|i| format!("{:e}", x[i]), &got, &want);
}

/// Bad input gives the same clear errors on every backend, and the device stays usable.
pub async fn errors(dev: &Device) {
    let a = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    let b = dev.tensor(&[1.0; 6], &[3, 2]).unwrap();
    let e = a.add(&b).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.is_input(),
        "{e}"
    );
    assert!(
        e.to_string().contains("[2, 3]") && e.to_string().contains("[3, 2]"),
        "message names both shapes: {e}"
    );
    assert!(matches!(
        dev.tensor(&[1.0; 5], &[2, 3]).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        a.clip(1.0, 0.0).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        a.clip(f32::NAN, 0.0).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        a.reshape(&[4]).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        a.read_scalar().await.unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    let scalar = dev.scalar(3.0).unwrap();
    assert!(scalar.softmax().is_err() && scalar.sum_last().is_err());
    let other = Device::cpu();
    let c = other.tensor(&[1.0; 6], &[2, 3]).unwrap();
    if !dev.info().backend.eq(&gpukit::Backend::Cpu) {
        assert!(matches!(
            a.add(&c).unwrap_err(),
            Error::DeviceMismatch { .. }
        ));
    }
    // Still usable after the errors.
    let r = a
        .reshape(&[6])
        .unwrap()
        .add(&scalar)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert_eq!(r, vec![4.0; 6]);
    let mut out = vec![0.0; 2];
    assert!(dev.relu_slice(&[1.0, 2.0, 3.0], &mut out).await.is_err());
    dev.relu_slice(&[1.0, -2.0], &mut out).await.unwrap();
    assert_eq!(out, [1.0, 0.0]);
    assert_eq!(dev.sum_slice(&[1.0, 2.0, 3.5]).await.unwrap(), 6.5);
}

/// Matmul against the f64 oracle: shapes that are multiples of no tile, k up to 4096, batches
/// with either side shared, and the shape errors.
pub async fn matmul_random(dev: &Device) {
    let cases: [(usize, usize, usize); 11] = [
        (300, 129, 257),
        (256, 16, 384),
        (1, 1, 1),
        (7, 13, 5),
        (65, 257, 33),
        (64, 64, 64),
        (1, 1000, 7),
        (257, 65, 1),
        (33, 4096, 17),
        (5, 0, 3),
        (0, 4, 3),
    ];
    for (idx, (m, k, n)) in cases.into_iter().enumerate() {
        let seed = 8000 + idx as u64;
        let mut rng = Rng::new(seed);
        let (a, b) = (rng.vec(m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
        let ta = dev.tensor(&a, &[m, k]).unwrap();
        let tb = dev.tensor(&b, &[k, n]).unwrap();
        let y = ta.matmul(&tb).unwrap();
        assert_eq!(y.shape(), &[m, n]);
        let got = y.read().await.unwrap();
        check(
            &format!("matmul {m}x{k} by {k}x{n} seed {seed}"),
            &|i| format!("out[{}][{}]", i / n.max(1), i % n.max(1)),
            &got,
            &oracle::matmul(&a, &b, m, k, n),
        );
    }
    // Batched, with a shared side broadcast over the batch.
    let (bt, m, k, n) = (3, 17, 19, 23);
    let mut rng = Rng::new(8100);
    let a3 = rng.vec(bt * m * k, -1.0, 1.0);
    let b3 = rng.vec(bt * k * n, -1.0, 1.0);
    let a2 = rng.vec(m * k, -1.0, 1.0);
    let b2 = rng.vec(k * n, -1.0, 1.0);
    // (A, its shape, its batch stride, B, its shape, its batch stride)
    type Case<'a> = (&'a [f32], Vec<usize>, usize, &'a [f32], Vec<usize>, usize);
    let batched: [Case; 3] = [
        (&a3, vec![bt, m, k], m * k, &b3, vec![bt, k, n], k * n),
        (&a3, vec![bt, m, k], m * k, &b2, vec![k, n], 0),
        (&a2, vec![m, k], 0, &b3, vec![bt, k, n], k * n),
    ];
    for (a, sa, a_stride, b, sb, b_stride) in batched {
        let y = dev
            .tensor(a, &sa)
            .unwrap()
            .matmul(&dev.tensor(b, &sb).unwrap())
            .unwrap();
        assert_eq!(y.shape(), &[bt, m, n]);
        let got = y.read().await.unwrap();
        let want: Vec<(f64, Tol)> = (0..bt)
            .flat_map(|i| oracle::matmul(&a[i * a_stride..], &b[i * b_stride..], m, k, n))
            .collect();
        check(
            &format!("batched matmul {sa:?} x {sb:?}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }
    // Several tiles in each direction, batched with B shared.
    let (bt, m, k, n) = (2, 260, 33, 270);
    let mut rng = Rng::new(8101);
    let (a, b) = (rng.vec(bt * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
    let y = dev
        .tensor(&a, &[bt, m, k])
        .unwrap()
        .matmul(&dev.tensor(&b, &[k, n]).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[bt, m, n]);
    let got = y.read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..bt)
        .flat_map(|i| oracle::matmul(&a[i * m * k..], &b, m, k, n))
        .collect();
    check(
        "batched matmul [2, 260, 33] x [33, 270]",
        &|i| format!("flat {i}"),
        &got,
        &want,
    );

    let x = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    assert!(matches!(
        x.matmul(&x).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        x.reshape(&[6]).unwrap().matmul(&x).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// Matmul with NaN and infinity inside: they propagate to exactly the rows and columns they touch.
pub async fn matmul_edges(dev: &Device) {
    let (m, k, n) = (5, 7, 6);
    let mut a = Rng::new(8200).vec(m * k, -1.0, 1.0);
    let b = Rng::new(8201).vec(k * n, -1.0, 1.0);
    a[k + 2] = f32::NAN; // row 1
    a[3 * k + 4] = f32::INFINITY; // row 3
    let got = dev
        .tensor(&a, &[m, k])
        .unwrap()
        .matmul(&dev.tensor(&b, &[k, n]).unwrap())
        .unwrap()
        .read()
        .await
        .unwrap();
    check(
        "matmul with NaN and inf",
        &|i| format!("out[{}][{}]", i / n, i % n),
        &got,
        &oracle::matmul(&a, &b, m, k, n),
    );
}

/// Transposed operands and the fused epilogue, against the same product in f64.
pub async fn matmul_options(dev: &Device) {
    use gpukit::{Activation, MatmulOptions};
    let (m, k, n) = (37, 70, 67);
    let mut rng = Rng::new(8300);
    let a = rng.vec(m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let bias = rng.vec(n, -1.0, 1.0);
    let tbias = dev.tensor(&bias, &[n]).unwrap();
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::GeluTanh),
        Some(Activation::Silu),
    ];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let xa = dev.tensor(&a, &sa).unwrap();
        let xb = dev.tensor(&b, &sb).unwrap();
        for (i, act) in acts.into_iter().enumerate() {
            let with_bias = i % 2 == 0;
            let options = MatmulOptions {
                transpose_a: ta,
                transpose_b: tb,
                bias: with_bias.then_some(&tbias),
                activation: act,
                ..MatmulOptions::default()
            };
            let y = xa.matmul_with(&xb, options).unwrap();
            assert_eq!(y.shape(), &[m, n]);
            let got = y.read().await.unwrap();
            let want = oracle::matmul_with(
                &a,
                &b,
                (m, k, n),
                (ta, tb),
                with_bias.then_some(&bias[..]),
                act.map(|a| a.as_unary()),
            );
            check(
                &format!("matmul ta={ta} tb={tb} bias={with_bias} act={act:?}"),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
        }
    }
    // linear: weight stored [out, in], batched input.
    let (bt, inp, outp) = (2, 33, 19);
    let x = rng.vec(bt * 5 * inp, -1.0, 1.0);
    let w = rng.vec(outp * inp, -1.0, 1.0);
    let c = rng.vec(outp, -1.0, 1.0);
    let y = dev
        .tensor(&x, &[bt, 5, inp])
        .unwrap()
        .linear(
            &dev.tensor(&w, &[outp, inp]).unwrap(),
            Some(&dev.tensor(&c, &[outp]).unwrap()),
            Some(Activation::Silu),
        )
        .unwrap();
    assert_eq!(y.shape(), &[bt, 5, outp]);
    let got = y.read().await.unwrap();
    let want = oracle::matmul_with(
        &x,
        &w,
        (bt * 5, inp, outp),
        (false, true),
        Some(&c),
        Some(gpukit::UnaryOp::Silu),
    );
    check(
        "linear [2, 5, 33] x [19, 33]^T + bias, silu",
        &|i| format!("flat {i}"),
        &got,
        &want,
    );
    // A few rows against a [n, k] weight take the GEMV kernel: 1 and 3 rows, and 2 x 4 rows of
    // a batch with the weight shared; k and n of no special size; every epilogue.
    for (ci, (lead, k, n)) in [
        (vec![1usize], 1000usize, 77usize),
        (vec![3], 96, 13),
        (vec![2, 4], 257, 9),
    ]
    .into_iter()
    .enumerate()
    {
        let rows: usize = lead.iter().product();
        let mut rng = Rng::new(8400 + ci as u64);
        let (x, w, c) = (
            rng.vec(rows * k, -1.0, 1.0),
            rng.vec(n * k, -1.0, 1.0),
            rng.vec(n, -1.0, 1.0),
        );
        let mut shape = lead.clone();
        shape.push(k);
        let tx = dev.tensor(&x, &shape).unwrap();
        let (tw, tc) = (
            dev.tensor(&w, &[n, k]).unwrap(),
            dev.tensor(&c, &[n]).unwrap(),
        );
        for (ai, act) in acts.into_iter().enumerate() {
            let with_bias = ai % 2 == 1;
            let y = tx.linear(&tw, with_bias.then_some(&tc), act).unwrap();
            let mut out_shape = lead.clone();
            out_shape.push(n);
            assert_eq!(y.shape(), out_shape.as_slice());
            let want = oracle::matmul_with(
                &x,
                &w,
                (rows, k, n),
                (false, true),
                with_bias.then_some(&c[..]),
                act.map(|a| a.as_unary()),
            );
            check(
                &format!("gemv {lead:?} x [{n}, {k}]^T bias={with_bias} act={act:?}"),
                &|i| format!("{i}"),
                &y.read().await.unwrap(),
                &want,
            );
        }
    }
    // A bias of the wrong length names both shapes.
    let e = dev.tensor(&a, &[m, k]).unwrap().matmul_with(
        &dev.tensor(&b, &[k, n]).unwrap(),
        MatmulOptions {
            bias: Some(&dev.tensor(&bias[..5], &[5]).unwrap()),
            ..Default::default()
        },
    );
    assert!(matches!(e.unwrap_err(), Error::ShapeMismatch { .. }));
}

/// layernorm and rmsnorm, with and without weight and bias, rows shorter and longer than a
/// workgroup, a constant row, a NaN row, and bad arguments.
pub async fn norms(dev: &Device) {
    let shapes: [&[usize]; 6] = [
        &[1, 1],
        &[3, 7],
        &[37, 129],
        &[4, 4097],
        &[2, 65537],
        &[0, 5],
    ];
    for (si, shape) in shapes.into_iter().enumerate() {
        let cols = *shape.last().unwrap();
        let n: usize = shape.iter().product();
        let seed = 9000 + si as u64;
        let mut rng = Rng::new(seed);
        let mut x = rng.vec(n, -3.0, 5.0);
        if n >= 2 * cols && cols > 1 {
            x[..cols].fill(1.5); // a constant row: layernorm gives the bias
            x[cols + cols / 2] = f32::NAN; // the second row is NaN throughout
        }
        let w = rng.vec(cols, 0.5, 2.0);
        let b = rng.vec(cols, -1.0, 1.0);
        let t = dev.tensor(&x, shape).unwrap();
        let (tw, tb) = (
            dev.tensor(&w, &[cols]).unwrap(),
            dev.tensor(&b, &[cols]).unwrap(),
        );
        for rms in [false, true] {
            for (wi, (weight, bias)) in [
                (None, None),
                (Some(&tw), None),
                (Some(&tw), Some(&tb)),
                (None, Some(&tb)),
            ]
            .into_iter()
            .enumerate()
            {
                let y = if rms {
                    t.rms_norm(weight, bias, 1e-5)
                } else {
                    t.layer_norm(weight, bias, 1e-5)
                }
                .unwrap();
                assert_eq!(y.shape(), shape);
                let got = y.read().await.unwrap();
                let (wv, bv) = (weight.map(|_| &w[..]), bias.map(|_| &b[..]));
                let want: Vec<(f64, Tol)> = widen(&x)
                    .chunks(cols.max(1))
                    .flat_map(|row| {
                        let (v, tol) = oracle::norm(row, rms, wv, bv, 1e-5);
                        v.into_iter().map(move |v| (v, tol))
                    })
                    .collect();
                let ctx = format!(
                    "{} {shape:?} weights#{wi} seed {seed}",
                    if rms { "rms_norm" } else { "layer_norm" }
                );
                check(&ctx, &|i| format!("{:e}", x[i]), &got, &want);
            }
        }
    }
    let t = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    let short = dev.tensor(&[1.0; 2], &[2]).unwrap();
    assert!(matches!(
        t.layer_norm(Some(&short), None, 1e-5).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        t.rms_norm(None, None, f32::NAN).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        dev.scalar(1.0)
            .unwrap()
            .layer_norm(None, None, 1e-5)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
}

/// Coordinates of flat index `i` in `shape` (row-major).
fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut c = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        c[d] = i % shape[d];
        i /= shape[d];
    }
    c
}

fn flat(c: &[usize], shape: &[usize]) -> usize {
    c.iter().zip(shape).fold(0, |acc, (&x, &d)| acc * d + x)
}

fn exact(v: &[f32]) -> Vec<(f64, Tol)> {
    v.iter()
        .map(|&x| {
            (
                x as f64,
                Tol {
                    atol: 0.0,
                    rtol: 0.0,
                },
            )
        })
        .collect()
}

/// permute / transpose / slice / concat move values exactly where coordinates say.
pub async fn layout(dev: &Device) {
    let shape = [2, 3, 5, 7];
    let n: usize = shape.iter().product();
    let x = Rng::new(9100).vec(n, -1.0, 1.0);
    let t = dev.tensor(&x, &shape).unwrap();
    for axes in [
        [0, 1, 2, 3],
        [3, 2, 1, 0],
        [1, 0, 3, 2],
        [2, 3, 0, 1],
        [0, 3, 1, 2],
    ] {
        let y = t.permute(&axes).unwrap();
        let out_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        assert_eq!(y.shape(), out_shape.as_slice());
        let want: Vec<f32> = (0..n)
            .map(|i| {
                let co = coords(i, &out_shape);
                let mut ci = [0; 4];
                for (k, &a) in axes.iter().enumerate() {
                    ci[a] = co[k];
                }
                x[flat(&ci, &shape)]
            })
            .collect();
        check(
            &format!("permute {axes:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }
    let m = dev
        .tensor(&x[..37 * 3], &[37, 3])
        .unwrap()
        .transpose(0, 1)
        .unwrap();
    let want: Vec<f32> = (0..37 * 3).map(|i| x[(i % 37) * 3 + i / 37]).collect();
    check(
        "transpose [37, 3]",
        &|i| format!("{i}"),
        &m.read().await.unwrap(),
        &exact(&want),
    );

    for (axis, range) in [
        (0, 1..2),
        (1, 0..3),
        (2, 1..4),
        (3, 6..7),
        (3, 2..2),
        (1, 1..3),
    ] {
        let y = t.slice(axis, range.clone()).unwrap();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = range.len();
        assert_eq!(y.shape(), out_shape.as_slice());
        let want: Vec<f32> = (0..y.len())
            .map(|i| {
                let mut c = coords(i, &out_shape);
                c[axis] += range.start;
                x[flat(&c, &shape)]
            })
            .collect();
        check(
            &format!("slice axis {axis} {range:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }

    for axis in 0..4 {
        let parts: Vec<Tensor> = [1usize, 2, 3]
            .iter()
            .map(|&k| {
                let mut s = shape.to_vec();
                s[axis] = k;
                let len: usize = s.iter().product();
                dev.tensor(&Rng::new(9200 + k as u64).vec(len, -1.0, 1.0), &s)
                    .unwrap()
            })
            .collect();
        let refs: Vec<&Tensor> = parts.iter().collect();
        let y = Tensor::concat(&refs, axis).unwrap();
        let mut out_shape = shape.to_vec();
        out_shape[axis] = 6;
        assert_eq!(y.shape(), out_shape.as_slice());
        let host: Vec<Vec<f32>> = {
            let mut h = Vec::new();
            for p in &parts {
                h.push(p.read().await.unwrap());
            }
            h
        };
        let want: Vec<f32> = (0..y.len())
            .map(|i| {
                let mut c = coords(i, &out_shape);
                let (part, start) = match c[axis] {
                    0 => (0, 0),
                    1 | 2 => (1, 1),
                    _ => (2, 3),
                };
                c[axis] -= start;
                host[part][flat(&c, parts[part].shape())]
            })
            .collect();
        check(
            &format!("concat along axis {axis}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }

    assert!(matches!(
        t.permute(&[0, 0, 1, 2]).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.permute(&[0, 1, 2]).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.slice(3, 5..8).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        t.slice(4, 0..1).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let other = dev.tensor(&x[..6], &[2, 3]).unwrap();
    assert!(matches!(
        Tensor::concat(&[&t, &other], 0).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(Tensor::concat(&[], 0).is_err());
}

/// Embedding rows picked by id (repeats, first and last row, none), and RoPE in both layouts
/// against rotations computed in f64.
pub async fn embedding_and_rope(dev: &Device) {
    let (vocab, dim) = (50, 37);
    let table = Rng::new(9300).vec(vocab * dim, -1.0, 1.0);
    let t = dev.tensor(&table, &[vocab, dim]).unwrap();
    for ids in [vec![0u32, 49, 7, 7, 3], vec![12], vec![]] {
        let y = t.embedding(&ids).unwrap();
        assert_eq!(y.shape(), &[ids.len(), dim]);
        let want: Vec<f32> = ids
            .iter()
            .flat_map(|&i| table[i as usize * dim..(i as usize + 1) * dim].to_vec())
            .collect();
        check(
            &format!("embedding {ids:?}"),
            &|i| format!("{i}"),
            &y.read().await.unwrap(),
            &exact(&want),
        );
    }
    let e = t.embedding(&[1, 50]).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("50"),
        "{e}"
    );

    let (b, h, seq, d) = (2, 3, 5, 8);
    let offset = 3;
    let x = Rng::new(9301).vec(b * h * seq * d, -2.0, 2.0);
    let tx = dev.tensor(&x, &[b, h, seq, d]).unwrap();
    let (cos, sin) = dev.rope_tables(seq, d, 10000.0, offset).unwrap();
    for layout in [
        gpukit::RopeLayout::Interleaved,
        gpukit::RopeLayout::HalfSplit,
    ] {
        let got = tx.rope(&cos, &sin, layout).unwrap().read().await.unwrap();
        let mut want = vec![0.0f64; x.len()];
        for (row, chunk) in x.chunks(d).enumerate() {
            let p = (row % seq + offset) as f64;
            for j in 0..d / 2 {
                let angle = p * 10000f64.powf(-2.0 * j as f64 / d as f64);
                let (i0, i1) = match layout {
                    gpukit::RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                    gpukit::RopeLayout::HalfSplit => (j, j + d / 2),
                };
                let (x0, x1) = (chunk[i0] as f64, chunk[i1] as f64);
                want[row * d + i0] = x0 * angle.cos() - x1 * angle.sin();
                want[row * d + i1] = x0 * angle.sin() + x1 * angle.cos();
            }
        }
        let tol = Tol {
            atol: 2e-6,
            rtol: 1e-5,
        };
        let want: Vec<(f64, Tol)> = want.into_iter().map(|w| (w, tol)).collect();
        check(
            &format!("rope {layout:?}"),
            &|i| format!("{:e}", x[i]),
            &got,
            &want,
        );
    }
    assert!(
        tx.rope(&sin, &cos, gpukit::RopeLayout::HalfSplit).is_ok(),
        "any [seq, dim/2] tables are accepted"
    );
    let (c2, s2) = dev.rope_tables(seq + 1, d, 10000.0, 0).unwrap();
    assert!(matches!(
        tx.rope(&c2, &s2, gpukit::RopeLayout::HalfSplit)
            .unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    let odd = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    assert!(matches!(
        odd.rope(&cos, &sin, gpukit::RopeLayout::Interleaved)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(dev.rope_tables(4, 7, 10000.0, 0).is_err());
}

/// Fused attention against f64: multi-head and grouped-query, causal (also with fewer queries
/// than keys, as with a KV cache), padding lengths (one of them 0), rows longer than a tile.
pub async fn attention(dev: &Device) {
    use gpukit::AttentionOptions;
    // (batch, hq, hkv, sq, sk, d, dv, causal, lengths)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        bool,
        Option<Vec<u32>>,
    );
    // On wgpu, heads up to 64 wide run on blocks of 16 query rows, up to 128 on blocks of 8,
    // wider ones a row at a time: the cases cover all three, partial blocks and key tiles, d not
    // a multiple of the dot product's parts, and rows without a visible key.
    let cases: [Case; 13] = [
        (2, 4, 2, 5, 7, 16, 12, false, None),
        (1, 2, 2, 9, 9, 8, 8, true, None),
        (1, 3, 1, 3, 10, 8, 5, true, None),
        (2, 2, 1, 4, 10, 8, 8, true, Some(vec![3, 10])),
        (2, 1, 1, 3, 6, 4, 4, false, Some(vec![0, 6])),
        (1, 2, 1, 2, 300, 64, 64, false, None),
        (1, 4, 2, 37, 53, 64, 64, true, None),
        (2, 2, 2, 20, 40, 32, 48, true, Some(vec![17, 40])),
        (1, 2, 1, 33, 21, 64, 64, true, Some(vec![5])),
        (1, 2, 1, 5, 33, 128, 96, true, None),
        (2, 2, 1, 19, 45, 96, 128, true, Some(vec![30, 45])),
        (1, 1, 1, 9, 12, 97, 72, false, None),
        (1, 2, 2, 7, 19, 160, 130, false, None),
    ];
    for (ci, (b, hq, hkv, sq, sk, d, dv, causal, lens)) in cases.into_iter().enumerate() {
        let seed = 9400 + ci as u64;
        let mut rng = Rng::new(seed);
        let q = rng.vec(b * hq * sq * d, -1.0, 1.0);
        let k = rng.vec(b * hkv * sk * d, -1.0, 1.0);
        let v = rng.vec(b * hkv * sk * dv, -1.0, 1.0);
        let tq = dev.tensor(&q, &[b, hq, sq, d]).unwrap();
        let tk = dev.tensor(&k, &[b, hkv, sk, d]).unwrap();
        let tv = dev.tensor(&v, &[b, hkv, sk, dv]).unwrap();
        let options = AttentionOptions {
            causal,
            key_lengths: lens.as_deref(),
            scale: None,
        };
        let y = tq.attention(&tk, &tv, options).unwrap();
        assert_eq!(y.shape(), &[b, hq, sq, dv]);
        let got = y.read().await.unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let want: Vec<(f64, Tol)> = (0..b)
            .flat_map(|bi| {
                let len = lens.as_ref().map_or(sk, |l| l[bi] as usize);
                oracle::attention(
                    &q[bi * hq * sq * d..],
                    &k[bi * hkv * sk * d..],
                    &v[bi * hkv * sk * dv..],
                    (hq, hkv, sq, sk, d, dv),
                    causal,
                    len,
                    scale,
                )
            })
            .collect();
        check(
            &format!("attention case {ci} seed {seed}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }
    let q = dev.tensor(&[0.5; 3 * 2 * 4], &[1, 3, 2, 4]).unwrap();
    let kv = dev.tensor(&[0.5; 2 * 2 * 4], &[1, 2, 2, 4]).unwrap();
    assert!(
        matches!(
            q.attention(&kv, &kv, Default::default()).unwrap_err(),
            Error::ShapeMismatch { .. }
        ),
        "3 query heads over 2 kv heads"
    );
    let q2 = dev.tensor(&[0.5; 2 * 2 * 4], &[1, 2, 2, 4]).unwrap();
    let lens = [1u32, 2];
    let bad = AttentionOptions {
        key_lengths: Some(&lens),
        ..Default::default()
    };
    assert!(matches!(
        q2.attention(&kv, &kv, bad).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// topk and argmax along the last axis: ties go to the lower index, NaN ranks above +inf, -0
/// below +0 (the order of `f32::total_cmp` for positive NaN), several k, odd widths.
pub async fn topk_and_argmax(dev: &Device) {
    for (ci, (rows, cols)) in [(37usize, 129usize), (2, 4097), (1, 1), (3, 300), (5, 2)]
        .into_iter()
        .enumerate()
    {
        let seed = 9500 + ci as u64;
        let mut x = Rng::new(seed).vec(rows * cols, -4.0, 4.0);
        // Ties: round a third of the values to a coarse grid.
        for v in x.iter_mut().step_by(3) {
            *v = (*v * 2.0).round() / 2.0;
        }
        if cols >= 10 {
            x[3] = f32::NAN;
            x[cols + 5] = f32::INFINITY;
            x[cols + 6] = -0.0;
            x[cols + 7] = 0.0;
        }
        let t = dev.tensor(&x, &[rows, cols]).unwrap();
        for k in [1, 5.min(cols), cols] {
            let (vals, idx) = t.topk_last(k).unwrap();
            assert_eq!(vals.shape(), &[rows, k]);
            let (gv, gi) = (vals.read().await.unwrap(), idx.read().await.unwrap());
            let mut want_v = Vec::new();
            let mut want_i = Vec::new();
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mut order: Vec<usize> = (0..cols).collect();
                order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
                want_i.extend(order[..k].iter().map(|&i| i as f32));
                want_v.extend(order[..k].iter().map(|&i| row[i]));
            }
            let ctx = format!("topk k={k} of [{rows}, {cols}] seed {seed}");
            check(
                &format!("{ctx} indices"),
                &|i| format!("{i}"),
                &gi,
                &exact(&want_i),
            );
            check(
                &format!("{ctx} values"),
                &|i| format!("{i}"),
                &gv,
                &exact(&want_v),
            );
            if k == 1 {
                let am = t.argmax_last().unwrap();
                assert_eq!(am.shape(), &[rows]);
                check(
                    &format!("argmax of [{rows}, {cols}]"),
                    &|i| format!("{i}"),
                    &am.read().await.unwrap(),
                    &exact(&want_i),
                );
            }
        }
    }
    let t = dev.tensor(&[1.0, 2.0, 3.0], &[3]).unwrap();
    assert!(matches!(
        t.topk_last(4).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert_eq!(t.topk_last(0).unwrap().0.shape(), &[0]);
    assert_eq!(t.argmax_last().unwrap().read().await.unwrap(), vec![2.0]);
    assert!(matches!(
        dev.tensor(&[], &[2, 0]).unwrap().argmax_last().unwrap_err(),
        Error::Empty { .. }
    ));
}

/// Quantized matmul (Q8_0, Q4_0, Q4_1) against dequantise-then-multiply in f64, GEMV and
/// several rows, k up to 4096; dequantize(); bad inputs.
pub async fn quantized(dev: &Device) {
    use gpukit::QuantFormat;
    for (fi, format) in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1]
        .into_iter()
        .enumerate()
    {
        for (ci, (m, n, k)) in [
            (1usize, 7usize, 32usize),
            (3, 65, 96),
            (1, 33, 4096),
            (5, 1, 64),
            // 37 blocks: rows of words that are not a multiple of the 32 lanes.
            (2, 9, 1184),
            // More rows than a GEMV takes (wgpu and CUDA dequantise, then multiply).
            (9, 7, 32),
            (37, 65, 160),
        ]
        .into_iter()
        .enumerate()
        {
            let seed = 9600 + fi as u64 * 10 + ci as u64;
            let mut rng = Rng::new(seed);
            let w = rng.vec(n * k, -1.0, 1.0);
            let x = rng.vec(m * k, -1.0, 1.0);
            let bytes = oracle::quantize(&w, format);
            let wq = dev.quantized(&bytes, format, n, k).unwrap();
            assert_eq!(wq.shape(), [n, k]);
            let deq = oracle::dequantize(&bytes, format);
            let got = dev.tensor(&x, &[m, k]).unwrap().matmul_quant(&wq).unwrap();
            assert_eq!(got.shape(), &[m, n]);
            let got = got.read().await.unwrap();
            let deq32: Vec<f32> = deq.iter().map(|&v| v as f32).collect();
            let want = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
            check(
                &format!("{format:?} matmul_quant [{m}, {k}] x [{n}, {k}]^T seed {seed}"),
                &|i| format!("{i}"),
                &got,
                &want,
            );
            let d = wq.dequantize().unwrap();
            assert_eq!(d.shape(), &[n, k]);
            let tol = Tol {
                atol: 1e-7,
                rtol: 1e-6,
            };
            let want: Vec<(f64, Tol)> = deq.iter().map(|&v| (v, tol)).collect();
            check(
                &format!("{format:?} dequantize [{n}, {k}]"),
                &|i| format!("{i}"),
                &d.read().await.unwrap(),
                &want,
            );
        }
    }
    // NaN and infinities in x reach the outputs of their rows as in the f64 reference.
    for format in [QuantFormat::Q8_0, QuantFormat::Q4_0, QuantFormat::Q4_1] {
        let (m, n, k) = (3usize, 5usize, 64usize);
        let mut rng = Rng::new(9700);
        let w = rng.vec(n * k, -1.0, 1.0);
        let mut x = rng.vec(m * k, -1.0, 1.0);
        x[3] = f32::NAN;
        x[k + 40] = f32::INFINITY;
        x[2 * k + 7] = f32::NEG_INFINITY;
        let bytes = oracle::quantize(&w, format);
        let wq = dev.quantized(&bytes, format, n, k).unwrap();
        let deq32: Vec<f32> = oracle::dequantize(&bytes, format)
            .iter()
            .map(|&v| v as f32)
            .collect();
        let got = dev.tensor(&x, &[m, k]).unwrap().matmul_quant(&wq).unwrap();
        let want = oracle::matmul_with(&x, &deq32, (m, k, n), (false, true), None, None);
        assert!(want.iter().all(|(v, _)| !v.is_finite()));
        check(
            &format!("{format:?} matmul_quant with NaN and infinities"),
            &|i| format!("{i}"),
            &got.read().await.unwrap(),
            &want,
        );
    }
    let bytes = oracle::quantize(&[0.5; 64], QuantFormat::Q8_0);
    assert!(matches!(
        dev.quantized(&bytes, QuantFormat::Q8_0, 1, 48).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        dev.quantized(&bytes[1..], QuantFormat::Q8_0, 2, 32)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let wq = dev.quantized(&bytes, QuantFormat::Q8_0, 2, 32).unwrap();
    assert!(matches!(
        dev.tensor(&[1.0; 31], &[31])
            .unwrap()
            .matmul_quant(&wq)
            .unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// conv2d (padding, stride, dilation, groups, depthwise, 1x1, bias) and 2-D pooling against
/// direct loops in f64.
pub async fn conv_and_pool(dev: &Device) {
    use gpukit::{Conv2dOptions, Pool2dOptions};
    // (n, c, h, w, o, kh, kw, stride, padding, dilation, groups, bias)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
        bool,
    );
    let cases: [Case; 6] = [
        (2, 3, 9, 11, 5, 3, 3, [1, 1], [1, 1], [1, 1], 1, true),
        (1, 2, 13, 10, 3, 3, 2, [2, 1], [0, 1], [2, 1], 1, false),
        (1, 6, 7, 7, 9, 3, 3, [1, 2], [1, 0], [1, 1], 3, true),
        (2, 4, 8, 8, 4, 3, 3, [1, 1], [1, 1], [1, 1], 4, false),
        (1, 16, 5, 5, 70, 1, 1, [1, 1], [0, 0], [1, 1], 1, true),
        (2, 8, 20, 20, 16, 3, 3, [1, 1], [1, 1], [1, 1], 1, true),
    ];
    for (ci, (n, c, h, w, o, kh, kw, stride, padding, dilation, groups, with_bias)) in
        cases.into_iter().enumerate()
    {
        let seed = 9700 + ci as u64;
        let mut rng = Rng::new(seed);
        let cg = c / groups;
        let x = rng.vec(n * c * h * w, -1.0, 1.0);
        let wt = rng.vec(o * cg * kh * kw, -1.0, 1.0);
        let b = rng.vec(o, -1.0, 1.0);
        let opts = Conv2dOptions {
            stride,
            padding,
            dilation,
            groups,
        };
        let tb = dev.tensor(&b, &[o]).unwrap();
        let y = dev
            .tensor(&x, &[n, c, h, w])
            .unwrap()
            .conv2d(
                &dev.tensor(&wt, &[o, cg, kh, kw]).unwrap(),
                with_bias.then_some(&tb),
                opts,
            )
            .unwrap();
        let oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
        let ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
        assert_eq!(y.shape(), &[n, o, oh, ow]);
        let got = y.read().await.unwrap();
        let mut want = Vec::new();
        for ni in 0..n {
            for oc in 0..o {
                let g = oc / (o / groups);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut acc, mut mag) =
                            (if with_bias { b[oc] as f64 } else { 0.0 }, 0.0f64);
                        for ci2 in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * stride[0] + ky * dilation[0]) as isize
                                        - padding[0] as isize;
                                    let ix = (ox * stride[1] + kx * dilation[1]) as isize
                                        - padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let xv = x[((ni * c + g * cg + ci2) * h + iy as usize) * w
                                        + ix as usize]
                                        as f64;
                                    let t = xv * wt[((oc * cg + ci2) * kh + ky) * kw + kx] as f64;
                                    acc += t;
                                    mag += t.abs();
                                }
                            }
                        }
                        want.push((
                            acc,
                            Tol {
                                atol: 1e-4 * mag + 1e-6,
                                rtol: 1e-6,
                            },
                        ));
                    }
                }
            }
        }
        check(
            &format!("conv2d case {ci} seed {seed}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }

    let (n, c, h, w) = (2, 3, 9, 11);
    let mut x = Rng::new(9800).vec(n * c * h * w, -1.0, 1.0);
    x[5] = f32::NAN;
    let t = dev.tensor(&x, &[n, c, h, w]).unwrap();
    let pool = |kernel, stride, padding| Pool2dOptions {
        kernel,
        stride,
        padding,
    };
    for (max, opts) in [
        (true, pool([3, 3], [2, 2], [1, 1])),
        (false, pool([2, 2], [2, 2], [0, 0])),
        (false, pool([3, 2], [1, 2], [1, 1])),
        (true, pool([2, 3], [3, 1], [0, 0])),
    ] {
        let y = if max {
            t.max_pool2d(opts)
        } else {
            t.avg_pool2d(opts)
        }
        .unwrap();
        let oh = (h + 2 * opts.padding[0] - opts.kernel[0]) / opts.stride[0] + 1;
        let ow = (w + 2 * opts.padding[1] - opts.kernel[1]) / opts.stride[1] + 1;
        assert_eq!(y.shape(), &[n, c, oh, ow]);
        let mut want = Vec::new();
        for p in 0..n * c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut vals = Vec::new();
                    for ky in 0..opts.kernel[0] {
                        for kx in 0..opts.kernel[1] {
                            let iy = (oy * opts.stride[0] + ky) as isize - opts.padding[0] as isize;
                            let ix = (ox * opts.stride[1] + kx) as isize - opts.padding[1] as isize;
                            if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                                vals.push(x[(p * h + iy as usize) * w + ix as usize] as f64);
                            }
                        }
                    }
                    let v = if max {
                        if vals.iter().any(|v| v.is_nan()) {
                            f64::NAN
                        } else {
                            vals.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        }
                    } else {
                        vals.iter().sum::<f64>() / (opts.kernel[0] * opts.kernel[1]) as f64
                    };
                    want.push((
                        v,
                        Tol {
                            atol: 1e-6,
                            rtol: 1e-6,
                        },
                    ));
                }
            }
        }
        check(
            &format!("{} pool {opts:?}", if max { "max" } else { "avg" }),
            &|i| format!("flat {i}"),
            &y.read().await.unwrap(),
            &want,
        );
    }
    let bad = Pool2dOptions {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [2, 0],
    };
    assert!(matches!(
        t.max_pool2d(bad).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let wrong = dev.tensor(&[0.0; 2 * 2 * 3 * 3], &[2, 2, 3, 3]).unwrap();
    assert!(matches!(
        t.conv2d(&wrong, None, Default::default()).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// Every tile configuration the autotuner may pick, pinned, on sizes that are multiples of
/// none of them (with transposes, bias and activation); then `Precision::F16` against the f64
/// product of the unrounded inputs with the f16 tolerance; then an unsupported tile.
pub async fn matmul_tiles_and_f16(dev: &Device) {
    use gpukit::{Activation, MatmulOptions, MatmulTile, Precision};
    let (m, k, n) = (131, 70, 259);
    let mut rng = Rng::new(8500);
    let a = rng.vec(m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let bias = rng.vec(n, -1.0, 1.0);
    let tbias = dev.tensor(&bias, &[n]).unwrap();
    for (i, tile) in MatmulTile::CANDIDATES.into_iter().enumerate() {
        let (ta, tb) = (i % 2 == 1, i % 3 == 0);
        let (sa, sb) = (
            if ta { [k, m] } else { [m, k] },
            if tb { [n, k] } else { [k, n] },
        );
        let (xa, xb) = (dev.tensor(&a, &sa).unwrap(), dev.tensor(&b, &sb).unwrap());
        // TF32 and bf16 (CUDA's tensor-core precisions) on the first tile only: elsewhere
        // they run the f32 kernel, which the other tiles check already.
        let precisions: &[Precision] = if i == 0 {
            &[
                Precision::F32,
                Precision::F16,
                Precision::Tf32,
                Precision::Bf16,
            ]
        } else {
            &[Precision::F32, Precision::F16]
        };
        for &precision in precisions {
            let options = MatmulOptions {
                transpose_a: ta,
                transpose_b: tb,
                bias: Some(&tbias),
                activation: Some(Activation::Gelu),
                precision,
                tile: Some(tile),
            };
            let got = xa.matmul_with(&xb, options).unwrap().read().await.unwrap();
            let want = oracle::matmul_with(
                &a,
                &b,
                (m, k, n),
                (ta, tb),
                Some(&bias),
                Some(gpukit::UnaryOp::Gelu),
            );
            let want = match precision {
                Precision::F32 => want,
                // TF32 keeps f16's 10 mantissa bits (with f32's range).
                Precision::F16 | Precision::Tf32 => oracle::as_f16_tolerance(want),
                Precision::Bf16 => oracle::as_bf16_tolerance(want),
            };
            check(
                &format!("matmul tile {tile} {precision:?} ta={ta} tb={tb}"),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
        }
    }
    // f16 through the autotuner's choice, with k long enough for many k tiles, batched.
    let (bt, m, k, n) = (2, 65, 1000, 33);
    let a = rng.vec(bt * m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let options = MatmulOptions {
        precision: Precision::F16,
        ..MatmulOptions::default()
    };
    let got = dev
        .tensor(&a, &[bt, m, k])
        .unwrap()
        .matmul_with(&dev.tensor(&b, &[k, n]).unwrap(), options)
        .unwrap()
        .read()
        .await
        .unwrap();
    for e in 0..bt {
        let want = oracle::as_f16_tolerance(oracle::matmul(&a[e * m * k..], &b, m, k, n));
        check(
            &format!("matmul f16 batch entry {e} [{m}, {k}] x [{k}, {n}]"),
            &|i| format!("out[{}][{}]", i / n, i % n),
            &got[e * m * n..(e + 1) * m * n],
            &want,
        );
    }
    let x = dev.tensor(&[1.0; 4], &[2, 2]).unwrap();
    let bad = MatmulOptions {
        tile: Some(MatmulTile::new(3, 4, 16)),
        ..MatmulOptions::default()
    };
    let e = x.matmul_with(&x, bad).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("tile"), "{e}");
}

/// A batch gives the same results as the same ops run one by one (fused chains within
/// rounding), with one kernel for the W5 chain, a matmul epilogue absorbed, and the planner's
/// footprint below the unplanned one; then a compiled graph replays with new inputs and
/// matches a fresh run; then mistakes are reported by the op that made them.
pub async fn batch_api(dev: &Device) {
    use gpukit::{ReduceOp, UnaryOp};
    let n = 4099;
    let mut rng = Rng::new(9100);
    let xs = rng.vec(n, -2.0, 2.0);
    // W5: relu, scale 2, add to itself, sigmoid: one fused kernel.
    let mut b = dev.batch();
    let x = b.upload(&xs, &[n]).unwrap();
    let r = b.relu(x).unwrap();
    let s = b.scale(r, 2.0).unwrap();
    let a = b.add(s, s).unwrap();
    let y = b.sigmoid(a).unwrap();
    b.output(y).unwrap();
    let res = b.run().await.unwrap();
    assert_eq!(
        (res.kernels, res.fused_ops),
        (1, 3),
        "one kernel for the W5 chain"
    );
    let t = dev.tensor(&xs, &[n]).unwrap();
    let t = t.relu().unwrap().scale(2.0).unwrap();
    let eager = t.add(&t).unwrap().sigmoid().unwrap().read().await.unwrap();
    assert_close("batch W5 chain", res.get(y).unwrap(), &eager, 1e-6);

    // A small network: linear + bias + relu (epilogue), layer norm, a residual broadcast,
    // softmax, a reduction; several outputs.
    let (m, k, o) = (9, 70, 33);
    let xin = rng.vec(m * k, -1.0, 1.0);
    let w = rng.vec(o * k, -1.0, 1.0);
    let bias = rng.vec(o, -1.0, 1.0);
    let row = rng.vec(o, -1.0, 1.0);
    let mut b = dev.batch();
    let bx = b.upload(&xin, &[m, k]).unwrap();
    let bw = b.upload(&w, &[o, k]).unwrap();
    let bb = b.upload(&bias, &[o]).unwrap();
    let brow = b.upload(&row, &[o]).unwrap();
    let h = b.linear(bx, bw, None, None).unwrap();
    let h = b.add(h, bb).unwrap();
    let h = b.relu(h).unwrap();
    let h = b.layer_norm(h, None, None, 1e-5).unwrap();
    let h = b.mul(h, brow).unwrap();
    let h = b.tanh(h).unwrap();
    let p = b.softmax(h).unwrap();
    let total = b.reduce_last(ReduceOp::Sum, p).unwrap();
    b.output(p).unwrap();
    b.output(total).unwrap();
    let res = b.run().await.unwrap();
    assert!(
        res.fused_ops >= 3,
        "bias, relu into the matmul; mul into tanh: {} folded",
        res.fused_ops
    );
    assert!(
        res.peak_bytes > 0 && res.peak_bytes < res.unplanned_bytes,
        "peak {} vs unplanned {}",
        res.peak_bytes,
        res.unplanned_bytes
    );
    let ex = dev.tensor(&xin, &[m, k]).unwrap();
    let ew = dev.tensor(&w, &[o, k]).unwrap();
    let eb = dev.tensor(&bias, &[o]).unwrap();
    let erow = dev.tensor(&row, &[o]).unwrap();
    let eh = ex
        .linear(&ew, None, None)
        .unwrap()
        .add(&eb)
        .unwrap()
        .relu()
        .unwrap()
        .layer_norm(None, None, 1e-5)
        .unwrap()
        .mul(&erow)
        .unwrap()
        .tanh()
        .unwrap();
    let ep = eh.softmax().unwrap();
    let et = ep.sum_last().unwrap();
    assert_close(
        "batch network softmax",
        res.get(p).unwrap(),
        &ep.read().await.unwrap(),
        1e-5,
    );
    assert_close(
        "batch network row sums",
        res.get(total).unwrap(),
        &et.read().await.unwrap(),
        1e-5,
    );
    assert_eq!(res.outputs().len(), 2);

    // The planner: in a chain of four matmuls each product is dead once the next one is
    // encoded, so the third and fourth reuse the first two buffers: 2 of the 4 products' bytes.
    let d = 64;
    let (xv, wv) = (rng.vec(d * d, -1.0, 1.0), rng.vec(d * d, -0.2, 0.2));
    let mut b = dev.batch();
    let mut h = b.upload(&xv, &[d, d]).unwrap();
    let w = b.upload(&wv, &[d, d]).unwrap();
    for _ in 0..4 {
        h = b.matmul(h, w).unwrap();
    }
    b.output(h).unwrap();
    let res = b.run().await.unwrap();
    let bytes = (d * d * 4) as u64;
    assert_eq!(res.unplanned_bytes, 4 * bytes);
    assert_eq!(res.peak_bytes, 2 * bytes, "buffers reused within the batch");
    let (tx, tw) = (
        dev.tensor(&xv, &[d, d]).unwrap(),
        dev.tensor(&wv, &[d, d]).unwrap(),
    );
    let mut eh = tx.matmul(&tw).unwrap();
    for _ in 0..3 {
        eh = eh.matmul(&tw).unwrap();
    }
    assert_close(
        "batch matmul chain",
        res.get(h).unwrap(),
        &eh.read().await.unwrap(),
        1e-5,
    );

    // Replay: compile, then run with new inputs; each run matches a fresh batch.
    let mut b = dev.batch();
    let x = b.upload(&xs, &[n]).unwrap();
    let c = b.upload(&[0.5], &[1]).unwrap();
    let e = b.unary(UnaryOp::Exp, x).unwrap();
    let e = b.mul(e, c).unwrap();
    let s = b.reduce(ReduceOp::Sum, e).unwrap();
    let z = b.clip(e, -1.0, 1.5).unwrap();
    b.output(z).unwrap();
    b.output(s).unwrap();
    let mut g = b.compile().unwrap();
    for round in 0..3u64 {
        let fresh = Rng::new(9200 + round).vec(n, -2.0, 2.0);
        let res = g.run(&[(x, &fresh[..])]).await.unwrap();
        let t = dev
            .tensor(&fresh, &[n])
            .unwrap()
            .exp()
            .unwrap()
            .scale(0.5)
            .unwrap();
        let want_z = t.clip(-1.0, 1.5).unwrap().read().await.unwrap();
        let want_s = t.sum().unwrap().read().await.unwrap();
        assert_close(
            &format!("replay {round} clip"),
            res.get(z).unwrap(),
            &want_z,
            1e-6,
        );
        assert_close(
            &format!("replay {round} sum"),
            res.get(s).unwrap(),
            &want_s,
            1e-5,
        );
    }
    let e = g.run(&[(x, &[1.0; 3][..])]).await.unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");

    // Mistakes are reported when recorded, by the op that made them.
    let mut b = dev.batch();
    let u = b.upload(&[1.0; 6], &[2, 3]).unwrap();
    let v = b.upload(&[1.0; 4], &[4]).unwrap();
    let e = b.add(u, v).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    let e = b.matmul(u, u).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }),
        "{e}"
    );
    let other = dev.batch().upload(&[1.0], &[1]).unwrap();
    assert!(
        b.relu(other).is_err(),
        "a value of another batch is refused"
    );
    let e = b.run().await.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "no output: {e}");
}

fn assert_close(what: &str, got: &[f32], want: &[f32], rtol: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= rtol * w.abs().max(1.0) || (g.is_nan() && w.is_nan());
        assert!(ok, "{what}: element {i}: {g} vs {w}");
    }
}

/// The ops recorded through `apply` (conv2d, pooling, attention, embedding, rope, permute,
/// slice, concat, argmax, and any closure) give what the tensor API gives, in a run and in a
/// replayed graph; their own checks fire when they are recorded.
pub async fn batch_every_op(dev: &Device) {
    use gpukit::{Conv2dOptions, Pool2dOptions, RopeLayout};
    let mut rng = Rng::new(9300);
    let x = rng.vec(2 * 3 * 9 * 9, -1.0, 1.0);
    let w = rng.vec(4 * 3 * 3 * 3, -0.5, 0.5);
    let (q, k, v) = (
        rng.vec(2 * 6 * 8, -1.0, 1.0),
        rng.vec(2 * 10 * 8, -1.0, 1.0),
        rng.vec(2 * 10 * 8, -1.0, 1.0),
    );
    let table = rng.vec(11 * 8, -1.0, 1.0);
    let ids = [3u32, 0, 10, 7, 7, 1];
    let (cos, sin) = dev.rope_tables(6, 8, 10000.0, 0).unwrap();
    let pool = Pool2dOptions {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
    };

    let mut b = dev.batch();
    let bx = b.upload(&x, &[2, 3, 9, 9]).unwrap();
    let bw = b.upload(&w, &[4, 3, 3, 3]).unwrap();
    let conv = b.conv2d(bx, bw, None, Conv2dOptions::default()).unwrap();
    let conv = b.relu(conv).unwrap();
    let pooled = b.max_pool2d(conv, pool).unwrap();
    let flat = b.reshape(pooled, &[2, 4 * 3 * 3]).unwrap();
    let am = b.argmax_last(flat).unwrap();
    let bq = b.upload(&q, &[1, 2, 6, 8]).unwrap();
    let bk = b.upload(&k, &[1, 2, 10, 8]).unwrap();
    let bv = b.upload(&v, &[1, 2, 10, 8]).unwrap();
    let att = b.attention(bq, bk, bv, true, None, None).unwrap();
    let bt = b.upload(&table, &[11, 8]).unwrap();
    let emb = b.embedding(bt, &ids).unwrap();
    let (bc, bs) = (b.tensor(&cos).unwrap(), b.tensor(&sin).unwrap());
    let rot = b.rope(emb, bc, bs, RopeLayout::HalfSplit).unwrap();
    let perm = b.permute(att, &[0, 2, 1, 3]).unwrap();
    let sl = b.slice(perm, 1, 1..4).unwrap();
    let cat = b.concat(&[rot, rot], 0).unwrap();
    for out in [pooled, am, sl, cat] {
        b.output(out).unwrap();
    }
    // Mistakes are the ops' own errors, at the call.
    let e = b
        .conv2d(bx, bq, None, Conv2dOptions::default())
        .unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "conv2d", .. }),
        "{e}"
    );
    let e = b.embedding(bt, &[11]).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidArgument {
                op: "embedding",
                ..
            }
        ),
        "{e}"
    );
    let outside = dev.tensor(&[1.0], &[1]).unwrap();
    let e = b
        .apply("sneaky", &[bx], move |_| Ok(outside.clone()))
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { op: "sneaky", .. }),
        "{e}"
    );

    // The same on tensors.
    let tx = dev.tensor(&x, &[2, 3, 9, 9]).unwrap();
    let tw = dev.tensor(&w, &[4, 3, 3, 3]).unwrap();
    let tp = tx
        .conv2d(&tw, None, Conv2dOptions::default())
        .unwrap()
        .relu()
        .unwrap()
        .max_pool2d(pool)
        .unwrap();
    let tam = tp.reshape(&[2, 36]).unwrap().argmax_last().unwrap();
    let ta = dev
        .tensor(&q, &[1, 2, 6, 8])
        .unwrap()
        .attention(
            &dev.tensor(&k, &[1, 2, 10, 8]).unwrap(),
            &dev.tensor(&v, &[1, 2, 10, 8]).unwrap(),
            gpukit::AttentionOptions {
                causal: true,
                ..Default::default()
            },
        )
        .unwrap();
    let tsl = ta.permute(&[0, 2, 1, 3]).unwrap().slice(1, 1..4).unwrap();
    let tr = dev
        .tensor(&table, &[11, 8])
        .unwrap()
        .embedding(&ids)
        .unwrap()
        .rope(&cos, &sin, RopeLayout::HalfSplit)
        .unwrap();
    let tcat = gpukit::Tensor::concat(&[&tr, &tr], 0).unwrap();
    let wants = [
        tp.read().await.unwrap(),
        tam.read().await.unwrap(),
        tsl.read().await.unwrap(),
        tcat.read().await.unwrap(),
    ];
    let res = b.run().await.unwrap();
    for (i, (out, want)) in [pooled, am, sl, cat].iter().zip(&wants).enumerate() {
        assert_close(
            &format!("batch apply output {i}"),
            res.get(*out).unwrap(),
            want,
            1e-5,
        );
    }
    let mut g = b.compile().unwrap();
    let res = g.run(&[]).await.unwrap();
    for (i, (out, want)) in [pooled, am, sl, cat].iter().zip(&wants).enumerate() {
        assert_close(
            &format!("graph apply output {i}"),
            res.get(*out).unwrap(),
            want,
            1e-5,
        );
    }

    // A quantized weight, shape-checked at the call.
    let (n, kq) = (5, 64);
    let wq = std::rc::Rc::new(
        dev.quantized(
            &oracle::quantize(&rng.vec(n * kq, -1.0, 1.0), gpukit::QuantFormat::Q8_0),
            gpukit::QuantFormat::Q8_0,
            n,
            kq,
        )
        .unwrap(),
    );
    let xq = rng.vec(3 * kq, -1.0, 1.0);
    let mut b = dev.batch();
    let bxq = b.upload(&xq, &[3, kq]).unwrap();
    let yq = b.matmul_quant(bxq, wq.clone()).unwrap();
    assert_eq!(b.shape(yq).unwrap(), &[3, n]);
    let wrong = b.upload(&[1.0; 30], &[3, 10]).unwrap();
    assert!(matches!(
        b.matmul_quant(wrong, wq.clone()).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    b.output(yq).unwrap();
    let want = dev
        .tensor(&xq, &[3, kq])
        .unwrap()
        .matmul_quant(&wq)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert_close(
        "batch matmul_quant",
        b.run().await.unwrap().get(yq).unwrap(),
        &want,
        1e-6,
    );
}
