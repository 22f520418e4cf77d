//! Unary and broadcasting binary ops, and chains of them.

use super::*;

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

/// The element of `x` (shape `from`) that NumPy broadcasting places at output index `i` of
/// `to`: output coordinates aligned at the last axis, size-1 axes read at 0.
fn broadcast_index(i: usize, to: &[usize], from: &[usize]) -> usize {
    let (mut rem, mut at, mut stride) = (i, 0, 1);
    for (k, &size) in to.iter().enumerate().rev() {
        let c = rem % size;
        rem /= size;
        if let Some(j) = (k + from.len()).checked_sub(to.len()) {
            if from[j] != 1 {
                at += c * stride;
            }
            stride *= from[j];
        }
    }
    at
}

/// A random pair of shapes that broadcast, of up to 6 axes: each side drops leading axes
/// and turns some sizes into 1.
fn broadcast_pair(rng: &mut Rng) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let rank = 1 + (rng.next_u64() % 6) as usize;
    let out: Vec<usize> = (0..rank)
        .map(|_| [1usize, 2, 3, 4, 5][(rng.next_u64() % 5) as usize])
        .collect();
    let mut side = || {
        let drop = (rng.next_u64() % (rank as u64 + 1)) as usize;
        out[drop..]
            .iter()
            .map(|&d| {
                if rng.next_u64().is_multiple_of(3) {
                    1
                } else {
                    d
                }
            })
            .collect::<Vec<usize>>()
    };
    let (a, b) = (side(), side());
    // The output is what the sides broadcast to (a size that both sides turned into 1 is 1).
    let rank = a.len().max(b.len());
    let size = |s: &[usize], i: usize| (i + s.len()).checked_sub(rank).map_or(1, |j| s[j]);
    let out = (0..rank).map(|i| size(&a, i).max(size(&b, i))).collect();
    (a, b, out)
}

/// NumPy broadcasting for every binary op, eagerly and in a batch (where operands that need
/// expanding are recorded as `broadcast_to`), on random shapes of up to 6 axes, with the
/// edge values among the inputs; `broadcast_to` itself; and the error for shapes that do not
/// broadcast.
pub async fn broadcasting(dev: &Device) {
    let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div];
    for seed in 0..40u64 {
        let mut rng = Rng::new(31_000 + seed);
        let (sa, sb, out) = broadcast_pair(&mut rng);
        let op = ops[(seed % 4) as usize];
        let (na, nb) = (sa.iter().product::<usize>(), sb.iter().product::<usize>());
        let mut a = rng.signed_vec(na, 0.1, 4.0);
        let b = rng.signed_vec(nb, 0.1, 4.0);
        if na > 0 {
            a[0] = EDGES[(seed as usize) % EDGES.len()];
        }
        let ctx = format!(
            "{} {sa:?} with {sb:?} -> {out:?}, seed {}",
            op.name(),
            31_000 + seed
        );
        let n: usize = out.iter().product();
        let want: Vec<(f64, Tol)> = (0..n)
            .map(|i| {
                let x = a[broadcast_index(i, &out, &sa)] as f64;
                let y = b[broadcast_index(i, &out, &sb)] as f64;
                oracle::binary(op, x, y)
            })
            .collect();
        let (ta, tb) = (dev.tensor(&a, &sa).unwrap(), dev.tensor(&b, &sb).unwrap());
        let y = ta.binary(op, &tb).unwrap();
        assert_eq!(y.shape(), &out[..], "{ctx}: output shape");
        check(
            &ctx,
            &|i| format!("flat {i}"),
            &y.read().await.unwrap(),
            &want,
        );

        let mut batch = dev.batch();
        let (va, vb) = (
            batch.upload(&a, &sa).unwrap(),
            batch.upload(&b, &sb).unwrap(),
        );
        let v = batch.binary(op, va, vb).unwrap();
        // A second op after it, so fusion sees the broadcast operands as leaves.
        let w = batch.scale(v, 2.0).unwrap();
        batch.output(w).unwrap();
        let got = batch.run().await.unwrap().get(w).unwrap().to_vec();
        let twice: Vec<(f64, Tol)> = want.iter().map(|&(v, t)| (2.0 * v, t)).collect();
        check(
            &format!("{ctx} (batch)"),
            &|i| format!("flat {i}"),
            &got,
            &twice,
        );

        let expanded = ta.broadcast_to(&out).unwrap();
        let want_a: Vec<(f64, Tol)> = (0..n)
            .map(|i| {
                (
                    a[broadcast_index(i, &out, &sa)] as f64,
                    Tol {
                        atol: 0.0,
                        rtol: 0.0,
                    },
                )
            })
            .collect();
        let got = expanded.read().await.unwrap();
        check(
            &format!("broadcast_to {sa:?} -> {out:?}"),
            &|i| format!("flat {i}"),
            &got,
            &want_a,
        );
    }
    // The classic cases, by name.
    let x = dev
        .tensor(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])
        .unwrap();
    let col = dev.tensor(&[10.0, 20.0, 30.0], &[3, 1]).unwrap();
    let got = x.div(&col).unwrap().read().await.unwrap();
    // GPUs may divide within 2.5 ulp (WGSL), so the oracle's tolerance, not equality.
    let want: Vec<(f64, Tol)> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .zip([10.0, 10.0, 20.0, 20.0, 30.0, 30.0])
        .map(|(&a, b)| oracle::binary(BinaryOp::Div, a, b))
        .collect();
    check("[3, 2] / [3, 1]", &|i| format!("{i}"), &got, &want);
    for (sa, sb) in [
        (vec![2, 3], vec![2]),
        (vec![4, 1, 3], vec![2, 2]),
        (vec![0], vec![2]),
    ] {
        let (ta, tb) = (
            dev.tensor(&vec![1.0; sa.iter().product()], &sa).unwrap(),
            dev.tensor(&vec![1.0; sb.iter().product()], &sb).unwrap(),
        );
        let e = ta.add(&tb).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { .. }) && e.to_string().contains("broadcast"),
            "{sa:?} + {sb:?}: {e}"
        );
        let e = ta.broadcast_to(&sb).unwrap_err();
        assert!(
            matches!(e, Error::ShapeMismatch { .. }),
            "broadcast_to: {e}"
        );
    }
}

