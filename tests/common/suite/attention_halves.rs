//! Fused attention over f16 and bf16 operands (the attention family; its own file for length).

use super::attention::to_bshd;
use super::*;

/// Attention over f32, f16 and bf16 operands against f64 on the same rounded values, the result
/// in their dtype. CUDA's tensor-core kernels take head widths 32, 64 and 128 as stored (f32
/// at f32 accuracy, three tf32 products each) (64-row
/// query and key tiles: several, partial, causal with fewer and with more queries than keys,
/// grouped heads, host and device lengths, one of them 0, heads-first and sequence-first, and
/// grids of 16 heads over 300-520 rows that fill a GPU); other widths, and other backends,
/// convert around the f32 kernels. Scores that grow along the keys make the kernels raise their
/// running maxima tile after tile. NaN and infinities as in f32, also with 16 and 20 query rows.
pub async fn attention_halves(dev: &Device) {
    use gpukit::{AttentionLayout, DType};
    // (batch, hq, hkv, sq, sk, d, causal, lengths, device lengths, sequence-first)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        bool,
        Option<Vec<u32>>,
        bool,
        bool,
    );
    let cases: [Case; 15] = [
        (1, 2, 1, 130, 150, 64, true, None, false, false),
        (
            2,
            4,
            2,
            65,
            200,
            128,
            false,
            Some(vec![200, 77]),
            true,
            false,
        ),
        (1, 3, 3, 64, 64, 32, true, None, false, true),
        (2, 2, 1, 100, 37, 64, false, Some(vec![0, 37]), false, false),
        (1, 8, 2, 1, 300, 128, true, None, false, true),
        (1, 2, 2, 70, 70, 96, true, None, false, false),
        (1, 1, 1, 17, 9, 128, true, None, false, false),
        (2, 2, 2, 3, 129, 32, false, Some(vec![65, 129]), true, true),
        (1, 6, 2, 1, 1000, 256, false, Some(vec![999]), true, false),
        // The split decode kernel reads halves as stored (chunks of 128 keys, two invocations
        // a key): grouped rows with device lengths, and a batch of 4 with a length of 1 and 0.
        (2, 8, 2, 2, 700, 64, true, Some(vec![700, 513]), true, false),
        (
            4,
            8,
            8,
            1,
            4100,
            16,
            false,
            Some(vec![4100, 1, 2000, 0]),
            false,
            true,
        ),
        // Key rows at 16-byte multiples load 4 words at a time, the two invocations of a key
        // taking 8 and 4 of its 12 words; rows 10 halves wide (5 words) a word at a time.
        (1, 4, 2, 1, 600, 24, false, Some(vec![555]), true, false),
        (1, 4, 2, 2, 600, 10, true, None, false, true),
        (2, 16, 4, 520, 520, 64, true, None, false, true),
        (
            2,
            16,
            8,
            300,
            530,
            128,
            false,
            Some(vec![530, 301]),
            false,
            false,
        ),
    ];
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let round = |x: f32| match dtype {
            DType::F32 => x,
            DType::F16 => half::f16::from_f32(x).to_f32(),
            _ => half::bf16::from_f32(x).to_f32(),
        };
        // The output and the probabilities are rounded to the dtype (f32: the oracle's own
        // tolerance).
        let tol = match dtype {
            DType::F32 => Tol {
                atol: 2e-5,
                rtol: 1e-4,
            },
            DType::F16 => Tol {
                atol: 2e-3,
                rtol: 2e-3,
            },
            _ => Tol {
                atol: 1.6e-2,
                rtol: 1.6e-2,
            },
        };
        for (ci, (b, hq, hkv, sq, sk, d, causal, lens, on_device, bshd)) in
            cases.iter().cloned().enumerate()
        {
            let seed = 9800 + ci as u64;
            let mut rng = Rng::new(seed);
            let mut gen =
                |n: usize| -> Vec<f32> { rng.vec(n, -1.0, 1.0).into_iter().map(round).collect() };
            let (q, k, v) = (
                gen(b * hq * sq * d),
                gen(b * hkv * sk * d),
                gen(b * hkv * sk * d),
            );
            let layout = if bshd {
                AttentionLayout::Bshd
            } else {
                AttentionLayout::Bhsd
            };
            let t = |x: &[f32], h: usize, s: usize| {
                let (data, shape) = if bshd {
                    (to_bshd(x, b, h, s, d), [b, s, h, d])
                } else {
                    (x.to_vec(), [b, h, s, d])
                };
                dev.tensor(&data, &shape).unwrap().cast(dtype).unwrap()
            };
            let (tq, tk, tv) = (t(&q, hq, sq), t(&k, hkv, sk), t(&v, hkv, sk));
            let dev_lens = match (&lens, on_device) {
                (Some(l), true) => Some(dev.tensor_of(l, &[b]).unwrap()),
                _ => None,
            };
            let options = AttentionOptions {
                causal,
                key_lengths: if on_device { None } else { lens.as_deref() },
                lengths: dev_lens.as_ref(),
                scale: None,
                layout,
                ..Default::default()
            };
            let y = tq.attention(&tk, &tv, options).unwrap();
            assert_eq!(y.dtype(), dtype);
            let mut got = y.read().await.unwrap();
            if bshd {
                // Back to heads-first for the reference's order.
                let mut hf = vec![0.0; got.len()];
                for ((bi, si), h) in (0..b)
                    .flat_map(|bi| (0..sq).map(move |si| (bi, si)))
                    .flat_map(|x| (0..hq).map(move |h| (x, h)))
                {
                    let from = ((bi * sq + si) * hq + h) * d;
                    let to = ((bi * hq + h) * sq + si) * d;
                    hf[to..to + d].copy_from_slice(&got[from..from + d]);
                }
                got = hf;
            }
            let want: Vec<(f64, Tol)> = (0..b)
                .flat_map(|bi| {
                    let len = lens.as_ref().map_or(sk, |l| l[bi] as usize);
                    let scale = 1.0 / (d as f64).sqrt();
                    let dims = (hq, hkv, sq, sk, d, d);
                    let (qb, kb, vb) = (
                        &q[bi * hq * sq * d..],
                        &k[bi * hkv * sk * d..],
                        &v[bi * hkv * sk * d..],
                    );
                    oracle::attention(qb, kb, vb, dims, causal, len, scale)
                })
                .map(|(w, _)| (w, tol))
                .collect();
            check(
                &format!("{dtype:?} attention case {ci} seed {seed}"),
                &|i| format!("flat {i}"),
                &got,
                &want,
            );
        }
        // Special values at every width the tensor cores take, through them (5 and 20 query
        // rows) and through CUDA's decode kernel (4): NaN in q, a +inf score, a key scoring
        // -inf, a row whose only key scores -inf, a row with no key.
        for (d, sq) in [32usize, 64, 128]
            .into_iter()
            .flat_map(|d| [(d, 5), (d, 4), (d, 20)])
        {
            let mut rng = Rng::new(9900 + d as u64);
            let mut q: Vec<f32> = rng.vec(sq * d, 0.1, 1.0).into_iter().map(round).collect();
            let mut k: Vec<f32> = rng.vec(3 * d, 0.1, 1.0).into_iter().map(round).collect();
            let v: Vec<f32> = rng.vec(3 * d, -1.0, 1.0).into_iter().map(round).collect();
            q[d] = f32::NAN;
            q[2 * d] = f32::INFINITY;
            k[2 * d + 1] = f32::NEG_INFINITY;
            let half =
                |x: &[f32], s: usize| dev.tensor(x, &[1, 1, s, d]).unwrap().cast(dtype).unwrap();
            let got = half(&q, sq)
                .attention(&half(&k, 3), &half(&v, 3), AttentionOptions::default())
                .unwrap()
                .read()
                .await
                .unwrap();
            let row = |i: usize| &got[i * d..(i + 1) * d];
            assert!(
                row(1).iter().all(|x| x.is_nan()),
                "{dtype:?} d={d} NaN in q"
            );
            assert!(row(2).iter().all(|x| x.is_nan()), "{dtype:?} d={d} +inf");
            for i in (0..sq).filter(|&i| i != 1 && i != 2) {
                assert!(
                    row(i).iter().all(|x| x.is_finite()),
                    "{dtype:?} d={d} row {i}"
                );
            }
            // Two batch entries of one key scoring -inf: length 1 gives NaN, length 0 zeros
            // (as one query row, and as 16, which the tensor cores take).
            let lens = [1u32, 0];
            for rows in [1, 16] {
                let two = |x: &[f32], rows: usize| {
                    let entry = x.repeat(rows);
                    dev.tensor(&[&entry[..], &entry[..]].concat(), &[2, 1, rows, d])
                        .unwrap()
                        .cast(dtype)
                        .unwrap()
                };
                let options = AttentionOptions {
                    key_lengths: Some(&lens),
                    ..Default::default()
                };
                let got = two(&q[..d], rows)
                    .attention(&two(&k[2 * d..3 * d], 1), &two(&v[..d], 1), options)
                    .unwrap()
                    .read()
                    .await
                    .unwrap();
                let n = rows * d;
                assert!(
                    got[..n].iter().all(|x| x.is_nan()),
                    "{dtype:?} d={d} {rows} rows, all -inf"
                );
                assert!(
                    got[n..].iter().all(|&x| x == 0.0),
                    "{dtype:?} d={d} {rows} rows, no key"
                );
            }
        }
        // The same through the split decode kernel (600 keys, 4 heads over 1): NaN in one
        // query head and +inf in another make their rows NaN, the others stay finite.
        {
            let (d, sk) = (64usize, 600usize);
            let mut rng = Rng::new(9910);
            let mut q: Vec<f32> = rng.vec(4 * d, 0.1, 1.0).into_iter().map(round).collect();
            let k: Vec<f32> = rng.vec(sk * d, 0.1, 1.0).into_iter().map(round).collect();
            let v: Vec<f32> = rng.vec(sk * d, -1.0, 1.0).into_iter().map(round).collect();
            q[d] = f32::NAN;
            q[2 * d] = f32::INFINITY;
            let half = |x: &[f32], h: usize, s: usize| {
                dev.tensor(x, &[1, h, s, d]).unwrap().cast(dtype).unwrap()
            };
            let got = half(&q, 4, 1)
                .attention(
                    &half(&k, 1, sk),
                    &half(&v, 1, sk),
                    AttentionOptions::default(),
                )
                .unwrap()
                .read()
                .await
                .unwrap();
            for (h, row) in got.chunks(d).enumerate() {
                let nan = h == 1 || h == 2;
                assert!(
                    row.iter()
                        .all(|x| if nan { x.is_nan() } else { x.is_finite() }),
                    "{dtype:?} split decode, head {h}: {row:?}"
                );
            }
        }
        attention_growing(dev, dtype, round, tol).await;
        attention_scales(dev, dtype, round, tol).await;
        if dtype != DType::F32 {
            attention_mixed(dev, dtype, round, tol).await;
            attention_precision(dev, dtype, tol).await;
        }
    }
}

