//! Fused attention.

use super::*;

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
            lengths: None,
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
        lengths: None,
        ..Default::default()
    };
    assert!(matches!(
        q2.attention(&kv, &kv, bad).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
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
            lengths: None,
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
            lengths: None,
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
            lengths: None,
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
            lengths: None,
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
        lengths: None,
        ..Default::default()
    };
    assert_eq!(
        k4.attention(&k4, &k4, opts).unwrap().shape(),
        &[1, 12, 12, 32]
    );
}