/// where(cond, a, b) with NumPy broadcasting of all three, zeros of both signs and NaN in the
/// condition (NaN is true), NaN and ±Inf among the values, and its errors.
pub async fn where_cond(dev: &Device) {
    for seed in 0..24u64 {
        let mut rng = Rng::new(37_000 + seed);
        let (sa, sb, out) = broadcast_pair(&mut rng);
        // The condition broadcasts too: the output's shape with some sizes turned into 1.
        let sc: Vec<usize> = out
            .iter()
            .map(|&d| {
                if rng.next_u64().is_multiple_of(3) {
                    1
                } else {
                    d
                }
            })
            .collect();
        let count = |s: &[usize]| s.iter().product::<usize>();
        let c: Vec<f32> = (0..count(&sc))
            .map(|_| [0.0, -0.0, 1.0, -2.5, f32::NAN][(rng.next_u64() % 5) as usize])
            .collect();
        let a = rng.signed_vec(count(&sa), 0.1, 4.0);
        let mut b = rng.signed_vec(count(&sb), 0.1, 4.0);
        if !b.is_empty() {
            b[0] = EDGES[seed as usize % EDGES.len()];
        }
        let n = count(&out);
        let want: Vec<(f64, Tol)> = (0..n)
            .map(|i| {
                let cv = c[broadcast_index(i, &out, &sc)];
                let v = if cv != 0.0 || cv.is_nan() {
                    a[broadcast_index(i, &out, &sa)]
                } else {
                    b[broadcast_index(i, &out, &sb)]
                };
                (
                    v as f64,
                    Tol {
                        atol: 0.0,
                        rtol: 0.0,
                    },
                )
            })
            .collect();
        let (tc, ta, tb) = (
            dev.tensor(&c, &sc).unwrap(),
            dev.tensor(&a, &sa).unwrap(),
            dev.tensor(&b, &sb).unwrap(),
        );
        let y = tc.where_cond(&ta, &tb).unwrap();
        let ctx = format!(
            "where {sc:?} {sa:?} {sb:?} -> {out:?}, seed {}",
            37_000 + seed
        );
        assert_eq!(y.shape(), &out[..], "{ctx}");
        check(
            &ctx,
            &|i| format!("flat {i}"),
            &y.read().await.unwrap(),
            &want,
        );
    }
    let t = |s: &[usize]| dev.tensor(&vec![1.0; s.iter().product()], s).unwrap();
    let e = t(&[2, 3]).where_cond(&t(&[2]), &t(&[3])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(t(&[4]).where_cond(&t(&[3]), &t(&[3])).is_err());
}
