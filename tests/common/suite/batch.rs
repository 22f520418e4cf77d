//! The batch API: recording, fusion, graphs and replays.

use super::*;

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
    // Views made by `apply` feed a fused kernel (copied out for it) and attention (read in
    // place).
    let rows = b.slice(bq, 2, 1..4).unwrap();
    let doubled = b.add(rows, rows).unwrap();
    let keys = b.slice(bk, 2, 2..9).unwrap();
    let att2 = b.attention(rows, keys, keys, false, None, None).unwrap();
    let outs = [pooled, am, sl, cat, doubled, att2];
    for out in outs {
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
                lengths: None,
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
    let trows = dev
        .tensor(&q, &[1, 2, 6, 8])
        .unwrap()
        .slice(2, 1..4)
        .unwrap();
    let tkeys = dev
        .tensor(&k, &[1, 2, 10, 8])
        .unwrap()
        .slice(2, 2..9)
        .unwrap();
    let tatt2 = trows.attention(&tkeys, &tkeys, Default::default()).unwrap();
    let wants = [
        tp.read().await.unwrap(),
        tam.read().await.unwrap(),
        tsl.read().await.unwrap(),
        tcat.read().await.unwrap(),
        trows.add(&trows).unwrap().read().await.unwrap(),
        tatt2.read().await.unwrap(),
    ];
    let res = b.run().await.unwrap();
    for (i, (out, want)) in outs.iter().zip(&wants).enumerate() {
        assert_close(
            &format!("batch apply output {i}"),
            res.get(*out).unwrap(),
            want,
            1e-5,
        );
    }
    let mut g = b.compile().unwrap();
    let res = g.run(&[]).await.unwrap();
    for (i, (out, want)) in outs.iter().zip(&wants).enumerate() {
        assert_close(
            &format!("graph apply output {i}"),
            res.get(*out).unwrap(),
            want,
            1e-5,
        );
    }
}

/// One random batch program: its ops recorded in a batch and, in the same order, run eagerly.
struct Program {
    batch: gpukit::Batch,
    outputs: Vec<(gpukit::Value, Tensor)>,
    /// The ops in order, for failure messages.
    text: String,
}

