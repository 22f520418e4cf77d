//! Dtypes: conversions between every pair, float ops on f16 and bf16 tensors, comparisons and
//! integer arithmetic, integer ids and key lengths as device tensors, typed reads, memory.

use super::*;
use gpukit::{bf16, f16, DType};

/// The bits an element of `to` holds after converting `v` (an element of `from` as f64), by
/// the rules of `gpukit::dtype` written here independently: halves through f32 rounded to
/// nearest even, floats truncated and saturated into integers with NaN to 0, integers kept.
fn convert(from: DType, to: DType, bits: u32) -> u32 {
    let value: f64 = match from {
        DType::F32 => f32::from_bits(bits) as f64,
        DType::F16 => f16::from_bits(bits as u16).to_f64(),
        DType::BF16 => bf16::from_bits(bits as u16).to_f64(),
        DType::I32 => bits as i32 as f64,
        _ => bits as f64,
    };
    let integer = matches!(from, DType::I32 | DType::U32);
    let as_f32 = value as f32;
    match to {
        DType::F32 => as_f32.to_bits(),
        DType::F16 => f16::from_f32(as_f32).to_bits() as u32,
        DType::BF16 => bf16::from_f32(as_f32).to_bits() as u32,
        DType::I32 if integer => bits,
        DType::U32 if integer => bits,
        DType::I32 => {
            if value.is_nan() {
                0
            } else {
                value.trunc().clamp(i32::MIN as f64, i32::MAX as f64) as i32 as u32
            }
        }
        _ => {
            if value.is_nan() {
                0
            } else {
                value.trunc().clamp(0.0, u32::MAX as f64) as u32
            }
        }
    }
}

/// Random elements of `dtype` as bits, with the edges: NaN, ±inf, ±0, subnormals, values
/// that overflow f16, integers beyond 2^24 and at the bounds.
fn sample(dtype: DType, n: usize, seed: u64) -> Vec<u32> {
    let mut rng = Rng::new(seed);
    let mut floats: Vec<f32> = rng.signed_vec(n, 1e-3, 1e5);
    floats.extend([
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        1e-40,
        -3e-8,
        6e-8,
        65504.0,
        65520.0,
        -7e4,
        1e38,
        3e9,
        -3e9,
        2.5,
        -2.5,
        0.5,
        1.5,
    ]);
    match dtype {
        DType::F32 => floats.iter().map(|v| v.to_bits()).collect(),
        DType::F16 => floats
            .iter()
            .map(|&v| f16::from_f32(v).to_bits() as u32)
            .collect(),
        DType::BF16 => floats
            .iter()
            .map(|&v| bf16::from_f32(v).to_bits() as u32)
            .collect(),
        _ => {
            let mut ints: Vec<u32> = (0..n).map(|_| rng.next_u64() as u32).collect();
            ints.extend([0, 1, u32::MAX, 0x8000_0000, 0x7fff_ffff, 16_777_217, 65_519]);
            ints
        }
    }
}

fn bytes_of(dtype: DType, bits: &[u32]) -> Vec<u8> {
    bits.iter()
        .flat_map(|&b| b.to_le_bytes()[..dtype.size()].to_vec())
        .collect()
}

