//! Reliability, written once for every backend: hostile shapes and arguments get an `Error`
//! (never a panic, an abort or a wrong size), the edge cases that once gave wrong results give
//! the CPU's answers, and seeded random batch programs agree with the same ops run eagerly.

use super::{Rng, EDGES};
use gpukit::{AttentionOptions, Device, MatmulOptions, Precision, Tensor};

/// An axis that is valid beside a zero axis but whose tensor, without the zero, cannot exist:
/// its bytes exceed the address range on every target (2^62 natively, 2^30 on wasm32).
const HUGE: usize = usize::MAX / 4 + 1;
/// An axis whose square overflows `usize`.
const ROOT: usize = 1 << (usize::BITS / 2);

fn is_limit<T: std::fmt::Debug>(what: &str, r: gpukit::Result<T>) {
    match r {
        Err(e) if e.is_resource() || e.is_input() => {}
        other => panic!("{what}: expected a limit or input error, got {other:?}"),
    }
}

/// Shapes whose element counts or byte sizes overflow, and zero-element inputs with huge
/// outputs: each is an error before anything is allocated, on every backend.
pub async fn hostile_shapes(dev: &Device) {
    is_limit("[MAX, MAX]", dev.tensor(&[1.0], &[usize::MAX, usize::MAX]));
    is_limit("[ROOT, ROOT]", dev.tensor(&[1.0], &[ROOT, ROOT]));
    is_limit("[ROOT, ROOT, 0]", dev.tensor(&[], &[ROOT, ROOT, 0]));
    is_limit("[HUGE] of nothing", dev.tensor(&[], &[HUGE]));
    // Zero elements, but an output of HUGE elements.
    let empty = dev.tensor(&[], &[HUGE, 0]).expect("a valid empty tensor");
    assert_eq!(empty.len(), 0);
    is_limit("sum_last of [HUGE, 0]", empty.sum_last());
    is_limit("mean_last of [HUGE, 0]", empty.mean_last());
    is_limit("reshape to [HUGE, HUGE]", empty.reshape(&[HUGE, HUGE]));
    is_limit("reshape to [MAX, 2, 0]", empty.reshape(&[usize::MAX, 2, 0]));
    let a = dev.tensor(&[], &[ROOT, 0]).unwrap();
    let b = dev.tensor(&[], &[0, ROOT]).unwrap();
    is_limit("[ROOT, 0] x [0, ROOT]", a.matmul(&b));
    let bt = dev.tensor(&[], &[ROOT, 0]).unwrap();
    let nt = MatmulOptions {
        transpose_b: true,
        ..Default::default()
    };
    is_limit("[ROOT, 0] x [ROOT, 0]^T", a.matmul_with(&bt, nt));
    // Concatenating two axes of usize::MAX.
    let wide = dev.tensor(&[], &[usize::MAX, 0]).unwrap();
    is_limit("concat overflow", Tensor::concat(&[&wide, &wide], 0));
    // Pooling and convolution spans.
    let img = dev.tensor(&[1.0; 4], &[1, 1, 2, 2]).unwrap();
    let pool = gpukit::Pool2dOptions {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [usize::MAX, 0],
    };
    is_limit("max_pool2d padding MAX", img.max_pool2d(pool));
    let wt = dev.tensor(&[1.0], &[1, 1, 1, 1]).unwrap();
    for (padding, dilation) in [([usize::MAX, 0], [1, 1]), ([HUGE, 0], [1, 1])] {
        let opts = gpukit::Conv2dOptions {
            padding,
            dilation,
            ..Default::default()
        };
        is_limit("conv2d padding", img.conv2d(&wt, None, opts));
    }
    let w2 = dev.tensor(&[1.0; 4], &[1, 1, 2, 2]).unwrap();
    let dil = gpukit::Conv2dOptions {
        dilation: [usize::MAX, 1],
        ..Default::default()
    };
    is_limit("conv2d dilation MAX", img.conv2d(&w2, None, dil));
    let planes = dev.tensor(&[], &[HUGE, 1, 0, 0]).unwrap();
    let p1 = gpukit::Pool2dOptions {
        kernel: [1, 1],
        stride: [1, 1],
        padding: [0, 0],
    };
    // No window fits a 0 x 0 plane: an input error, not an allocation of HUGE planes.
    match planes.max_pool2d(p1) {
        Err(e) => assert!(e.is_input(), "{e:?}"),
        Ok(t) => panic!("pooled {:?}", t.shape()),
    }
    let empty_planes = dev.tensor(&[], &[HUGE, 0, 1, 1]).unwrap();
    let pooled = empty_planes.max_pool2d(p1).expect("an empty pool is empty");
    assert_eq!(pooled.shape(), &[HUGE, 0, 1, 1]);
    // RoPE tables.
    is_limit("rope_tables(HUGE, 2)", dev.rope_tables(HUGE, 2, 1e4, 0));
    is_limit(
        "rope_tables(MAX, 2)",
        dev.rope_tables(usize::MAX, 2, 1e4, 0),
    );
    is_limit("rope_tables offset", dev.rope_tables(2, 2, 1e4, usize::MAX));
    // Quantized sizes.
    is_limit(
        "quantized [MAX, 32]",
        dev.quantized(&[0; 18], gpukit::QuantFormat::Q4_0, usize::MAX, 32),
    );
    is_limit(
        "quantized [ROOT, ROOT]",
        dev.quantized(&[0; 18], gpukit::QuantFormat::Q8_0, ROOT, ROOT),
    );
    // Batches check what they record.
    let mut batch = dev.batch();
    let x = batch.upload(&[], &[HUGE, 0]).unwrap();
    is_limit(
        "batch sum_last",
        batch.reduce_last(gpukit::ReduceOp::Sum, x),
    );
    is_limit("batch reshape", batch.reshape(x, &[ROOT, ROOT, 0]));
    let ok = batch.reshape(x, &[0, HUGE]).expect("an empty reshape");
    is_limit(
        "batch apply",
        batch.apply("sum", &[ok], |t| t[0].transpose(0, 1)?.sum_last()),
    );
    // The device is unharmed: an ordinary op still works.
    let t = dev.tensor(&[1.0, 2.0, 3.0], &[3]).unwrap();
    assert_eq!(t.sum().unwrap().read().await.unwrap(), vec![6.0]);
}

