//! Fused elementwise kernels: special values and the shapes fusion plans.

use super::*;

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