/// A caller's scale, negative too (CUDA's tensor-core kernels move a negative scale into q's
/// signs before the scores), against f64 with the same scale.
async fn attention_scales(
    dev: &Device,
    dtype: gpukit::DType,
    round: impl Fn(f32) -> f32,
    tol: Tol,
) {
    let cases = [
        (2usize, 1usize, 70usize, 130usize, 64usize, true, -0.3f32),
        (1, 1, 40, 75, 128, false, 0.9),
        (2, 2, 33, 33, 32, true, -1.7),
    ];
    for (ci, (hq, hkv, sq, sk, d, causal, scale)) in cases.into_iter().enumerate() {
        let seed = 9940 + ci as u64;
        let mut rng = Rng::new(seed);
        let mut gen =
            |n: usize| -> Vec<f32> { rng.vec(n, -1.0, 1.0).into_iter().map(&round).collect() };
        let (q, k, v) = (gen(hq * sq * d), gen(hkv * sk * d), gen(hkv * sk * d));
        let t = |x: &[f32], h: usize, s: usize| {
            dev.tensor(x, &[1, h, s, d]).unwrap().cast(dtype).unwrap()
        };
        let options = AttentionOptions {
            causal,
            scale: Some(scale),
            ..Default::default()
        };
        let got = t(&q, hq, sq)
            .attention(&t(&k, hkv, sk), &t(&v, hkv, sk), options)
            .unwrap()
            .read()
            .await
            .unwrap();
        let dims = (hq, hkv, sq, sk, d, d);
        let want: Vec<(f64, Tol)> = oracle::attention(&q, &k, &v, dims, causal, sk, scale as f64)
            .into_iter()
            .map(|(w, _)| (w, tol))
            .collect();
        let ctx = format!("{dtype:?} attention, scale {scale}, case {ci} seed {seed}");
        check(&ctx, &|i| format!("flat {i}"), &got, &want);
    }
}