/// Builds a random program of `ops` ops over a few inputs of `[rows, cols]`, mixing every
/// kind the planner treats differently (fusable elementwise chains, values read twice, matmul
/// epilogues, reductions, softmax, norms, reshapes, attention with key lengths through
/// `apply`).
fn random_program(dev: &Device, rng: &mut Rng, ops: usize) -> Program {
    use gpukit::{BinaryOp, UnaryOp};
    let (rows, cols) = (
        1 + (rng.next_u64() % 6) as usize,
        1 + (rng.next_u64() % 9) as usize,
    );
    let mut b = dev.batch();
    // (value, eager tensor) pairs of shape [rows, cols].
    let mut pool: Vec<(gpukit::Value, Tensor)> = Vec::new();
    for _ in 0..1 + rng.next_u64() % 3 {
        let mut d = rng.vec(rows * cols, -2.0, 2.0);
        if rng.next_u64().is_multiple_of(4) {
            let i = (rng.next_u64() as usize) % d.len();
            d[i] = EDGES[(rng.next_u64() as usize) % EDGES.len()];
        }
        let v = b.upload(&d, &[rows, cols]).unwrap();
        pool.push((v, dev.tensor(&d, &[rows, cols]).unwrap()));
    }
    let mut outputs = Vec::new();
    let mut text = format!("inputs {} of [{rows}, {cols}];", pool.len());
    for _ in 0..ops {
        let pick = |rng: &mut Rng, pool: &Vec<(gpukit::Value, Tensor)>| {
            pool[(rng.next_u64() as usize) % pool.len()].clone()
        };
        let (xa, ta) = pick(rng, &pool);
        let (xb, tb) = pick(rng, &pool);
        let choice = rng.next_u64() % 10;
        let kind = [
            "bin", "bin", "bin", "un", "un", "linear", "softmax", "norm", "center", "attn",
        ][choice as usize];
        let (v, t) = match choice {
            0..=2 => {
                // x - x and x / x are fused_special_values' subject; here they would only
                // make rows that later ops amplify the last bit of.
                let ops = if xa == xb {
                    [BinaryOp::Add, BinaryOp::Mul, BinaryOp::Add, BinaryOp::Mul]
                } else {
                    [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div]
                };
                let op = ops[(rng.next_u64() % 4) as usize];
                (b.binary(op, xa, xb).unwrap(), ta.binary(op, &tb).unwrap())
            }
            3..=4 => {
                let op = [
                    UnaryOp::Relu,
                    UnaryOp::Sigmoid,
                    UnaryOp::Tanh,
                    UnaryOp::Scale(0.75),
                    UnaryOp::Exp,
                    UnaryOp::Neg,
                ][(rng.next_u64() % 6) as usize];
                (b.unary(op, xa).unwrap(), ta.unary(op).unwrap())
            }
            5 => {
                // Square product, then a bias row and an activation the planner may absorb.
                let w = rng.vec(cols * cols, -1.0, 1.0);
                let bias = rng.vec(cols, -1.0, 1.0);
                let wv = b.upload(&w, &[cols, cols]).unwrap();
                let bv = b.upload(&bias, &[cols]).unwrap();
                let wt = dev.tensor(&w, &[cols, cols]).unwrap();
                let bt = dev.tensor(&bias, &[cols]).unwrap();
                let m = b.matmul(xa, wv).unwrap();
                let m = b.add(m, bv).unwrap();
                let m = b.relu(m).unwrap();
                let e = ta.matmul(&wt).unwrap().add(&bt).unwrap().relu().unwrap();
                (m, e)
            }
            6 => (b.softmax(xa).unwrap(), ta.softmax().unwrap()),
            7 => {
                // A large eps: layer norm of a nearly constant row amplifies the last bits of
                // its input by 1 / sqrt(eps), and fused and eager arithmetic may differ there
                // (NVIDIA divides approximately, and x / x fused is folded to exactly 1).
                let y = b.layer_norm(xa, None, None, 0.1).unwrap();
                (y, ta.layer_norm(None, None, 0.1).unwrap())
            }
            8 => {
                // A reduction broadcast back as a column: [rows] -> [rows, 1] -> x - mean.
                let r = b.reduce_last(gpukit::ReduceOp::Mean, xa).unwrap();
                let r = b.reshape(r, &[rows, 1]).unwrap();
                let y = b
                    .apply("sub_col", &[xa, r], |t| {
                        let cols = t[0].shape()[1];
                        let ones = t[0].device().tensor(&vec![1.0; cols], &[1, cols])?;
                        t[0].sub(&t[1].matmul(&ones)?)
                    })
                    .unwrap();
                let er = ta.mean_last().unwrap().reshape(&[rows, 1]).unwrap();
                let ones = dev.tensor(&vec![1.0; cols], &[1, cols]).unwrap();
                (y, ta.sub(&er.matmul(&ones).unwrap()).unwrap())
            }
            _ => {
                // Attention over the rows as keys, with a length per batch entry that may
                // hide every key.
                let lens = [(rng.next_u64() % (rows as u64 + 1)) as u32];
                let shape = [1, 1, rows, cols];
                let y = b
                    .apply("attention", &[xa, xb], move |t| {
                        let q = t[0].reshape(&shape)?;
                        let k = t[1].reshape(&shape)?;
                        let o = AttentionOptions {
                            causal: false,
                            key_lengths: Some(&lens),
                            scale: None,
                            lengths: None,
                            layout: Default::default(),
                            ..Default::default()
                        };
                        q.attention(&k, &k, o)?.reshape(&shape[2..])
                    })
                    .unwrap();
                let (q, k) = (ta.reshape(&shape).unwrap(), tb.reshape(&shape).unwrap());
                let o = AttentionOptions {
                    causal: false,
                    key_lengths: Some(&lens),
                    scale: None,
                    lengths: None,
                    layout: Default::default(),
                    ..Default::default()
                };
                let e = q.attention(&k, &k, o).unwrap();
                (y, e.reshape(&shape[2..]).unwrap())
            }
        };
        text.push_str(&format!(" {v:?} = {kind}({xa:?}, {xb:?});"));
        pool.push((v, t.clone()));
        if rng.next_u64().is_multiple_of(3) {
            b.output(v).unwrap();
            outputs.push((v, t));
        }
    }
    let (v, t) = pool.last().unwrap().clone();
    b.output(v).unwrap();
    outputs.push((v, t));
    Program {
        batch: b,
        outputs,
        text,
    }
}

/// Seeded random batch programs, run back to back (so each meets the buffers the one before
/// left in the pool), each output against the same ops run eagerly on the same device; every
/// third one is compiled into a graph and replayed with its recorded inputs.
pub async fn random_batches_vs_eager(dev: &Device) {
    let programs = if dev.info().software && dev.info().backend != gpukit::Backend::Cpu {
        60
    } else {
        150
    };
    for seed in 0..programs as u64 {
        let mut rng = Rng::new(10_000 + seed);
        let ops = 1 + (rng.next_u64() % 12) as usize;
        let p = random_program(dev, &mut rng, ops);
        let res = p
            .batch
            .run()
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        for (v, t) in &p.outputs {
            let want = t.read().await.unwrap();
            same_bits_or_close(
                &format!("program seed {seed}, value {v:?}: {}", p.text),
                res.get(*v).unwrap(),
                &want,
                2e-4,
            );
        }
        if seed.is_multiple_of(3) {
            let text = p.text.clone();
            let mut graph = p
                .batch
                .compile()
                .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            let res = graph.run(&[]).await.unwrap();
            for (v, t) in &p.outputs {
                let want = t.read().await.unwrap();
                same_bits_or_close(
                    &format!("graph seed {seed}, value {v:?}: {text}"),
                    res.get(*v).unwrap(),
                    &want,
                    2e-4,
                );
            }
        }
    }
}
