//! Products: shapes, options (transposes, bias, activation), tiles and precisions.

use super::*;

/// Matmul against the f64 oracle: shapes that are multiples of no tile, k up to 4096, batches
/// with either side shared, and the shape errors.
pub async fn matmul_random(dev: &Device) {
    let cases: [(usize, usize, usize); 11] = [
        (300, 129, 257),
        (256, 16, 384),
        (1, 1, 1),
        (7, 13, 5),
        (65, 257, 33),
        (64, 64, 64),
        (1, 1000, 7),
        (257, 65, 1),
        (33, 4096, 17),
        (5, 0, 3),
        (0, 4, 3),
    ];
    for (idx, (m, k, n)) in cases.into_iter().enumerate() {
        let seed = 8000 + idx as u64;
        let mut rng = Rng::new(seed);
        let (a, b) = (rng.vec(m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
        let ta = dev.tensor(&a, &[m, k]).unwrap();
        let tb = dev.tensor(&b, &[k, n]).unwrap();
        let y = ta.matmul(&tb).unwrap();
        assert_eq!(y.shape(), &[m, n]);
        let got = y.read().await.unwrap();
        check(
            &format!("matmul {m}x{k} by {k}x{n} seed {seed}"),
            &|i| format!("out[{}][{}]", i / n.max(1), i % n.max(1)),
            &got,
            &oracle::matmul(&a, &b, m, k, n),
        );
    }
    // Batched, with a shared side broadcast over the batch.
    let (bt, m, k, n) = (3, 17, 19, 23);
    let mut rng = Rng::new(8100);
    let a3 = rng.vec(bt * m * k, -1.0, 1.0);
    let b3 = rng.vec(bt * k * n, -1.0, 1.0);
    let a2 = rng.vec(m * k, -1.0, 1.0);
    let b2 = rng.vec(k * n, -1.0, 1.0);
    // (A, its shape, its batch stride, B, its shape, its batch stride)
    type Case<'a> = (&'a [f32], Vec<usize>, usize, &'a [f32], Vec<usize>, usize);
    let batched: [Case; 3] = [
        (&a3, vec![bt, m, k], m * k, &b3, vec![bt, k, n], k * n),
        (&a3, vec![bt, m, k], m * k, &b2, vec![k, n], 0),
        (&a2, vec![m, k], 0, &b3, vec![bt, k, n], k * n),
    ];
    for (a, sa, a_stride, b, sb, b_stride) in batched {
        let y = dev
            .tensor(a, &sa)
            .unwrap()
            .matmul(&dev.tensor(b, &sb).unwrap())
            .unwrap();
        assert_eq!(y.shape(), &[bt, m, n]);
        let got = y.read().await.unwrap();
        let want: Vec<(f64, Tol)> = (0..bt)
            .flat_map(|i| oracle::matmul(&a[i * a_stride..], &b[i * b_stride..], m, k, n))
            .collect();
        check(
            &format!("batched matmul {sa:?} x {sb:?}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }
    // Several tiles in each direction, batched with B shared.
    let (bt, m, k, n) = (2, 260, 33, 270);
    let mut rng = Rng::new(8101);
    let (a, b) = (rng.vec(bt * m * k, -1.0, 1.0), rng.vec(k * n, -1.0, 1.0));
    let y = dev
        .tensor(&a, &[bt, m, k])
        .unwrap()
        .matmul(&dev.tensor(&b, &[k, n]).unwrap())
        .unwrap();
    assert_eq!(y.shape(), &[bt, m, n]);
    let got = y.read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..bt)
        .flat_map(|i| oracle::matmul(&a[i * m * k..], &b, m, k, n))
        .collect();
    check(
        "batched matmul [2, 260, 33] x [33, 270]",
        &|i| format!("flat {i}"),
        &got,
        &want,
    );

    let x = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    assert!(matches!(
        x.matmul(&x).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        x.reshape(&[6]).unwrap().matmul(&x).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}

/// Matmul with NaN and infinity inside: they propagate to exactly the rows and columns they touch.
pub async fn matmul_edges(dev: &Device) {
    let (m, k, n) = (5, 7, 6);
    let mut a = Rng::new(8200).vec(m * k, -1.0, 1.0);
    let b = Rng::new(8201).vec(k * n, -1.0, 1.0);
    a[k + 2] = f32::NAN; // row 1
    a[3 * k + 4] = f32::INFINITY; // row 3
    let got = dev
        .tensor(&a, &[m, k])
        .unwrap()
        .matmul(&dev.tensor(&b, &[k, n]).unwrap())
        .unwrap()
        .read()
        .await
        .unwrap();
    check(
        "matmul with NaN and inf",
        &|i| format!("out[{}][{}]", i / n, i % n),
        &got,
        &oracle::matmul(&a, &b, m, k, n),
    );
}

/// Transposed operands and the fused epilogue, against the same product in f64.
pub async fn matmul_options(dev: &Device) {
    use gpukit::{Activation, MatmulOptions};
    let (m, k, n) = (37, 70, 67);
    let mut rng = Rng::new(8300);
    let a = rng.vec(m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let bias = rng.vec(n, -1.0, 1.0);
    let tbias = dev.tensor(&bias, &[n]).unwrap();
    let acts = [
        None,
        Some(Activation::Relu),
        Some(Activation::Gelu),
        Some(Activation::GeluTanh),
        Some(Activation::Silu),
    ];
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        let sa = if ta { [k, m] } else { [m, k] };
        let sb = if tb { [n, k] } else { [k, n] };
        let xa = dev.tensor(&a, &sa).unwrap();
        let xb = dev.tensor(&b, &sb).unwrap();
        for (i, act) in acts.into_iter().enumerate() {
            let with_bias = i % 2 == 0;
            let options = MatmulOptions {
                transpose_a: ta,
                transpose_b: tb,
                bias: with_bias.then_some(&tbias),
                activation: act,
                ..MatmulOptions::default()
            };
            let y = xa.matmul_with(&xb, options).unwrap();
            assert_eq!(y.shape(), &[m, n]);
            let got = y.read().await.unwrap();
            let want = oracle::matmul_with(
                &a,
                &b,
                (m, k, n),
                (ta, tb),
                with_bias.then_some(&bias[..]),
                act.map(|a| a.as_unary()),
            );
            check(
                &format!("matmul ta={ta} tb={tb} bias={with_bias} act={act:?}"),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
        }
    }
    // linear: weight stored [out, in], batched input.
    let (bt, inp, outp) = (2, 33, 19);
    let x = rng.vec(bt * 5 * inp, -1.0, 1.0);
    let w = rng.vec(outp * inp, -1.0, 1.0);
    let c = rng.vec(outp, -1.0, 1.0);
    let y = dev
        .tensor(&x, &[bt, 5, inp])
        .unwrap()
        .linear(
            &dev.tensor(&w, &[outp, inp]).unwrap(),
            Some(&dev.tensor(&c, &[outp]).unwrap()),
            Some(Activation::Silu),
        )
        .unwrap();
    assert_eq!(y.shape(), &[bt, 5, outp]);
    let got = y.read().await.unwrap();
    let want = oracle::matmul_with(
        &x,
        &w,
        (bt * 5, inp, outp),
        (false, true),
        Some(&c),
        Some(gpukit::UnaryOp::Silu),
    );
    check(
        "linear [2, 5, 33] x [19, 33]^T + bias, silu",
        &|i| format!("flat {i}"),
        &got,
        &want,
    );
    // A few rows against a [n, k] weight take the GEMV kernel (and on the CPU the small-row
    // kernel, up to 32 rows): 1, 3 and 32 rows, and 2 x 4 rows of a batch with the weight
    // shared; k and n of no special size; every epilogue.
    for (ci, (lead, k, n)) in [
        (vec![1usize], 1000usize, 77usize),
        (vec![3], 96, 13),
        (vec![2, 4], 257, 9),
        (vec![32], 70, 67),
    ]
    .into_iter()
    .enumerate()
    {
        let (rows, x, w, c) = linear_inputs(8400 + ci as u64, &lead, k, n);
        let mut shape = lead.clone();
        shape.push(k);
        let tx = dev.tensor(&x, &shape).unwrap();
        let (tw, tc) = (
            dev.tensor(&w, &[n, k]).unwrap(),
            dev.tensor(&c, &[n]).unwrap(),
        );
        for (ai, act) in acts.into_iter().enumerate() {
            let with_bias = ai % 2 == 1;
            let y = tx.linear(&tw, with_bias.then_some(&tc), act).unwrap();
            let mut out_shape = lead.clone();
            out_shape.push(n);
            assert_eq!(y.shape(), out_shape.as_slice());
            let want = oracle::matmul_with(
                &x,
                &w,
                (rows, k, n),
                (false, true),
                with_bias.then_some(&c[..]),
                act.map(|a| a.as_unary()),
            );
            check(
                &format!("gemv {lead:?} x [{n}, {k}]^T bias={with_bias} act={act:?}"),
                &|i| format!("{i}"),
                &y.read().await.unwrap(),
                &want,
            );
        }
    }
    // A few rows against a weight stored [k, n] (on an AVX-512 CPU, `matmul_kn`'s tiles of 8
    // rows by 48 columns): every count of rows in a last tile, columns just short of and past
    // a panel, a weight column slice (a view at an offset), every epilogue.
    for (ci, (m, k, n)) in [
        (1usize, 130usize, 49usize),
        (7, 33, 48),
        (15, 384, 47),
        (32, 9, 100),
    ]
    .into_iter()
    .enumerate()
    {
        let mut rng = Rng::new(8450 + ci as u64);
        let (x, w, c) = (
            rng.vec(m * k, -1.0, 1.0),
            rng.vec(k * (n + 5), -1.0, 1.0),
            rng.vec(n, -1.0, 1.0),
        );
        let tx = dev.tensor(&x, &[m, k]).unwrap();
        let whole = dev.tensor(&w, &[k, n + 5]).unwrap();
        // Columns 3..n + 3 of the wider weight.
        let tw = whole.slice(1, 3..n + 3).unwrap();
        let wn: Vec<f32> = (0..k * n)
            .map(|i| w[(i / n) * (n + 5) + 3 + i % n])
            .collect();
        let tc = dev.tensor(&c, &[n]).unwrap();
        for (ai, act) in acts.into_iter().enumerate() {
            let with_bias = ai % 2 == 0;
            let options = MatmulOptions {
                bias: with_bias.then_some(&tc),
                activation: act,
                ..Default::default()
            };
            let y = tx.matmul_with(&tw, options).unwrap();
            assert_eq!(y.shape(), &[m, n]);
            let want = oracle::matmul_with(
                &x,
                &wn,
                (m, k, n),
                (false, false),
                with_bias.then_some(&c[..]),
                act.map(|a| a.as_unary()),
            );
            check(
                &format!("[{m}, {k}] x [{k}, {n}] (a column slice) bias={with_bias} act={act:?}"),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &y.read().await.unwrap(),
                &want,
            );
        }
    }
    // A bias of the wrong length names both shapes.
    let e = dev.tensor(&a, &[m, k]).unwrap().matmul_with(
        &dev.tensor(&b, &[k, n]).unwrap(),
        MatmulOptions {
            bias: Some(&dev.tensor(&bias[..5], &[5]).unwrap()),
            ..Default::default()
        },
    );
    assert!(matches!(e.unwrap_err(), Error::ShapeMismatch { .. }));
}

/// Every tile configuration the autotuner may pick, pinned, on sizes that are multiples of
/// none of them (with transposes, bias and activation); then `Precision::F16` against the f64
/// product of the unrounded inputs with the f16 tolerance; then an unsupported tile.
pub async fn matmul_tiles_and_f16(dev: &Device) {
    use gpukit::{Activation, MatmulOptions, MatmulTile, Precision};
    let (m, k, n) = (131, 70, 259);
    let mut rng = Rng::new(8500);
    let a = rng.vec(m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let bias = rng.vec(n, -1.0, 1.0);
    let tbias = dev.tensor(&bias, &[n]).unwrap();
    for (i, tile) in MatmulTile::CANDIDATES.into_iter().enumerate() {
        let (ta, tb) = (i % 2 == 1, i % 3 == 0);
        let (sa, sb) = (
            if ta { [k, m] } else { [m, k] },
            if tb { [n, k] } else { [k, n] },
        );
        let (xa, xb) = (dev.tensor(&a, &sa).unwrap(), dev.tensor(&b, &sb).unwrap());
        // TF32 and bf16 (CUDA's tensor-core precisions) on the first tile only: elsewhere
        // they run the f32 kernel, which the other tiles check already.
        let precisions: &[Precision] = if i == 0 {
            &[
                Precision::F32,
                Precision::F16,
                Precision::Tf32,
                Precision::Bf16,
            ]
        } else {
            &[Precision::F32, Precision::F16]
        };
        for &precision in precisions {
            let options = MatmulOptions {
                transpose_a: ta,
                transpose_b: tb,
                bias: Some(&tbias),
                activation: Some(Activation::Gelu),
                precision,
                tile: Some(tile),
            };
            let got = xa.matmul_with(&xb, options).unwrap().read().await.unwrap();
            let want = oracle::matmul_with(
                &a,
                &b,
                (m, k, n),
                (ta, tb),
                Some(&bias),
                Some(gpukit::UnaryOp::Gelu),
            );
            let want = match precision {
                Precision::F32 => want,
                // TF32 keeps f16's 10 mantissa bits (with f32's range).
                Precision::F16 | Precision::Tf32 => oracle::as_f16_tolerance(want),
                Precision::Bf16 => oracle::as_bf16_tolerance(want),
            };
            check(
                &format!("matmul tile {tile} {precision:?} ta={ta} tb={tb}"),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
        }
    }
    // f16 through the autotuner's choice, with k long enough for many k tiles, batched.
    let (bt, m, k, n) = (2, 65, 1000, 33);
    let a = rng.vec(bt * m * k, -1.0, 1.0);
    let b = rng.vec(k * n, -1.0, 1.0);
    let options = MatmulOptions {
        precision: Precision::F16,
        ..MatmulOptions::default()
    };
    let got = dev
        .tensor(&a, &[bt, m, k])
        .unwrap()
        .matmul_with(&dev.tensor(&b, &[k, n]).unwrap(), options)
        .unwrap()
        .read()
        .await
        .unwrap();
    for e in 0..bt {
        let want = oracle::as_f16_tolerance(oracle::matmul(&a[e * m * k..], &b, m, k, n));
        check(
            &format!("matmul f16 batch entry {e} [{m}, {k}] x [{k}, {n}]"),
            &|i| format!("out[{}][{}]", i / n, i % n),
            &got[e * m * n..(e + 1) * m * n],
            &want,
        );
    }
    let x = dev.tensor(&[1.0; 4], &[2, 2]).unwrap();
    let bad = MatmulOptions {
        tile: Some(MatmulTile::new(3, 4, 16)),
        ..MatmulOptions::default()
    };
    let e = x.matmul_with(&x, bad).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("tile"), "{e}");
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

/// An f16 or bf16 weight under f32 rows (as a model keeps its linears in half precision):
/// the product of the rounded weight, whether the backend reads the weight as stored (the
/// CPU's few-row product with AVX-512: up to 32 rows, k from 128) or widens it first; edge
/// tiles, row tails past 16, a bias and an activation, 40 rows past the few-row path, an
/// empty weight, the widening's edge values (subnormal, largest, infinite and NaN halves), each
/// with the weight stored `[n, k]` (read transposed) and `[k, n]`, and batched weights not
/// transposed.
pub async fn matmul_half_weights(dev: &Device) {
    use gpukit::{Activation, DType};
    for dtype in [DType::F16, DType::BF16] {
        let round = |x: f32| match dtype {
            DType::F16 => half::f16::from_f32(x).to_f32(),
            _ => half::bf16::from_f32(x).to_f32(),
        };
        for (ci, (lead, k, n)) in [
            (vec![1usize], 128usize, 7usize),
            (vec![5], 131, 9),
            (vec![2, 7], 384, 33),
            (vec![32], 200, 5),
            (vec![40], 128, 3),
            // No output columns (an empty weight), with a bias.
            (vec![3], 128, 0),
        ]
        .into_iter()
        .enumerate()
        {
            let (rows, x, w, c) = linear_inputs(8500 + ci as u64, &lead, k, n);
            let mut shape = lead.clone();
            shape.push(k);
            let tx = dev.tensor(&x, &shape).unwrap();
            let tw = dev.tensor(&w, &[n, k]).unwrap().cast(dtype).unwrap();
            let tc = dev.tensor(&c, &[n]).unwrap();
            let (with_bias, act) = match ci % 3 {
                0 => (false, None),
                1 => (true, None),
                _ => (true, Some(Activation::Silu)),
            };
            let y = tx.linear(&tw, with_bias.then_some(&tc), act).unwrap();
            assert_eq!(y.dtype(), DType::F32);
            let got = y.read().await.unwrap();
            let rounded: Vec<f32> = w.iter().map(|&v| round(v)).collect();
            let want = oracle::matmul_with(
                &x,
                &rounded,
                (rows, k, n),
                (false, true),
                with_bias.then_some(&c[..]),
                act.map(|_| gpukit::UnaryOp::Silu),
            );
            check(
                &format!("{} weight: {lead:?} x {k} by [{n}, {k}]^T", dtype.name()),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
            // The same weight stored `[k, n]` (a model's transposed copy, which the CPU reads
            // as stored with AVX-512 for up to 32 rows).
            let w_kn: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
            let tkn = dev.tensor(&w_kn, &[k, n]).unwrap().cast(dtype).unwrap();
            let options = gpukit::MatmulOptions {
                bias: with_bias.then_some(&tc),
                activation: act,
                ..Default::default()
            };
            let got = tx.matmul_with(&tkn, options).unwrap().read().await.unwrap();
            check(
                &format!("{} weight: {lead:?} x {k} by [{k}, {n}]", dtype.name()),
                &|i| format!("out[{}][{}]", i / n, i % n),
                &got,
                &want,
            );
        }
        // The weight's edges as the backends widen them: subnormal halves (a whole column),
        // the largest f16, -0, a value f16 flushes to zero, and columns with an infinity and
        // a NaN.
        let (k, n) = (130, 6);
        let (_, x, mut w, _) = linear_inputs(8510, &[3], k, n);
        for (i, v) in [3.0e-6, -5.0e-7, 65504.0, -0.0, 1.0e-30, -7.0e-5]
            .into_iter()
            .enumerate()
        {
            w[i * 7] = v;
        }
        // Column 1's weights all subnormal in f16: flushed, it would read as zero.
        for v in &mut w[k..2 * k] {
            *v *= 5.0e-5;
        }
        w[4 * k + 9] = f32::INFINITY;
        w[5 * k + 100] = f32::NAN;
        let rounded: Vec<f32> = w.iter().map(|&v| round(v)).collect();
        let tw = dev.tensor(&w, &[n, k]).unwrap().cast(dtype).unwrap();
        let w_kn: Vec<f32> = (0..k * n).map(|i| w[(i % n) * k + i / n]).collect();
        let tkn = dev.tensor(&w_kn, &[k, n]).unwrap().cast(dtype).unwrap();
        for rows in [1usize, 3] {
            let tx = dev.tensor(&x[..rows * k], &[rows, k]).unwrap();
            let got = tx.linear(&tw, None, None).unwrap().read().await.unwrap();
            let want = oracle::matmul_with(
                &x[..rows * k],
                &rounded,
                (rows, k, n),
                (false, true),
                None,
                None,
            );
            let ctx = format!("{} weight's edge values, {rows} rows", dtype.name());
            check(&ctx, &|i| format!("out[{}][{}]", i / n, i % n), &got, &want);
            let got = tx.matmul(&tkn).unwrap().read().await.unwrap();
            let ctx = format!("{} [k, n] weight's edge values, {rows} rows", dtype.name());
            check(&ctx, &|i| format!("out[{}][{}]", i / n, i % n), &got, &want);
        }
        // A plain `[batch, k, n]` weight (not transposed), one per batch entry.
        let (batch, m, k, n) = (3, 5, 40, 6);
        let mut rng = Rng::new(8520);
        let (a, b) = (
            rng.vec(batch * m * k, -1.0, 1.0),
            rng.vec(batch * k * n, -1.0, 1.0),
        );
        let rounded: Vec<f32> = b.iter().map(|&v| round(v)).collect();
        let ta = dev.tensor(&a, &[batch, m, k]).unwrap();
        let tb = dev.tensor(&b, &[batch, k, n]).unwrap().cast(dtype).unwrap();
        let got = ta.matmul(&tb).unwrap().read().await.unwrap();
        let want: Vec<_> = (0..batch)
            .flat_map(|e| oracle::matmul(&a[e * m * k..], &rounded[e * k * n..], m, k, n))
            .collect();
        let ctx = format!("batched {} weights [{batch}, {k}, {n}]", dtype.name());
        check(&ctx, &|i| format!("out[{i}]"), &got, &want);
    }
}

/// A linear layer's random operands for rows of shape `lead` (their count, x, the `[n, k]`
/// weight, the bias).
fn linear_inputs(
    seed: u64,
    lead: &[usize],
    k: usize,
    n: usize,
) -> (usize, Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows: usize = lead.iter().product();
    let mut rng = Rng::new(seed);
    let x = rng.vec(rows * k, -1.0, 1.0);
    let w = rng.vec(n * k, -1.0, 1.0);
    (rows, x, w, rng.vec(n, -1.0, 1.0))
}