/// Scores that grow along the keys (key j scaled by 16 j / sk), so that a row's maximum rises
/// many times over its keys and the kernels rescale their accumulators tile after tile.
async fn attention_growing(
    dev: &Device,
    dtype: gpukit::DType,
    round: impl Fn(f32) -> f32,
    tol: Tol,
) {
    let (hq, hkv, sq, sk) = (2usize, 1usize, 200usize, 300usize);
    for (ci, d) in [64usize, 128].into_iter().enumerate() {
        let seed = 9930 + ci as u64;
        let mut rng = Rng::new(seed);
        let q: Vec<f32> = rng
            .vec(hq * sq * d, 0.5, 1.0)
            .into_iter()
            .map(&round)
            .collect();
        let k: Vec<f32> = rng
            .vec(hkv * sk * d, 0.5, 1.0)
            .into_iter()
            .enumerate()
            .map(|(e, x)| round(x * 16.0 * ((e / d) % sk) as f32 / sk as f32))
            .collect();
        let v: Vec<f32> = rng
            .vec(hkv * sk * d, -1.0, 1.0)
            .into_iter()
            .map(&round)
            .collect();
        let t = |x: &[f32], h: usize, s: usize| {
            dev.tensor(x, &[1, h, s, d]).unwrap().cast(dtype).unwrap()
        };
        let options = AttentionOptions {
            causal: true,
            ..Default::default()
        };
        let y = t(&q, hq, sq)
            .attention(&t(&k, hkv, sk), &t(&v, hkv, sk), options)
            .unwrap();
        let got = y.read().await.unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let want: Vec<(f64, Tol)> =
            oracle::attention(&q, &k, &v, (hq, hkv, sq, sk, d, d), true, sk, scale)
                .into_iter()
                .map(|(w, _)| (w, tol))
                .collect();
        let ctx = format!("{dtype:?} attention, growing scores, d={d} seed {seed}");
        check(&ctx, &|i| format!("flat {i}"), &got, &want);
    }
}

