//! Fused attention.

use super::*;

/// A random attention case: (batch, hq, hkv, sq, sk, d, dv, causal, key lengths).
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

/// Each case on random q, k and v (seeds from `seed`) against the f64 oracle.
async fn random_cases(dev: &Device, what: &str, seed: u64, cases: Vec<Case>) {
    use gpukit::AttentionOptions;
    for (ci, (b, hq, hkv, sq, sk, d, dv, causal, lens)) in cases.into_iter().enumerate() {
        let seed = seed + ci as u64;
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
            ..Default::default()
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
            &format!("{what} case {ci} seed {seed}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }
}

/// Fused attention against f64: multi-head and grouped-query, causal (also with fewer queries
/// than keys, as with a KV cache), padding lengths (one of them 0), rows longer than a tile.
pub async fn attention(dev: &Device) {
    use gpukit::AttentionOptions;
    // On wgpu, heads up to 64 wide run on blocks of 64 query rows from 32 rows on (16 below),
    // up to 128 on blocks of 8, wider ones a row at a time: the cases cover all four, partial blocks and key tiles, d not
    // a multiple of the dot product's parts, and rows without a visible key. CUDA's flash kernel
    // takes 64 query rows and 64 keys at a time: several of each, partial, causal and not.
    let cases: [Case; 27] = [
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
        (1, 2, 1, 130, 150, 64, 64, true, None),
        (2, 3, 3, 70, 70, 32, 32, false, Some(vec![65, 3])),
        (1, 3, 1, 67, 90, 33, 57, true, Some(vec![80])),
        // Decoding over 512 keys or more splits the keys into chunks on wgpu: GQA groups
        // times rows up to 8, odd widths, lengths inside the last chunk, the widest heads.
        (2, 6, 2, 2, 777, 40, 24, true, Some(vec![700, 777])),
        (1, 2, 2, 3, 1030, 256, 200, false, None),
        // Many KV heads and a batch of 4 (chunks of 256 keys, a key an invocation): odd
        // widths, a length of 1 and of 513.
        (4, 8, 8, 1, 4100, 9, 7, true, Some(vec![4100, 3000, 513, 1])),
        (4, 16, 8, 1, 2100, 16, 16, false, None),
        // Key rows at 16-byte multiples load 4 words at a time (here 16 of 20, then 4 a word
        // at a time); the 9-wide rows above a word at a time throughout.
        (1, 4, 2, 1, 600, 20, 12, true, None),
        // Decoding (CUDA splits the keys of up to 4 query rows across blocks): grouped heads
        // with a length, a long causal row in many splits, wide heads, two rows and a batch.
        (1, 9, 3, 1, 257, 64, 64, false, Some(vec![200])),
        (1, 4, 1, 1, 5000, 128, 128, true, None),
        (1, 2, 1, 2, 70, 256, 200, true, Some(vec![3])),
        (3, 2, 2, 1, 65, 33, 17, false, Some(vec![0, 64, 65])),
        // CUDA reads up to 4 rows' keys straight into registers (here 8 lanes a key, several
        // splits, a partial round); more rows take the shared-memory kernel.
        (2, 4, 2, 2, 333, 32, 32, true, Some(vec![333, 100])),
        (1, 8, 1, 1, 200, 64, 64, false, None),
    ];
    random_cases(dev, "attention", 9400, cases.into()).await;
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

/// Prompts whose grid of 64-row blocks is too small to fill a GPU (few heads, few rows) split
/// each block's keys into chunks on wgpu (`main_flash` with SPLIT_KEYS, then `main_merge`),
/// at chunks of 64, 128 and 256 keys; causal, key lengths inside a chunk, GQA, narrow heads.
/// Then special values across chunks: a NaN in q and a +inf score give NaN rows, keys scoring
/// -inf fill one whole chunk (it adds nothing, the row stays finite), a batch entry of length
/// 0 gives zeros, and the other rows match the oracle.
pub async fn attention_split_prompt(dev: &Device) {
    use gpukit::AttentionOptions;
    // (batch, hq, hkv, sq, sk, d, dv, causal, lengths): on wgpu these grids of 64-row blocks
    // x heads split their keys into chunks of 64 (the first two and the last), 128 and 256.
    let cases: [Case; 5] = [
        (1, 2, 1, 96, 400, 64, 64, true, None),
        (2, 1, 1, 33, 333, 40, 24, false, Some(vec![333, 129])),
        (1, 64, 16, 100, 500, 32, 32, true, None),
        (1, 64, 16, 130, 700, 16, 16, false, Some(vec![513])),
        (1, 3, 3, 200, 190, 64, 48, true, None),
    ];
    random_cases(dev, "split attention", 9600, cases.into()).await;

    // Special values: one head, 40 rows, 200 keys (chunks of 64 on wgpu), two batch entries.
    let (sq, sk, d) = (40usize, 200usize, 64usize);
    let mut rng = Rng::new(9650);
    let mut q = rng.vec(2 * sq * d, 0.1, 1.0);
    let mut k = rng.vec(2 * sk * d, 0.1, 1.0);
    let v = rng.vec(2 * sk * d, -1.0, 1.0);
    q[d + 7] = f32::NAN; // row 1: NaN
    q[2 * d] = f32::INFINITY; // row 2: +inf scores (q and k positive)
    for j in 64..128 {
        k[j * d + 5] = f32::NEG_INFINITY; // keys 64..127, one whole chunk: -inf scores
    }
    let lens = [190u32, 0];
    let tq = dev.tensor(&q, &[2, 1, sq, d]).unwrap();
    let tk = dev.tensor(&k, &[2, 1, sk, d]).unwrap();
    let tv = dev.tensor(&v, &[2, 1, sk, d]).unwrap();
    let options = AttentionOptions {
        key_lengths: Some(&lens),
        ..Default::default()
    };
    let got = tq
        .attention(&tk, &tv, options)
        .unwrap()
        .read()
        .await
        .unwrap();
    let scale = 1.0 / (d as f64).sqrt();
    let want = oracle::attention(&q, &k, &v, (1, 1, sq, sk, d, d), false, 190, scale);
    for i in 0..sq {
        let row = &got[i * d..(i + 1) * d];
        if i == 1 || i == 2 {
            assert!(row.iter().all(|x| x.is_nan()), "row {i}: {row:?}");
        } else {
            check(
                &format!("split attention special row {i}"),
                &|e| format!("column {e}"),
                row,
                &want[i * d..(i + 1) * d],
            );
        }
    }
    assert!(
        got[sq * d..].iter().all(|&x| x == 0.0),
        "length 0: {:?}",
        &got[sq * d..sq * d + 8]
    );
}

/// Attention gives the CPU's NaN for a NaN in q or k, a +inf score, and a row whose visible
/// scores are all -inf; a row with no visible key stays zero; other rows are unaffected. Head
/// widths and row counts cover wgpu's four kernels (64-row flash blocks, 16-row blocks, 8-row
/// blocks, a row at a time).
pub async fn attention_special_values(dev: &Device) {
    for (d, sq) in [(8usize, 5usize), (96, 5), (160, 5), (8, 40), (64, 37)] {
        let sk = 3;
        let mut rng = Rng::new(9700 + (d * sq) as u64);
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
            layout: Default::default(),
            ..Default::default()
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
        // Each row alone (one query row, as when decoding) gives the same.
        for i in 0..4 {
            let qi = dev.tensor(&q[i * d..(i + 1) * d], &[1, 1, 1, d]).unwrap();
            let one = qi.attention(&tk, &tv, opts).unwrap().read().await.unwrap();
            for (a, b) in one.iter().zip(row(i)) {
                assert!(
                    a.is_nan() == b.is_nan() && (a.is_nan() || (a - b).abs() <= 1e-5),
                    "d={d} row {i} alone: {one:?} vs {:?}",
                    row(i)
                );
            }
        }
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
            layout: Default::default(),
            ..Default::default()
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
            layout: Default::default(),
            ..Default::default()
        };
        let got = qn
            .attention(&tkn, &tv, causal)
            .unwrap()
            .read()
            .await
            .unwrap();
        // Causal with sq > sk = 3: row i sees keys 0 ..= i; key 1 holds the NaN.
        for i in 0..sq {
            let r = &got[i * d..(i + 1) * d];
            match i {
                0 => assert!(r.iter().all(|x| x.is_finite()), "d={d} row {i}: {r:?}"),
                _ => assert!(r.iter().all(|x| x.is_nan()), "d={d} row {i}: {r:?}"),
            }
        }
    }
    // Decoding over many keys (wgpu and CUDA split them into blocks and merge): a NaN key
    // in a later block makes the row NaN, unless a length hides it; keys scoring -inf in the
    // first block get no weight; the rest matches f64.
    let (d, sk) = (64usize, 600usize);
    let mut rng = Rng::new(9750);
    let q = rng.vec(d, 0.1, 1.0);
    let mut k = rng.vec(sk * d, 0.1, 1.0);
    let v = rng.vec(sk * d, -1.0, 1.0);
    k[450 * d + 7] = f32::NAN;
    let two = |x: &[f32], s: usize| dev.tensor(&[x, x].concat(), &[2, 1, s, d]).unwrap();
    let lens = [600u32, 300];
    let opts = AttentionOptions {
        key_lengths: Some(&lens),
        ..Default::default()
    };
    let got = two(&q, 1)
        .attention(&two(&k, sk), &two(&v, sk), opts)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert!(
        got[..d].iter().all(|x| x.is_nan()),
        "NaN key 450: {:?}",
        &got[..d]
    );
    let scale = 1.0 / (d as f64).sqrt();
    let want = oracle::attention(&q, &k, &v, (1, 1, 1, sk, d, d), false, 300, scale);
    check(
        "decode, NaN hidden by a length",
        &|i| format!("{i}"),
        &got[d..],
        &want,
    );
    let mut k2 = rng.vec(sk * d, 0.1, 1.0);
    for j in 0..256 {
        k2[j * d + 1] = f32::NEG_INFINITY;
    }
    let got = dev
        .tensor(&q, &[1, 1, 1, d])
        .unwrap()
        .attention(
            &dev.tensor(&k2, &[1, 1, sk, d]).unwrap(),
            &dev.tensor(&v, &[1, 1, sk, d]).unwrap(),
            AttentionOptions::default(),
        )
        .unwrap()
        .read()
        .await
        .unwrap();
    let want = oracle::attention(&q, &k2, &v, (1, 1, 1, sk, d, d), false, sk, scale);
    check(
        "decode, a block of -inf keys",
        &|i| format!("{i}"),
        &got,
        &want,
    );
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

/// `[b, h, s, d]` data as `[b, s, h, d]`.
pub(super) fn to_bshd(x: &[f32], b: usize, h: usize, s: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let from = ((bi * h + hi) * s + si) * d;
                let to = ((bi * s + si) * h + hi) * d;
                out[to..to + d].copy_from_slice(&x[from..from + d]);
            }
        }
    }
    out
}

