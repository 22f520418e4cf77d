//! Seeded random shapes and values through every op family, against the f64 oracle.

use super::*;

/// A random shape of up to 8 axes, with 0 and 1 among the sizes, at most 2,048 elements.
fn random_shape(rng: &mut Rng) -> Vec<usize> {
    let rank = (rng.next_u64() % 9) as usize;
    let sizes = [0usize, 1, 1, 2, 3, 5, 7, 13];
    let mut shape: Vec<usize> = (0..rank)
        .map(|_| sizes[(rng.next_u64() % sizes.len() as u64) as usize])
        .collect();
    // Zeros are rarer than the table says: one run in four keeps them.
    if !rng.next_u64().is_multiple_of(4) {
        shape.iter_mut().filter(|d| **d == 0).for_each(|d| *d = 2);
    }
    while shape.iter().product::<usize>() > 2048 {
        if let Some(d) = shape.iter_mut().find(|d| **d > 1) {
            *d = 1;
        }
    }
    shape
}

/// Random values with NaN, ±Inf, signed zeros and (when `subnormals`) subnormals sprinkled in.
fn random_values(rng: &mut Rng, n: usize, subnormals: bool) -> Vec<f32> {
    (0..n)
        .map(|_| match rng.next_u64() % 16 {
            0 => EDGES[(rng.next_u64() % EDGES.len() as u64) as usize],
            1 if subnormals => {
                [1e-40f32, -3e-39, f32::MIN_POSITIVE / 2.0][(rng.next_u64() % 3) as usize]
            }
            _ => rng.uniform(-3.0, 3.0),
        })
        .collect()
}