/// f32 operands attended in `dtype`'s precision ([`AttentionOptions::precision`]), read through
/// views of one packed `[1, s, hq + 2 hkv, d]` tensor as a decoder's prompt reads them: the
/// result f32 and within the rounded inputs' error of f64 on the unrounded values, whether the
/// backend rounds (CUDA at d 64) or computes exactly (d 96, other backends).
async fn attention_precision(dev: &Device, dtype: gpukit::DType, tol: Tol) {
    use gpukit::DType;
    let precision = match dtype {
        DType::F16 => Precision::F16,
        _ => Precision::Bf16,
    };
    // Twice the rounded operands' tolerance: the inputs' own rounding as well.
    let tol = Tol {
        atol: 2.0 * tol.atol,
        rtol: 2.0 * tol.rtol,
    };
    let (hq, hkv) = (6usize, 2usize);
    for (ci, (s, d)) in [(130usize, 64usize), (37, 96)].into_iter().enumerate() {
        let seed = 9970 + ci as u64;
        let mut rng = Rng::new(seed);
        let (q, k, v) = (
            rng.vec(hq * s * d, -1.0, 1.0),
            rng.vec(hkv * s * d, -1.0, 1.0),
            rng.vec(hkv * s * d, -1.0, 1.0),
        );
        // Each position's heads side by side: q's, then k's, then v's.
        let (bq, bk, bv) = (
            to_bshd(&q, 1, hq, s, d),
            to_bshd(&k, 1, hkv, s, d),
            to_bshd(&v, 1, hkv, s, d),
        );
        let mut packed = Vec::with_capacity(s * (hq + 2 * hkv) * d);
        for j in 0..s {
            packed.extend_from_slice(&bq[j * hq * d..(j + 1) * hq * d]);
            packed.extend_from_slice(&bk[j * hkv * d..(j + 1) * hkv * d]);
            packed.extend_from_slice(&bv[j * hkv * d..(j + 1) * hkv * d]);
        }
        let t = dev.tensor(&packed, &[1, s, hq + 2 * hkv, d]).unwrap();
        let part = |r: std::ops::Range<usize>| t.slice(2, r).unwrap();
        let (tq, tk, tv) = (
            part(0..hq),
            part(hq..hq + hkv),
            part(hq + hkv..hq + 2 * hkv),
        );
        let ctx = format!("f32 attention in {precision:?}, case {ci} seed {seed}");
        let operands = ((&tq, &tk, &tv), (&q[..], &k[..], &v[..]));
        causal_bshd(operands, (hq, hkv, s, s, d), precision, tol, &ctx).await;
    }
}