/// Every dtype converted to every other, element for element against the reference's bits
/// (NaN against NaN), at odd lengths so the last half-precision word is half full.
pub async fn cast_every_pair(dev: &Device) {
    for (fi, from) in DType::ALL.into_iter().enumerate() {
        let bits = sample(from, 301, 41_000 + fi as u64);
        let t = dev
            .tensor_from_bytes(&bytes_of(from, &bits), from, &[bits.len()])
            .unwrap();
        assert_eq!(t.dtype(), from);
        for to in DType::ALL {
            let c = t.cast(to).unwrap();
            assert_eq!((c.dtype(), c.shape()), (to, t.shape()));
            let got = c.read_bytes().await.unwrap();
            assert_eq!(got.len(), bits.len() * to.size(), "{from} -> {to}");
            for (i, &b) in bits.iter().enumerate() {
                let g = &got[i * to.size()..(i + 1) * to.size()];
                let mut word = [0u8; 4];
                word[..g.len()].copy_from_slice(g);
                let (got_bits, want) = (u32::from_le_bytes(word), convert(from, to, b));
                let nan = |x: u32| match to {
                    DType::F32 => f32::from_bits(x).is_nan(),
                    DType::F16 => f16::from_bits(x as u16).is_nan(),
                    DType::BF16 => bf16::from_bits(x as u16).is_nan(),
                    _ => false,
                };
                assert!(
                    got_bits == want || (nan(got_bits) && nan(want)),
                    "{from} -> {to} element {i} (bits {b:#x}): got {got_bits:#x}, want {want:#x}"
                );
            }
        }
    }
    // Empty and one-element tensors, and casting to the same dtype (the tensor itself).
    let e = dev.tensor_of::<f16>(&[], &[0, 3]).unwrap();
    assert_eq!(
        e.cast(DType::U32).unwrap().read().await.unwrap(),
        Vec::<f32>::new()
    );
    let one = dev.tensor_of(&[bf16::from_f32(-1.5)], &[1]).unwrap();
    assert_eq!(
        one.cast(DType::I32)
            .unwrap()
            .read_as::<i32>()
            .await
            .unwrap(),
        [-1]
    );
    assert_eq!(one.cast(DType::BF16).unwrap().dtype(), DType::BF16);
}

/// The tolerance of a result stored in `dtype`: the op's own, plus the rounding to `dtype`.
fn stored(want: Vec<(f64, Tol)>, dtype: DType) -> Vec<(f64, Tol)> {
    let eps = match dtype {
        DType::F16 => 1.0 / 1024.0,
        DType::BF16 => 1.0 / 128.0,
        _ => 0.0,
    };
    want.into_iter()
        .map(|(v, t)| {
            let atol = t.atol + if dtype == DType::F16 { 6e-8 } else { 0.0 };
            (
                v,
                Tol {
                    atol,
                    rtol: t.rtol + eps,
                },
            )
        })
        .collect()
}

/// `data` rounded to `dtype` (the values a half tensor holds).
fn rounded(data: &[f32], dtype: DType) -> Vec<f32> {
    data.iter()
        .map(|&v| match dtype {
            DType::F16 => f16::from_f32(v).to_f32(),
            DType::BF16 => bf16::from_f32(v).to_f32(),
            _ => v,
        })
        .collect()
}

fn half_tensor(dev: &Device, data: &[f32], shape: &[usize], dtype: DType) -> Tensor {
    let t = dev.tensor(data, shape).unwrap().cast(dtype).unwrap();
    assert_eq!(t.dtype(), dtype);
    t
}

