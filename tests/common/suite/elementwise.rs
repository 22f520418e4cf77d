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