/// An f32 query over a half-precision KV cache (keys and values side by side in one
/// sequence-first tensor, as a decoder keeps them, read through slices): the result is f32 and
/// matches f64 on the rounded keys and values, for decode rows (1 and 4), a prompt block and two
/// rows over 600 keys (the split kernel).
async fn attention_mixed(dev: &Device, dtype: gpukit::DType, round: impl Fn(f32) -> f32, tol: Tol) {
    let (hq, hkv, d) = (8usize, 2usize, 64usize);
    // The last case decodes over enough keys for the split kernel, which reads halves as
    // stored (the query rounded to them).
    for (ci, (sq, sk)) in [(1usize, 70usize), (4, 83), (9, 9), (2, 600)]
        .into_iter()
        .enumerate()
    {
        let cap = sk + 7;
        let seed = 9950 + ci as u64;
        let mut rng = Rng::new(seed);
        let q = rng.vec(hq * sq * d, -1.0, 1.0);
        // The cache: [1, cap, 2 hkv, d], the keys' heads first; positions past sk hold NaN,
        // which the slice keeps out.
        let mut cache = vec![f32::NAN; cap * 2 * hkv * d];
        cache[..sk * 2 * hkv * d]
            .iter_mut()
            .for_each(|x| *x = round(rng.uniform(-1.0, 1.0)));
        let heads_first = |first: usize| -> Vec<f32> {
            let mut out = Vec::with_capacity(hkv * sk * d);
            for h in 0..hkv {
                for j in 0..sk {
                    let at = (j * 2 * hkv + first + h) * d;
                    out.extend_from_slice(&cache[at..at + d]);
                }
            }
            out
        };
        let (k, v) = (heads_first(0), heads_first(hkv));
        let stored = dev
            .tensor(&cache, &[1, cap, 2 * hkv, d])
            .unwrap()
            .cast(dtype)
            .unwrap()
            .slice(1, 0..sk)
            .unwrap();
        let tk = stored.slice(2, 0..hkv).unwrap();
        let tv = stored.slice(2, hkv..2 * hkv).unwrap();
        let tq = dev
            .tensor(&to_bshd(&q, 1, hq, sq, d), &[1, sq, hq, d])
            .unwrap();
        let ctx = format!("{dtype:?} cache, f32 query, case {ci} seed {seed}");
        let operands = ((&tq, &tk, &tv), (&q[..], &k[..], &v[..]));
        causal_bshd(operands, (hq, hkv, sq, sk, d), Precision::F32, tol, &ctx).await;
    }
}

/// Attention operands: the tensors (q, k, v) and their values, heads-first.
type Operands<'a> = (
    (&'a Tensor, &'a Tensor, &'a Tensor),
    (&'a [f32], &'a [f32], &'a [f32]),
);

/// Causal sequence-first attention of the tensors (q, k, v) in `precision`, an f32 result,
/// against f64 on the heads-first values within `tol`.
async fn causal_bshd(
    ((tq, tk, tv), (q, k, v)): Operands<'_>,
    (hq, hkv, sq, sk, d): (usize, usize, usize, usize, usize),
    precision: Precision,
    tol: Tol,
    ctx: &str,
) {
    use gpukit::{AttentionLayout, DType};
    let options = AttentionOptions {
        causal: true,
        layout: AttentionLayout::Bshd,
        precision,
        ..Default::default()
    };
    let y = tq.attention(tk, tv, options).unwrap();
    assert_eq!(y.dtype(), DType::F32, "{ctx}");
    let got = y.read().await.unwrap();
    let scale = 1.0 / (d as f64).sqrt();
    let want: Vec<(f64, Tol)> =
        oracle::attention(q, k, v, (hq, hkv, sq, sk, d, d), true, sk, scale)
            .into_iter()
            .map(|(w, _)| (w, tol))
            .collect();
    check(
        ctx,
        &|i| format!("flat {i}"),
        &to_bshd(&got, 1, sq, hq, d),
        &want,
    );
}