/// A product longer than one wgpu dispatch sums (lavapipe stops a shader's loops after 65,535
/// iterations): [1, k] ones times [k, 1] halves is k / 2 exactly, with every option.
pub async fn matmul_long_k(dev: &Device) {
    let k = (1usize << 21) + 5;
    let ones = vec![1.0f32; k];
    let halves = vec![0.5f32; k];
    let want = (k / 2) as f32 + 0.5;
    let a = dev.tensor(&ones, &[1, k]).unwrap();
    let b = dev.tensor(&halves, &[k, 1]).unwrap();
    let got = a.matmul(&b).unwrap().read().await.unwrap();
    assert_eq!(got, vec![want], "[1, k] x [k, 1], k = {k}");
    // Transposed operands, two rows and three columns, a bias and an activation.
    let a2 = dev
        .tensor(&[&ones[..], &halves[..]].concat(), &[2, k])
        .unwrap();
    let b3 = dev
        .tensor(&[&halves[..], &ones[..], &halves[..]].concat(), &[3, k])
        .unwrap();
    let bias = dev.tensor(&[-want, 1.0, 2.0], &[3]).unwrap();
    let opts = MatmulOptions {
        transpose_b: true,
        bias: Some(&bias),
        activation: Some(gpukit::Activation::Relu),
        ..Default::default()
    };
    let got = a2.matmul_with(&b3, opts).unwrap().read().await.unwrap();
    let quarter = (k as f64 * 0.25) as f32;
    let want2 = [
        0.0,
        k as f32 + 1.0,
        want + 2.0,
        0.0,
        want + 1.0,
        quarter + 2.0,
    ];
    assert_eq!(got, want2, "[2, k] x [3, k]^T + bias, relu");
    let at = dev.tensor(&ones, &[k, 1]).unwrap();
    let ta = MatmulOptions {
        transpose_a: true,
        ..Default::default()
    };
    let got = at.matmul_with(&b, ta).unwrap().read().await.unwrap();
    assert_eq!(got, vec![want], "[k, 1]^T x [k, 1]");
}