/// Float ops take f16 and bf16 tensors and return their dtype: unary, binary with
/// broadcasting (and f16 with f32, which gives f32), reductions, softmax, layer norm, matmul,
/// attention, layout ops, top-k, each against the f64 oracle run on the rounded inputs.
pub async fn half_precision_ops(dev: &Device) {
    for (di, dtype) in [DType::F16, DType::BF16].into_iter().enumerate() {
        let seed = 42_000 + 100 * di as u64;
        let (rows, cols) = (7usize, 33usize);
        let mut xs = Rng::new(seed).signed_vec(rows * cols, 0.05, 4.0);
        xs[5] = f32::NAN;
        xs[9] = f32::INFINITY;
        xs[11] = 1e5; // beyond f16: inf there
        let xr = rounded(&xs, dtype);
        let x = half_tensor(dev, &xs, &[rows, cols], dtype);
        let ctx = |op: &str| format!("{op} on {dtype} [{rows}, {cols}] seed {seed}");
        let at = |i: usize| format!("x[{i}]");

        for op in [UnaryOp::Gelu, UnaryOp::Exp, UnaryOp::Abs, UnaryOp::Sigmoid] {
            let y = x.unary(op).unwrap();
            assert_eq!(y.dtype(), dtype);
            let want: Vec<_> = xr.iter().map(|&v| oracle::unary(op, v as f64)).collect();
            check(
                &ctx(op.name()),
                &at,
                &y.read().await.unwrap(),
                &stored(want, dtype),
            );
        }

        let row = Rng::new(seed + 1).signed_vec(cols, 0.1, 2.0);
        let rr = rounded(&row, dtype);
        let r = half_tensor(dev, &row, &[cols], dtype);
        let y = x.mul(&r).unwrap();
        assert_eq!(y.dtype(), dtype);
        let want: Vec<_> = (0..rows * cols)
            .map(|i| oracle::binary(BinaryOp::Mul, xr[i] as f64, rr[i % cols] as f64))
            .collect();
        check(
            &ctx("mul"),
            &at,
            &y.read().await.unwrap(),
            &stored(want.clone(), dtype),
        );
        // With an f32 operand the result is f32.
        let r32 = dev.tensor(&rr, &[cols]).unwrap();
        let y = x.mul(&r32).unwrap();
        assert_eq!(y.dtype(), DType::F32);
        check(&ctx("mul f32"), &at, &y.read().await.unwrap(), &want);

        // Finite data for the rest.
        let fs = Rng::new(seed + 2).signed_vec(rows * cols, 0.05, 3.0);
        let fr = rounded(&fs, dtype);
        let f = half_tensor(dev, &fs, &[rows, cols], dtype);
        let sums = f.sum_last().unwrap();
        assert_eq!(sums.dtype(), dtype);
        let want: Vec<_> = fr
            .chunks(cols)
            .map(|c| {
                let row: Vec<f64> = c.iter().map(|&v| v as f64).collect();
                oracle::reduce(ReduceOp::Sum, &row)
            })
            .collect();
        check(
            &ctx("sum_last"),
            &at,
            &sums.read().await.unwrap(),
            &stored(want, dtype),
        );

        let sm = f.softmax().unwrap();
        let mut want = Vec::new();
        for c in fr.chunks(cols) {
            let row: Vec<f64> = c.iter().map(|&v| v as f64).collect();
            let (v, t) = oracle::softmax(&row, false);
            want.extend(v.into_iter().map(|v| (v, t)));
        }
        check(
            &ctx("softmax"),
            &at,
            &sm.read().await.unwrap(),
            &stored(want, dtype),
        );

        let w = Rng::new(seed + 3).signed_vec(cols, 0.5, 1.5);
        let wt = half_tensor(dev, &w, &[cols], dtype);
        let ln = f.layer_norm(Some(&wt), None, 1e-5).unwrap();
        assert_eq!(ln.dtype(), dtype);
        let wr = rounded(&w, dtype);
        let mut want = Vec::new();
        for c in fr.chunks(cols) {
            let row: Vec<f64> = c.iter().map(|&v| v as f64).collect();
            let (v, t) = oracle::norm(&row, false, Some(&wr), None, 1e-5);
            want.extend(v.into_iter().map(|v| (v, t)));
        }
        check(
            &ctx("layer_norm"),
            &at,
            &ln.read().await.unwrap(),
            &stored(want, dtype),
        );

        let n = 19;
        let bs = Rng::new(seed + 4).signed_vec(cols * n, 0.05, 1.0);
        let br = rounded(&bs, dtype);
        let b = half_tensor(dev, &bs, &[cols, n], dtype);
        let p = f.matmul(&b).unwrap();
        assert_eq!(p.dtype(), dtype);
        let want = oracle::matmul(&fr, &br, rows, cols, n);
        check(
            &ctx("matmul"),
            &at,
            &p.read().await.unwrap(),
            &stored(want, dtype),
        );

        // Products the f16-storage kernels take as stored (k and n multiples of 4; batched and
        // shared operands; partial tiles), against the oracle on the rounded inputs.
        if dtype == DType::F16 {
            for (bi, (batch, m, k, n)) in [(1usize, 130usize, 256usize, 68usize), (3, 70, 64, 132)]
                .into_iter()
                .enumerate()
            {
                let s2 = seed + 20 + bi as u64;
                let av = rounded(&Rng::new(s2).signed_vec(batch * m * k, 0.05, 1.0), dtype);
                let bv = rounded(&Rng::new(s2 + 1).signed_vec(k * n, 0.05, 1.0), dtype);
                let lhs = half_tensor(dev, &av, &[batch, m, k], dtype);
                let rhs = half_tensor(dev, &bv, &[k, n], dtype);
                let p = lhs.matmul(&rhs).unwrap();
                assert_eq!((p.dtype(), p.shape()), (dtype, &[batch, m, n][..]));
                let mut want = Vec::new();
                for i in 0..batch {
                    want.extend(oracle::matmul(
                        &av[i * m * k..(i + 1) * m * k],
                        &bv,
                        m,
                        k,
                        n,
                    ));
                }
                let got = p.read().await.unwrap();
                check(&ctx("f16-storage matmul"), &at, &got, &stored(want, dtype));
            }
        }

        // Layout: a permute and a slice of halves are exact.
        let pt = f.permute(&[1, 0]).unwrap();
        assert_eq!(pt.dtype(), dtype);
        let want: Vec<f32> = (0..rows * cols)
            .map(|i| fr[(i % rows) * cols + i / rows])
            .collect();
        assert_eq!(pt.read().await.unwrap(), want, "{}", ctx("permute"));
        let sl = f.slice(1, 3..20).unwrap();
        let want: Vec<f32> = (0..rows)
            .flat_map(|r| fr[r * cols + 3..r * cols + 20].to_vec())
            .collect();
        assert_eq!(sl.read().await.unwrap(), want, "{}", ctx("slice"));

        // Top-k: values in the dtype, indices u32.
        let (vals, idx) = f.topk_last(3).unwrap();
        assert_eq!((vals.dtype(), idx.dtype()), (dtype, DType::U32));
        let got_i = idx.read_as::<u32>().await.unwrap();
        for r in 0..rows {
            let row = &fr[r * cols..(r + 1) * cols];
            let mut order: Vec<usize> = (0..cols).collect();
            order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
            let want: Vec<u32> = order[..3].iter().map(|&i| i as u32).collect();
            assert_eq!(&got_i[r * 3..r * 3 + 3], &want[..], "{}", ctx("topk"));
        }

        // Attention on [1, 2, 5, 8] halves.
        let (h, s, d) = (2usize, 5usize, 8usize);
        let mk = |k: u64| Rng::new(seed + k).signed_vec(h * s * d, 0.1, 1.0);
        let (q, k, v) = (mk(5), mk(6), mk(7));
        let (qt, kt, vt) = (
            half_tensor(dev, &q, &[1, h, s, d], dtype),
            half_tensor(dev, &k, &[1, h, s, d], dtype),
            half_tensor(dev, &v, &[1, h, s, d], dtype),
        );
        let opts = AttentionOptions {
            causal: true,
            ..Default::default()
        };
        let a = qt.attention(&kt, &vt, opts).unwrap();
        assert_eq!(a.dtype(), dtype);
        let (qr, kr, vr) = (rounded(&q, dtype), rounded(&k, dtype), rounded(&v, dtype));
        let dims = (h, h, s, s, d, d);
        let want = oracle::attention(&qr, &kr, &vr, dims, true, s, 1.0 / (d as f64).sqrt());
        check(
            &ctx("attention"),
            &at,
            &a.read().await.unwrap(),
            &stored(want, dtype),
        );

        // Embedding rows of a half table (an even and an odd width) are exact.
        for dim in [6usize, 5] {
            let tab = Rng::new(seed + 8).signed_vec(4 * dim, 0.1, 2.0);
            let tr = rounded(&tab, dtype);
            let table = half_tensor(dev, &tab, &[4, dim], dtype);
            let e = table.embedding(&[3, 0, 3]).unwrap();
            assert_eq!(e.dtype(), dtype);
            let want: Vec<f32> = [3usize, 0, 3]
                .iter()
                .flat_map(|&i| tr[i * dim..(i + 1) * dim].to_vec())
                .collect();
            assert_eq!(e.read().await.unwrap(), want, "{}", ctx("embedding"));
        }
    }
}