fn row_major(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// Property test: seeded random shapes (0 to 8 axes, sizes 0, 1 and odd) and values (NaN,
/// ±Inf, signed zeros, subnormals), every elementwise op, broadcasting, the reductions and
/// softmax along the last axis, permute, slice and reshape, against the f64 oracle (layout ops
/// must keep every bit).
pub async fn random_shapes_vs_oracle(dev: &Device) {
    use super::{check, oracle};
    use gpukit::{BinaryOp, ReduceOp, UnaryOp};
    let cases = if dev.info().software && dev.info().backend != gpukit::Backend::Cpu {
        40
    } else {
        120
    };
    for seed in 0..cases {
        let mut rng = Rng::new(20_000 + seed);
        let shape = random_shape(&mut rng);
        let n: usize = shape.iter().product();
        let ctx = |what: &str| format!("{what} of {shape:?}, seed {}", 20_000 + seed);
        let xs = random_values(&mut rng, n, true);
        let x = dev.tensor(&xs, &shape).unwrap();
        // Every unary op. Subnormal inputs only where the result is the input itself, scaled
        // or clipped: WGSL lets GPUs flush subnormals, and what log or exp then gives is
        // unspecified (lavapipe: log(1e-40) = -88.0, not -92.1).
        let op = UnaryOp::ALL[(rng.next_u64() % UnaryOp::ALL.len() as u64) as usize];
        let exact_op = matches!(
            op,
            UnaryOp::Relu
                | UnaryOp::LeakyRelu(_)
                | UnaryOp::Clip { .. }
                | UnaryOp::Scale(_)
                | UnaryOp::Neg
                | UnaryOp::Abs
        );
        let (xs, x) = if exact_op {
            (xs, x)
        } else {
            let plain = random_values(&mut rng, n, false);
            let t = dev.tensor(&plain, &shape).unwrap();
            (plain, t)
        };
        let got = x.unary(op).unwrap().read().await.unwrap();
        let want: Vec<_> = xs.iter().map(|&v| oracle::unary(op, v as f64)).collect();
        check(&ctx(op.name()), &|i| format!("{:e}", xs[i]), &got, &want);
        // A binary op against an equal shape, a scalar, or a row.
        let bop = BinaryOp::ALL[(rng.next_u64() % 4) as usize];
        let ys_plain = random_values(&mut rng, n, false);
        let xs_plain = random_values(&mut rng, n, false);
        let xp = dev.tensor(&xs_plain, &shape).unwrap();
        let (bshape, ys): (Vec<usize>, Vec<f32>) = match (rng.next_u64() % 3, shape.last()) {
            (1, _) => (vec![], random_values(&mut rng, 1, false)),
            (2, Some(&last)) => (vec![last], random_values(&mut rng, last, false)),
            _ => (shape.clone(), ys_plain.clone()),
        };
        let y = dev.tensor(&ys, &bshape).unwrap();
        let got = xp.binary(bop, &y).unwrap().read().await.unwrap();
        let want: Vec<_> = (0..n)
            .map(|i| oracle::binary(bop, xs_plain[i] as f64, ys[i % ys.len()] as f64))
            .collect();
        check(
            &ctx(&format!("{} with {bshape:?}", bop.name())),
            &|i| format!("{:e}, {:e}", xs_plain[i], ys[i % ys.len()]),
            &got,
            &want,
        );
        if let Some(&cols) = shape.last() {
            let rows: usize = shape[..shape.len() - 1].iter().product();
            // A reduction along the last axis (an empty row has a sum, not a max).
            let rop = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min]
                [(rng.next_u64() % 4) as usize];
            match xp.reduce_last(rop) {
                Ok(r) => {
                    let got = r.read().await.unwrap();
                    let want: Vec<_> = (0..rows)
                        .map(|row| {
                            let v: Vec<f64> = xs_plain[row * cols..][..cols]
                                .iter()
                                .map(|&v| v as f64)
                                .collect();
                            oracle::reduce(rop, &v)
                        })
                        .collect();
                    check(&ctx(rop.name()), &|i| format!("row {i}"), &got, &want);
                }
                Err(e) => assert!(
                    cols == 0 && rows > 0 && rop != ReduceOp::Sum && e.is_input(),
                    "{}: {e:?}",
                    ctx(rop.name())
                ),
            }
            // softmax along the last axis.
            if cols > 0 {
                let got = xp.softmax().unwrap().read().await.unwrap();
                let mut want = Vec::with_capacity(n);
                for row in 0..rows {
                    let v: Vec<f64> = xs_plain[row * cols..][..cols]
                        .iter()
                        .map(|&v| v as f64)
                        .collect();
                    let (out, tol) = oracle::softmax(&v, false);
                    want.extend(out.into_iter().map(|o| (o, tol)));
                }
                check(&ctx("softmax"), &|i| format!("flat {i}"), &got, &want);
            }
            // A random permutation, every bit kept.
            let rank = shape.len();
            let mut axes: Vec<usize> = (0..rank).collect();
            for i in (1..rank).rev() {
                axes.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
            }
            let got = x.permute(&axes).unwrap().read().await.unwrap();
            let out_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
            let (in_strides, out_strides) = (row_major(&shape), row_major(&out_shape));
            let want: Vec<f32> = (0..n)
                .map(|o| {
                    let src: usize = (0..rank)
                        .map(|d| (o / out_strides[d]) % out_shape[d] * in_strides[axes[d]])
                        .sum();
                    xs[src]
                })
                .collect();
            let same = got.len() == want.len()
                && got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "{}: permute {axes:?} changed bits", ctx("permute"));
            // A slice of the first axis, every bit kept; then the flat reshape.
            let len = shape[0];
            let (a, b) = (
                (rng.next_u64() % (len as u64 + 1)) as usize,
                (rng.next_u64() % (len as u64 + 1)) as usize,
            );
            let (start, end) = (a.min(b), a.max(b));
            let sliced = x.slice(0, start..end).unwrap();
            let got = sliced
                .reshape(&[sliced.len()])
                .unwrap()
                .read()
                .await
                .unwrap();
            let per = n.checked_div(len).unwrap_or(0);
            let want = &xs[start * per..end * per];
            let same = got.len() == want.len()
                && got
                    .iter()
                    .zip(want)
                    .all(|(g, w)| g.to_bits() == w.to_bits());
            assert!(same, "{}: slice {start}..{end} changed bits", ctx("slice"));
        }
    }
}