/// Attention gives the CPU's NaN for a NaN in q or k, a +inf score, and a row whose visible
/// scores are all -inf; a row with no visible key stays zero; other rows are unaffected. Head
/// widths cover wgpu's three kernels (16-row blocks, 8-row blocks, a row at a time).
pub async fn attention_special_values(dev: &Device) {
    for d in [8usize, 96, 160] {
        let (sq, sk) = (5, 3);
        let mut rng = Rng::new(9700 + d as u64);
        let mut q = rng.vec(sq * d, 0.1, 1.0);
        let mut k = rng.vec(sk * d, 0.1, 1.0);
        let v = rng.vec(sk * d, -1.0, 1.0);
        q[d] = f32::NAN; // row 1: NaN in q
        q[2 * d] = f32::INFINITY; // row 2: +inf scores (q and k positive)
        k[2 * d + 1] = f32::NEG_INFINITY; // key 2: -inf scores for rows without +inf or NaN
        let lens = [sk as u32];
        let tq = dev.tensor(&q, &[1, 1, sq, d]).unwrap();
        let tk = dev.tensor(&k, &[1, 1, sk, d]).unwrap();
        let tv = dev.tensor(&v, &[1, 1, sk, d]).unwrap();
        let opts = AttentionOptions {
            causal: false,
            key_lengths: Some(&lens),
            scale: None,
        };
        let got = tq.attention(&tk, &tv, opts).unwrap().read().await.unwrap();
        let row = |i: usize| &got[i * d..(i + 1) * d];
        assert!(
            row(0).iter().all(|x| x.is_finite()),
            "d={d} row 0: {:?}",
            row(0)
        );
        assert!(
            row(1).iter().all(|x| x.is_nan()),
            "d={d} NaN in q: {:?}",
            row(1)
        );
        assert!(
            row(2).iter().all(|x| x.is_nan()),
            "d={d} +inf score: {:?}",
            row(2)
        );
        // Key 2 scores -inf for the finite rows: it gets no weight, the row stays finite.
        assert!(
            row(3).iter().all(|x| x.is_finite()),
            "d={d} row 3: {:?}",
            row(3)
        );
        // Causal over one key that scores -inf: every visible score is -inf, so NaN; a row
        // with no visible key (length 0) is zero.
        let lens2 = [1u32, 0];
        let k1 = dev
            .tensor(
                &[&k[2 * d..3 * d], &k[2 * d..3 * d]].concat(),
                &[2, 1, 1, d],
            )
            .unwrap();
        let v1 = dev
            .tensor(&[&v[..d], &v[..d]].concat(), &[2, 1, 1, d])
            .unwrap();
        let q1 = dev
            .tensor(&[&q[..d], &q[..d]].concat(), &[2, 1, 1, d])
            .unwrap();
        let opts = AttentionOptions {
            causal: false,
            key_lengths: Some(&lens2),
            scale: None,
        };
        let got = q1.attention(&k1, &v1, opts).unwrap().read().await.unwrap();
        assert!(
            got[..d].iter().all(|x| x.is_nan()),
            "d={d} all -inf: {:?}",
            &got[..d]
        );
        assert!(
            got[d..].iter().all(|&x| x == 0.0),
            "d={d} no key: {:?}",
            &got[d..]
        );
        // NaN in one key makes every row that sees it NaN.
        let mut kn = rng.vec(sk * d, 0.1, 1.0);
        kn[d + 3] = f32::NAN;
        let tkn = dev.tensor(&kn, &[1, 1, sk, d]).unwrap();
        let qn = dev
            .tensor(&rng.vec(sq * d, 0.1, 1.0), &[1, 1, sq, d])
            .unwrap();
        let causal = AttentionOptions {
            causal: true,
            key_lengths: None,
            scale: None,
        };
        let got = qn
            .attention(&tkn, &tv, causal)
            .unwrap()
            .read()
            .await
            .unwrap();
        // Causal with sq = 5 > sk = 3: row i sees keys 0 ..= i; key 1 holds the NaN.
        for i in 0..sq {
            let r = &got[i * d..(i + 1) * d];
            match i {
                0 => assert!(r.iter().all(|x| x.is_finite()), "d={d} row {i}: {r:?}"),
                _ => assert!(r.iter().all(|x| x.is_nan()), "d={d} row {i}: {r:?}"),
            }
        }
    }
}

