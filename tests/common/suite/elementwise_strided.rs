//! Elementwise ops that read their operands through strides: views, broadcasts, and SwiGLU
//! over the halves of the last axis.

use super::*;

/// Unary and binary ops on operands read through strides, with no copy first: permuted views,
/// slices (an offset), operands broadcast along inner axes and `broadcast_to` views, from 1 to
/// 8 axes (the kernels' and views' limit; 9 broadcast axes are expanded first), with NaN and
/// infinities among the values; each against the oracle on the values gathered on the host.
pub async fn strided_elementwise(dev: &Device) {
    use super::layout::{gather, row_major};
    let mut rng = Rng::new(61_000);
    for case in 0..16 {
        let rank = 1 + case % 8;
        let shape: Vec<usize> = (0..rank)
            .map(|_| 1 + (rng.next_u64() % 3) as usize)
            .collect();
        let n: usize = shape.iter().product();
        let mut data = rng.vec(n, -3.0, 3.0);
        for (j, &e) in EDGES.iter().enumerate().take(n.min(4)) {
            data[(j * 7) % n] = e;
        }
        let t = dev.tensor(&data, &shape).unwrap();
        let ctx = format!("case {case} shape {shape:?}");
        // Axes reversed: a view whose innermost stride is the largest.
        let axes: Vec<usize> = (0..rank).rev().collect();
        let base = row_major(&shape);
        let p_shape: Vec<usize> = axes.iter().map(|&a| shape[a]).collect();
        let p_strides: Vec<usize> = axes.iter().map(|&a| base[a]).collect();
        let p = t.permute(&axes).unwrap();
        let host = gather(&data, &p_shape, &p_strides, 0);
        for op in UnaryOp::ALL {
            let y = p.unary(op).unwrap();
            assert!(y.is_contiguous());
            assert_eq!(y.shape(), &p_shape[..]);
            let want: Vec<(f64, Tol)> = host.iter().map(|&v| oracle::unary(op, v as f64)).collect();
            let ctx = format!("{} of a view, {ctx}", op.name());
            check(
                &ctx,
                &|i| format!("{:e}", host[i]),
                &y.read().await.unwrap(),
                &want,
            );
        }
        // A slice of the view (an offset) with a second operand broadcast along axis 0 of the
        // view: [1, rest..] of fresh values.
        let start = usize::from(p_shape[0] > 1);
        let s = p.slice(0, start..p_shape[0]).unwrap();
        let mut s_shape = p_shape.clone();
        s_shape[0] -= start;
        let s_host = gather(&data, &s_shape, &p_strides, start * p_strides[0]);
        let mut r_shape = s_shape.clone();
        r_shape[0] = 1;
        let r_n: usize = r_shape.iter().product();
        let r_data = rng.vec(r_n, 0.5, 2.0);
        let r = dev.tensor(&r_data, &r_shape).unwrap();
        let inner = r_n.max(1);
        for op in BinaryOp::ALL {
            for swap in [false, true] {
                let y = match swap {
                    false => s.binary(op, &r).unwrap(),
                    true => r.binary(op, &s).unwrap(),
                };
                assert_eq!(y.shape(), &s_shape[..]);
                let want: Vec<(f64, Tol)> = s_host
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        let w = r_data[i % inner] as f64;
                        match swap {
                            false => oracle::binary(op, v as f64, w),
                            true => oracle::binary(op, w, v as f64),
                        }
                    })
                    .collect();
                let ctx = format!("{} slice/row swap {swap}, {ctx}", op.name());
                check(
                    &ctx,
                    &|i| format!("{:e}", s_host[i]),
                    &y.read().await.unwrap(),
                    &want,
                );
            }
        }
    }
    // An operand broadcast along a middle axis, and a `broadcast_to` view, on contiguous data.
    let (a_data, b_data) = (rng.vec(3 * 4 * 5, -2.0, 2.0), rng.vec(3 * 5, 0.5, 2.0));
    let a = dev.tensor(&a_data, &[3, 4, 5]).unwrap();
    let b = dev.tensor(&b_data, &[3, 1, 5]).unwrap();
    let got = a.div(&b).unwrap().read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..60)
        .map(|i| {
            oracle::binary(
                BinaryOp::Div,
                a_data[i] as f64,
                b_data[(i / 20) * 5 + i % 5] as f64,
            )
        })
        .collect();
    check("[3,4,5] / [3,1,5]", &|i| format!("{i}"), &got, &want);
    let wide = b.broadcast_to(&[3, 4, 5]).unwrap();
    assert!(!wide.is_contiguous());
    let got = wide.sub(&a).unwrap().read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..60)
        .map(|i| {
            oracle::binary(
                BinaryOp::Sub,
                b_data[(i / 20) * 5 + i % 5] as f64,
                a_data[i] as f64,
            )
        })
        .collect();
    check("broadcast_to view - a", &|i| format!("{i}"), &got, &want);
    // Nine axes broadcast both ways: past the limit of views and strided kernels, a clear
    // error (repetition, as [9 axes] + [last axes], still works).
    let x = dev
        .tensor(&rng.vec(32, -2.0, 2.0), &[2, 1, 2, 1, 2, 1, 2, 1, 2])
        .unwrap();
    let y = dev
        .tensor(&rng.vec(16, -2.0, 2.0), &[1, 2, 1, 2, 1, 2, 1, 2, 1])
        .unwrap();
    let e = x.mul(&y).unwrap_err();
    assert!(e.to_string().contains("8 axes"), "{e}");
    let row = dev.tensor(&[0.5, 2.0], &[2]).unwrap();
    let got = x.mul(&row).unwrap().read().await.unwrap();
    let xs = x.read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..32)
        .map(|i| oracle::binary(BinaryOp::Mul, xs[i] as f64, [0.5, 2.0][i % 2]))
        .collect();
    check("9 axes times a row", &|i| format!("{i}"), &got, &want);
    // Empty views and a zero-size broadcast give empty results.
    let empty = a.slice(1, 2..2).unwrap();
    assert_eq!(empty.exp().unwrap().shape(), &[3, 0, 5]);
    assert_eq!(
        empty.add(&b).unwrap().read().await.unwrap(),
        Vec::<f32>::new()
    );
}

