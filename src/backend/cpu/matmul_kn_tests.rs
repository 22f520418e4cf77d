//! Tests of `matmul_kn`: each kernel this CPU runs against an f64 product.

use super::*;

/// Against an f64 product, each kernel this CPU runs (f32, f16 and bf16 weights): every
/// row count of a last tile (8-row and 6-row tiles), panels cut at every alignment of the
/// weight (the narrower first panel included), columns past a whole
/// panel, strided rows of `a`, `b` and `c`, accumulating onto `c`, an activation over the
/// panels, a NaN weight reaching exactly its column, and `c` untouched past `n`.
#[test]
fn matches_f64_product() {
    let mut ran = 0;
    if has_avx512() {
        check("AVX-512 f32", avx512::<f32>(), |v| v);
        check("AVX-512 f16", avx512::<F16>(), |v| {
            F16(half::f16::from_f32(v).to_bits())
        });
        check("AVX-512 bf16", avx512::<Bf16>(), |v| {
            Bf16(half::bf16::from_f32(v).to_bits())
        });
        ran += 1;
    }
    if has_avx2() {
        check("AVX2 f32", avx2::<f32>(), |v| v);
        check("AVX2 f16", avx2::<F16>(), |v| {
            F16(half::f16::from_f32(v).to_bits())
        });
        check("AVX2 bf16", avx2::<Bf16>(), |v| {
            Bf16(half::bf16::from_f32(v).to_bits())
        });
        ran += 1;
    }
    if ran == 0 {
        eprintln!("matmul_kn: this CPU has neither AVX-512 nor AVX2 + FMA + F16C; not used here");
    }
}

/// [`matches_f64_product`] for one kernel, its weights made by `to_w`.
fn check<W: Weight + Sync>(name: &str, kernel: Kernel<W>, to_w: impl Fn(f32) -> W) {
    let value = |i: usize, s: usize| ((i * 37 + s * 11) % 101) as f32 / 50.0 - 1.0;
    let mut cases = 0;
    for (m, n, k) in [
        (1, 1, 1),
        (3, 47, 5),
        (7, 48, 130),
        (8, 49, 64),
        (9, 100, 33),
        (15, 96, 40),
        (17, 160, 7),
        (32, 200, 20),
        (4, 20, 9),
        (12, 33, 17),
    ] {
        for off in [0usize, 1, 4, 12] {
            for (ars, brs, ldc) in [(k, n, n), (k + 3, n + 16, n + 5)] {
                for accumulate in [false, true] {
                    let a: Vec<f32> = (0..m * ars).map(|i| value(i, 1)).collect();
                    let mut b: Vec<W> = (0..off + k * brs).map(|i| to_w(value(i, 2))).collect();
                    if m > 4 && n > 3 && k > 2 {
                        b[off + 2 * brs + 3] = to_w(f32::NAN);
                    }
                    let b = &b[off..];
                    let c0: Vec<f32> = (0..m * ldc).map(|i| value(i, 3)).collect();
                    let mut c = c0.clone();
                    // Half the cases with an activation applied to the panels.
                    let relu = off % 2 == 1;
                    let act = relu.then_some(UnaryOp::Relu);
                    product_with(
                        kernel, m, n, k, &a, ars, b, brs, &mut c, ldc, accumulate, act,
                    );
                    for i in 0..m {
                        for j in 0..n {
                            let mut want = if accumulate {
                                f64::from(c0[i * ldc + j])
                            } else {
                                0.0
                            };
                            let mut scale = want.abs();
                            for e in 0..k {
                                let w = f64::from(b[e * brs + j].value());
                                let p = f64::from(a[i * ars + e]) * w;
                                want += p;
                                scale += p.abs();
                            }
                            if relu && want < 0.0 {
                                want = 0.0;
                            }
                            let got = f64::from(c[i * ldc + j]);
                            let ok = if want.is_nan() {
                                got.is_nan()
                            } else {
                                (got - want).abs() <= 1e-5 * scale.max(1.0)
                            };
                            assert!(ok, "{name} {m}x{n}x{k} off {off} strides ({ars}, {brs}, {ldc}) acc {accumulate} relu {relu}: c[{i}][{j}] {got} want {want}");
                        }
                        // Past `n`, a row of `c` is untouched.
                        for j in n..ldc {
                            assert_eq!(c[i * ldc + j].to_bits(), c0[i * ldc + j].to_bits());
                        }
                    }
                    cases += 1;
                }
            }
        }
    }
    assert_eq!(cases, 10 * 4 * 2 * 2);
}