fn same_bits_or_close(ctx: &str, got: &[f32], want: &[f32], rtol: f32) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let ok = (g.is_nan() && w.is_nan())
            || g == w
            || (g.is_finite() && w.is_finite() && (g - w).abs() <= rtol * (1.0 + w.abs()));
        assert!(ok, "{ctx}: [{i}] got {g:e}, eager gives {w:e}");
    }
}

/// Fused kernels keep IEEE results where a compiler could fold `x - x` to 0 and `x / x` to 1.
pub async fn fused_special_values(dev: &Device) {
    let xs: Vec<f32> = EDGES.to_vec();
    let n = xs.len();
    let mut b = dev.batch();
    let x = b.upload(&xs, &[n]).unwrap();
    let sub = b.sub(x, x).unwrap();
    let div = b.div(x, x).unwrap();
    let sum = b.add(sub, div).unwrap();
    let s2 = b.scale(x, 2.0).unwrap();
    let sub2 = b.sub(s2, s2).unwrap();
    for v in [sub, div, sum, sub2] {
        b.output(v).unwrap();
    }
    let res = b.run().await.unwrap();
    let t = dev.tensor(&xs, &[n]).unwrap();
    let e_sub = t.sub(&t).unwrap();
    let e_div = t.div(&t).unwrap();
    let e_sum = e_sub.add(&e_div).unwrap();
    let t2 = t.scale(2.0).unwrap();
    let e_sub2 = t2.sub(&t2).unwrap();
    for (name, v, e) in [
        ("x - x", sub, e_sub),
        ("x / x", div, e_div),
        ("(x - x) + (x / x)", sum, e_sum),
        ("2x - 2x", sub2, e_sub2),
    ] {
        let want = e.read().await.unwrap();
        same_bits_or_close(name, res.get(v).unwrap(), &want, 0.0);
    }
    // The f64 view: inf - inf, NaN - NaN are NaN; 0 / 0, inf / inf are NaN.
    let got = res.get(sub).unwrap();
    for (i, &x) in xs.iter().enumerate() {
        assert_eq!(got[i].is_nan(), !x.is_finite(), "x - x for {x}: {}", got[i]);
    }
    let got = res.get(div).unwrap();
    for (i, &x) in xs.iter().enumerate() {
        let nan = !x.is_finite() || x == 0.0;
        assert_eq!(got[i].is_nan(), nan, "x / x for {x}: {}", got[i]);
    }
}

/// Values read twice, more leaves than one kernel binds, and chains far longer than one
/// kernel: batches that were rejected or overflowed the stack, against eager ops.
pub async fn batch_fusion_shapes(dev: &Device) {
    let n = 37;
    let mut rng = Rng::new(9800);
    let data: Vec<Vec<f32>> = (0..6).map(|_| rng.vec(n, -2.0, 2.0)).collect();
    let eager: Vec<Tensor> = data.iter().map(|d| dev.tensor(d, &[n]).unwrap()).collect();
    // y = s * s with s = ((a - b) - c) - d, not an output itself.
    let mut b = dev.batch();
    let v: Vec<_> = data.iter().map(|d| b.upload(d, &[n]).unwrap()).collect();
    let s = b.sub(v[0], v[1]).unwrap();
    let s = b.sub(s, v[2]).unwrap();
    let s = b.sub(s, v[3]).unwrap();
    let y = b.mul(s, s).unwrap();
    // Five and six uploads added in one chain.
    let mut z = v[0];
    for &u in &v[1..5] {
        z = b.add(z, u).unwrap();
    }
    let mut z6 = z;
    z6 = b.mul(z6, v[5]).unwrap();
    b.output(y).unwrap();
    b.output(z6).unwrap();
    let res = b.run().await.unwrap();
    let es = eager[0].sub(&eager[1]).unwrap().sub(&eager[2]).unwrap();
    let es = es.sub(&eager[3]).unwrap();
    let ey = es.mul(&es).unwrap().read().await.unwrap();
    same_bits_or_close("s * s", res.get(y).unwrap(), &ey, 1e-6);
    let mut ez = eager[0].clone();
    for t in &eager[1..5] {
        ez = ez.add(t).unwrap();
    }
    let ez = ez.mul(&eager[5]).unwrap().read().await.unwrap();
    same_bits_or_close("six-leaf chain", res.get(z6).unwrap(), &ez, 1e-6);

    // A value read twice at every level: expanded naively it would double each time.
    let mut b = dev.batch();
    let x = b.upload(&data[0], &[n]).unwrap();
    let mut s = x;
    let mut e = eager[0].clone();
    for _ in 0..40 {
        let h = b.scale(s, 0.5).unwrap();
        s = b.mul(h, h).unwrap();
        let eh = e.scale(0.5).unwrap();
        e = eh.mul(&eh).unwrap();
    }
    b.output(s).unwrap();
    let res = b.run().await.unwrap();
    same_bits_or_close(
        "doubling",
        res.get(s).unwrap(),
        &e.read().await.unwrap(),
        1e-5,
    );

    // A chain of 20,000 elementwise ops: planned without recursion, split into kernels.
    let len = 20_000;
    let mut b = dev.batch();
    let x = b.upload(&data[1], &[n]).unwrap();
    let mut c = x;
    for i in 0..len {
        c = if i % 2 == 0 {
            b.add(c, x).unwrap()
        } else {
            b.scale(c, 0.5).unwrap()
        };
    }
    b.output(c).unwrap();
    let res = b.run().await.unwrap();
    // c converges to 2x (c' = (c + x) / 2 + ... ): compute the same recurrence on the host.
    let want: Vec<f32> = data[1]
        .iter()
        .map(|&xv| {
            let mut cv = xv;
            for i in 0..len {
                cv = if i % 2 == 0 { cv + xv } else { cv * 0.5 };
            }
            cv
        })
        .collect();
    same_bits_or_close("20,000-op chain", res.get(c).unwrap(), &want, 1e-5);
    assert!(
        res.kernels >= len / 64,
        "{} kernels for {len} ops",
        res.kernels
    );
}