/// The sequence-first layout and a packed QKV projection give what heads-first attention gives
/// on the same data (each read in place): grouped-query, causal, lengths, widths that take
/// each wgpu kernel, and f16 packed data.
pub async fn attention_layouts(dev: &Device) {
    use gpukit::{AttentionLayout, DType};
    // (batch, hq, hkv, s, d, causal, lengths)
    let cases = [
        (
            2usize,
            4usize,
            2usize,
            7usize,
            16usize,
            true,
            Some(vec![5u32, 7]),
        ),
        (1, 3, 3, 19, 64, false, None),
        (2, 2, 1, 9, 96, true, None),
        (1, 2, 1, 5, 160, true, Some(vec![3])),
        (2, 2, 1, 45, 40, true, Some(vec![30, 45])),
    ];
    for (ci, (b, hq, hkv, s, d, causal, lens)) in cases.into_iter().enumerate() {
        let seed = 9450 + ci as u64;
        let mut rng = Rng::new(seed);
        let q = rng.vec(b * hq * s * d, -1.0, 1.0);
        let k = rng.vec(b * hkv * s * d, -1.0, 1.0);
        let v = rng.vec(b * hkv * s * d, -1.0, 1.0);
        let options = AttentionOptions {
            causal,
            key_lengths: lens.as_deref(),
            ..Default::default()
        };
        let t = |x: &[f32], h: usize| dev.tensor(x, &[b, h, s, d]).unwrap();
        let want = t(&q, hq)
            .attention(&t(&k, hkv), &t(&v, hkv), options)
            .unwrap()
            .read()
            .await
            .unwrap();
        let want_bshd = to_bshd(&want, b, hq, s, d);
        let ctx = format!("case {ci} seed {seed}");
        let close_to = |got: &[f32], want: &[f32], what: &str| {
            assert_eq!(got.len(), want.len(), "{what} {ctx}");
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 + 1e-5 * w.abs(),
                    "{what} {ctx} [{i}]: {g} vs {w}"
                );
            }
        };

        // Sequence-first tensors.
        let ts = |x: &[f32], h: usize| dev.tensor(&to_bshd(x, b, h, s, d), &[b, s, h, d]).unwrap();
        let bshd = AttentionOptions {
            layout: AttentionLayout::Bshd,
            ..options
        };
        let y = ts(&q, hq)
            .attention(&ts(&k, hkv), &ts(&v, hkv), bshd)
            .unwrap();
        assert_eq!(y.shape(), &[b, s, hq, d]);
        close_to(&y.read().await.unwrap(), &want_bshd, "bshd");

        // Packed [b, s, (hq + 2 hkv) d].
        let (qs, ks, vs) = (
            to_bshd(&q, b, hq, s, d),
            to_bshd(&k, b, hkv, s, d),
            to_bshd(&v, b, hkv, s, d),
        );
        let width = (hq + 2 * hkv) * d;
        let mut packed = Vec::with_capacity(b * s * width);
        for r in 0..b * s {
            packed.extend(&qs[r * hq * d..(r + 1) * hq * d]);
            packed.extend(&ks[r * hkv * d..(r + 1) * hkv * d]);
            packed.extend(&vs[r * hkv * d..(r + 1) * hkv * d]);
        }
        let p = dev.tensor(&packed, &[b, s, width]).unwrap();
        let y = p.attention_packed(hq, hkv, options).unwrap();
        assert_eq!(y.shape(), &[b, s, hq * d]);
        close_to(&y.read().await.unwrap(), &want_bshd, "packed");

        // The same in f16: the packed tensor converted once, the result f16.
        let y = p
            .cast(DType::F16)
            .unwrap()
            .attention_packed(hq, hkv, options)
            .unwrap();
        assert_eq!(y.dtype(), DType::F16);
        let got = y.read().await.unwrap();
        for (i, (g, w)) in got.iter().zip(&want_bshd).enumerate() {
            assert!(
                (g - w).abs() <= 1e-2 + 1e-2 * w.abs(),
                "f16 packed {ctx} [{i}]: {g} vs {w}"
            );
        }
    }
    // Packed widths that do not split are errors.
    let p = dev.tensor(&[0.0; 2 * 10], &[1, 2, 10]).unwrap();
    assert!(p
        .attention_packed(2, 1, AttentionOptions::default())
        .is_err());
    assert!(p
        .attention_packed(3, 2, AttentionOptions::default())
        .is_err());
    assert!(p
        .attention_packed(1, 0, AttentionOptions::default())
        .is_err());
}