/// The rest of the float ops on f16 and bf16 tensors: each result has the input's dtype and
/// equals, within the dtype's rounding, the same op on f32 tensors holding the same (rounded)
/// values, which the op's own suite checks against the f64 oracle on this backend.
pub async fn half_precision_every_op(dev: &Device) {
    use gpukit::{Conv2dOptions, Pool2dOptions, QuantFormat, RopeLayout};
    for (di, dtype) in [DType::F16, DType::BF16].into_iter().enumerate() {
        let seed = 45_000 + 100 * di as u64;
        let eps = if dtype == DType::F16 {
            1.0 / 1024.0
        } else {
            1.0 / 128.0
        };
        let pair = |shape: &[usize], k: u64| {
            let n: usize = shape.iter().product();
            let v = rounded(&Rng::new(seed + k).signed_vec(n, 0.05, 2.0), dtype);
            (
                half_tensor(dev, &v, shape, dtype),
                dev.tensor(&v, shape).unwrap(),
            )
        };
        let (x, x32) = pair(&[2, 3, 6, 8], 1);
        let (w, w32) = pair(&[8], 2);
        let (c, c32) = pair(&[4, 3, 3, 3], 3);
        let (xs, xs32) = pair(&[2, 3, 6, 8], 4);
        let mask = dev
            .tensor(&[1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0], &[8])
            .unwrap();
        let (cos, sin) = dev.rope_tables(6, 8, 10000.0, 0).unwrap();
        let qbytes = oracle::quantize(
            &Rng::new(seed + 5).signed_vec(16 * 64, 0.1, 1.0),
            QuantFormat::Q8_0,
        );
        let q = dev.quantized(&qbytes, QuantFormat::Q8_0, 16, 64).unwrap();
        let (xq, xq32) = pair(&[3, 64], 6);
        let pool = Pool2dOptions {
            kernel: [2, 2],
            stride: [2, 2],
            padding: [0, 0],
        };
        // conv2d's weight in the input's dtype.
        let c_of = |x: &Tensor| -> gpukit::Result<Tensor> {
            Ok(if x.dtype() == DType::F32 {
                c32.clone()
            } else {
                c.clone()
            })
        };
        type Op<'a> = (
            &'a str,
            Box<dyn Fn(&Tensor, &Tensor, &Tensor, &Tensor) -> gpukit::Result<Tensor> + 'a>,
        );
        // (name, op(x, w or c, other x, quant input)).
        let ops: Vec<Op> = vec![
            (
                "rms_norm",
                Box::new(|x, w, _, _| x.rms_norm(Some(w), None, 1e-5)),
            ),
            ("log_softmax", Box::new(|x, _, _, _| x.log_softmax())),
            ("max_last", Box::new(|x, _, _, _| x.max_last())),
            ("min_axis", Box::new(|x, _, _, _| x.min_axis(1, true))),
            ("mean_axis", Box::new(|x, _, _, _| x.mean_axis(2, false))),
            ("dot", Box::new(|x, _, o, _| x.dot(o))),
            ("sub", Box::new(|x, _, o, _| x.sub(o))),
            ("div", Box::new(|x, w, _, _| x.div(w))),
            ("where", Box::new(|x, _, o, _| mask.where_cond(x, o))),
            (
                "rope",
                Box::new(|x, _, _, _| x.rope(&cos, &sin, RopeLayout::HalfSplit)),
            ),
            (
                "conv2d",
                Box::new(|x, _, _, _| x.conv2d(&c_of(x)?, None, Conv2dOptions::default())),
            ),
            ("max_pool2d", Box::new(|x, _, _, _| x.max_pool2d(pool))),
            ("avg_pool2d", Box::new(|x, _, _, _| x.avg_pool2d(pool))),
            ("matmul_quant", Box::new(|_, _, _, xq| xq.matmul_quant(&q))),
            ("concat", Box::new(|x, _, o, _| Tensor::concat(&[x, o], 3))),
            ("masked_mean", Box::new(|x, _, _, _| x.masked_mean(&[2, 3]))),
            (
                "argmax_axis",
                Box::new(|x, _, _, _| x.argmax_axis(3, false)?.cast(DType::F32)),
            ),
            ("silu", Box::new(|x, _, _, _| x.silu())),
        ];
        for (name, op) in &ops {
            let ctx = format!("{name} on {dtype} seed {seed}");
            let got = op(&x, &w, &xs, &xq).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let want = op(&x32, &w32, &xs32, &xq32).unwrap();
            let int_out = *name == "argmax_axis";
            assert_eq!(
                got.dtype(),
                if int_out { DType::F32 } else { dtype },
                "{ctx}"
            );
            assert_eq!(got.shape(), want.shape(), "{ctx}");
            let want: Vec<(f64, Tol)> = want
                .read()
                .await
                .unwrap()
                .iter()
                .map(|&v| {
                    let tol = if int_out { 0.0 } else { eps };
                    (
                        v as f64,
                        Tol {
                            atol: 1e-3 * tol,
                            rtol: tol,
                        },
                    )
                })
                .collect();
            check(
                &ctx,
                &|i| format!("[{i}]"),
                &got.read().await.unwrap(),
                &want,
            );
        }
    }
}