/// An f16 product rounds its inputs on every path, the few-row GEMV included: 70000 is past
/// f16's largest value and becomes infinity.
pub async fn matmul_f16_small_rows(dev: &Device) {
    let x = dev.tensor(&[70000.0, 1.0, 1.0, 1.0], &[1, 4]).unwrap();
    let w = dev.tensor(&[1.0; 12], &[3, 4]).unwrap();
    let opts = MatmulOptions {
        transpose_b: true,
        precision: Precision::F16,
        ..Default::default()
    };
    let got = x.matmul_with(&w, opts).unwrap().read().await.unwrap();
    assert!(got.iter().all(|&v| v == f32::INFINITY), "{got:?}");
    let exact = MatmulOptions {
        transpose_b: true,
        ..Default::default()
    };
    let got = x.matmul_with(&w, exact).unwrap().read().await.unwrap();
    assert_eq!(got, vec![70003.0; 3]);
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
                        };
                        q.attention(&k, &k, o)?.reshape(&shape[2..])
                    })
                    .unwrap();
                let (q, k) = (ta.reshape(&shape).unwrap(), tb.reshape(&shape).unwrap());
                let o = AttentionOptions {
                    causal: false,
                    key_lengths: Some(&lens),
                    scale: None,
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

/// Verification mode on a fresh device of the same backend: every op family checked against
/// the CPU backend at the next wait, a batch and a compiled graph included, and the report
/// lists them.
pub async fn verification_mode(dev: &Device) {
    let fresh = match dev.info().backend {
        gpukit::Backend::Cpu => Device::cpu(),
        backend => Device::with_backend(backend).await.unwrap(),
    }
    .with_verification();
    let mut rng = Rng::new(9900);
    let x = fresh.tensor(&rng.vec(6 * 37, -2.0, 2.0), &[6, 37]).unwrap();
    let w = fresh.tensor(&rng.vec(5 * 37, -1.0, 1.0), &[5, 37]).unwrap();
    let y = x
        .linear(&w, None, Some(gpukit::Activation::Relu))
        .unwrap()
        .softmax()
        .unwrap()
        .layer_norm(None, None, 1e-5)
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .sum_last()
        .unwrap();
    y.read().await.unwrap();
    let q = fresh
        .tensor(&rng.vec(2 * 9 * 16, -1.0, 1.0), &[1, 2, 9, 16])
        .unwrap();
    let lens = [7u32];
    let opts = AttentionOptions {
        causal: true,
        key_lengths: Some(&lens),
        scale: None,
    };
    q.attention(&q, &q, opts).unwrap().read().await.unwrap();
    let mut b = fresh.batch();
    let v = b.upload(&rng.vec(100, -1.0, 1.0), &[100]).unwrap();
    let r = b.relu(v).unwrap();
    let s = b.sub(r, v).unwrap();
    b.output(s).unwrap();
    b.run().await.unwrap();
    let mut graph = b.compile().unwrap();
    graph.run(&[(v, &rng.vec(100, -1.0, 1.0))]).await.unwrap();
    let report = fresh.verification_report().expect("verification is on");
    let names: Vec<&str> = report.ops.iter().map(|o| o.op).collect();
    for op in [
        "matmul",
        "softmax",
        "layer_norm",
        "copy",
        "sum",
        "attention",
        "fused",
    ] {
        assert!(names.contains(&op), "{op} not checked: {names:?}");
    }
    assert!(report.ops.iter().all(|o| o.max_error <= 1.0), "{report:?}");
    assert!(
        dev.verification_report().is_none(),
        "the suite's own device is unaffected"
    );
}

/// A lost device: after `destroy`, every call on it and on its tensors is `DeviceLost` (ops,
/// uploads, reads, batches, synchronize), and a new device of the same backend opened in the
/// same process works.
pub async fn device_loss(dev: &Device) {
    let open = || async {
        match dev.info().backend {
            gpukit::Backend::Cpu => Device::cpu(),
            backend => Device::with_backend(backend).await.unwrap(),
        }
    };
    let doomed = open().await;
    let x = doomed.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    let y = x.relu().unwrap();
    let mut b = doomed.batch();
    let v = b.upload(&[1.0, 2.0], &[2]).unwrap();
    let r = b.relu(v).unwrap();
    b.output(r).unwrap();
    doomed.destroy();
    let lost = |what: &str, e: gpukit::Error| {
        assert!(e.is_device_lost(), "{what}: expected DeviceLost, got {e:?}");
    };
    lost("op", x.relu().unwrap_err());
    lost("binary op", x.add(&y).unwrap_err());
    lost("upload", doomed.tensor(&[1.0], &[1]).unwrap_err());
    lost("read", y.read().await.unwrap_err());
    lost("synchronize", doomed.synchronize().await.unwrap_err());
    lost("batch", b.run().await.unwrap_err());
    // Destroying twice is harmless.
    doomed.destroy();
    lost("read again", x.read().await.unwrap_err());
    drop((x, y, b));
    // A new device works.
    let fresh = open().await;
    let t = fresh.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    assert_eq!(t.relu().unwrap().read().await.unwrap(), vec![1.0, 0.0, 3.0]);
}

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

/// Attention's input errors say what is wrong: a wrong rank names the operand and its axes,
/// and a key length beyond the keys is refused instead of clamped.
pub async fn attention_input_errors(dev: &Device) {
    let q3 = dev.tensor(&[0.5; 12 * 12 * 32], &[12, 12, 32]).unwrap();
    let k4 = dev.tensor(&[0.5; 12 * 12 * 32], &[1, 12, 12, 32]).unwrap();
    match q3.attention(&k4, &k4, AttentionOptions::default()) {
        Err(gpukit::Error::InvalidArgument { reason, .. }) => {
            assert!(reason.contains("q must have 4 axes"), "{reason}")
        }
        other => panic!("3-D q: {other:?}"),
    }
    match k4.attention(&q3, &k4, AttentionOptions::default()) {
        Err(gpukit::Error::InvalidArgument { reason, .. }) => {
            assert!(reason.contains("k must have 4 axes"), "{reason}")
        }
        other => panic!("3-D k: {other:?}"),
    }
    for len in [13u32, 4_000_000_000] {
        let lens = [len];
        let opts = AttentionOptions {
            key_lengths: Some(&lens),
            ..Default::default()
        };
        match k4.attention(&k4, &k4, opts) {
            Err(e) => assert!(
                e.is_input() && e.to_string().contains("more than the 12 keys"),
                "{e}"
            ),
            Ok(_) => panic!("key length {len} of 12 keys was accepted"),
        }
    }
    // The largest valid length works.
    let lens = [12u32];
    let opts = AttentionOptions {
        key_lengths: Some(&lens),
        ..Default::default()
    };
    assert_eq!(
        k4.attention(&k4, &k4, opts).unwrap().shape(),
        &[1, 12, 12, 32]
    );
}