/// SwiGLU (`silu` of the last axis's first half times its second half) against f64: odd
/// halves, several leading axes, long rows, empty tensors, NaN, infinities and signed zeros,
/// a permuted view's input, f16 input; an odd last axis is refused.
pub async fn swiglu(dev: &Device) {
    let mut rng = Rng::new(62_000);
    let edges = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-30];
    let shapes: [&[usize]; 7] = [
        &[2],
        &[1, 2],
        &[3, 14],
        &[2, 3, 514],
        &[2, 8194],
        &[0, 6],
        &[4, 0],
    ];
    for shape in shapes {
        let n: usize = shape.iter().product();
        let mut x = rng.vec(n, -4.0, 4.0);
        for (j, &e) in edges.iter().enumerate().take(n) {
            x[(j * 13) % n] = e;
        }
        let y = dev.tensor(&x, shape).unwrap().swiglu().unwrap();
        let h = shape[shape.len() - 1] / 2;
        let mut want_shape = shape.to_vec();
        *want_shape.last_mut().unwrap() = h;
        assert_eq!(y.shape(), &want_shape[..], "swiglu {shape:?}");
        let want: Vec<(f64, Tol)> = (0..n / 2)
            .map(|i| {
                let (r, c) = (i / h, i % h);
                let (a, b) = (x[r * 2 * h + c] as f64, x[r * 2 * h + h + c] as f64);
                let (s, t) = oracle::unary(UnaryOp::Silu, a);
                let tol = Tol {
                    atol: t.atol * b.abs().max(1.0),
                    rtol: t.rtol + 1e-6,
                };
                (s * b, tol)
            })
            .collect();
        let ctx = format!("swiglu {shape:?}");
        check(&ctx, &|i| format!("{i}"), &y.read().await.unwrap(), &want);
    }
    // A view's input: the transpose of [6, 3] is [3, 6], whose halves are 3 wide.
    let x = rng.vec(18, -3.0, 3.0);
    let v = dev.tensor(&x, &[6, 3]).unwrap().transpose(0, 1).unwrap();
    let got = v.swiglu().unwrap().read().await.unwrap();
    let want: Vec<(f64, Tol)> = (0..9)
        .map(|i| {
            let (r, c) = (i / 3, i % 3);
            let (a, b) = (x[c * 3 + r] as f64, x[(c + 3) * 3 + r] as f64);
            let (s, t) = oracle::unary(UnaryOp::Silu, a);
            (
                s * b,
                Tol {
                    atol: t.atol * b.abs().max(1.0),
                    rtol: t.rtol + 1e-6,
                },
            )
        })
        .collect();
    check(
        "swiglu of a transposed view",
        &|i| format!("{i}"),
        &got,
        &want,
    );
    // f16 input gives f16 output, computed as f32 and rounded.
    let x = rng.vec(8, -2.0, 2.0);
    let half = dev
        .tensor(&x, &[2, 4])
        .unwrap()
        .cast(gpukit::DType::F16)
        .unwrap();
    let y = half.swiglu().unwrap();
    assert_eq!(
        (y.dtype(), y.shape()),
        (gpukit::DType::F16, &[2usize, 2][..])
    );
    let got = y.cast(gpukit::DType::F32).unwrap().read().await.unwrap();
    for (i, g) in got.iter().enumerate() {
        let (r, c) = (i / 2, i % 2);
        let q = |v: f32| gpukit::f16::from_f32(v).to_f64();
        let (a, b) = (q(x[r * 4 + c]), q(x[r * 4 + 2 + c]));
        let w = a / (1.0 + (-a).exp()) * b;
        assert!(
            (*g as f64 - w).abs() <= 2e-3 * w.abs().max(1.0),
            "f16 swiglu {i}: {g} vs {w}"
        );
    }
    for bad in [&[3usize][..], &[2, 5]] {
        let e = dev
            .tensor(&vec![1.0; bad.iter().product()], bad)
            .unwrap()
            .swiglu();
        assert!(
            matches!(e, Err(Error::ShapeMismatch { .. })),
            "{bad:?}: {e:?}"
        );
    }
    let scalar = dev.tensor(&[1.0], &[]).unwrap().swiglu();
    assert!(matches!(scalar, Err(Error::InvalidArgument { .. })));
}
