//! 2-D max and average pooling.

use super::*;

/// Max and average pooling (NaN in a window, padding, odd strides) against f64 windows.
pub async fn pool(dev: &Device) {
    use gpukit::Pool2dOptions;
    let (n, c, h, w) = (2, 3, 9, 11);
    let mut x = Rng::new(9800).vec(n * c * h * w, -1.0, 1.0);
    x[5] = f32::NAN;
    let t = dev.tensor(&x, &[n, c, h, w]).unwrap();
    let pool = |kernel, stride, padding| Pool2dOptions {
        kernel,
        stride,
        padding,
    };
    for (max, opts) in [
        (true, pool([3, 3], [2, 2], [1, 1])),
        (false, pool([2, 2], [2, 2], [0, 0])),
        (false, pool([3, 2], [1, 2], [1, 1])),
        (true, pool([2, 3], [3, 1], [0, 0])),
    ] {
        let y = if max {
            t.max_pool2d(opts)
        } else {
            t.avg_pool2d(opts)
        }
        .unwrap();
        let oh = (h + 2 * opts.padding[0] - opts.kernel[0]) / opts.stride[0] + 1;
        let ow = (w + 2 * opts.padding[1] - opts.kernel[1]) / opts.stride[1] + 1;
        assert_eq!(y.shape(), &[n, c, oh, ow]);
        let mut want = Vec::new();
        for p in 0..n * c {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut vals = Vec::new();
                    for ky in 0..opts.kernel[0] {
                        for kx in 0..opts.kernel[1] {
                            let iy = (oy * opts.stride[0] + ky) as isize - opts.padding[0] as isize;
                            let ix = (ox * opts.stride[1] + kx) as isize - opts.padding[1] as isize;
                            if iy >= 0 && ix >= 0 && iy < h as isize && ix < w as isize {
                                vals.push(x[(p * h + iy as usize) * w + ix as usize] as f64);
                            }
                        }
                    }
                    let v = if max {
                        if vals.iter().any(|v| v.is_nan()) {
                            f64::NAN
                        } else {
                            vals.iter().copied().fold(f64::NEG_INFINITY, f64::max)
                        }
                    } else {
                        vals.iter().sum::<f64>() / (opts.kernel[0] * opts.kernel[1]) as f64
                    };
                    want.push((
                        v,
                        Tol {
                            atol: 1e-6,
                            rtol: 1e-6,
                        },
                    ));
                }
            }
        }
        check(
            &format!("{} pool {opts:?}", if max { "max" } else { "avg" }),
            &|i| format!("flat {i}"),
            &y.read().await.unwrap(),
            &want,
        );
    }
    let bad = Pool2dOptions {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [2, 0],
    };
    assert!(matches!(
        t.max_pool2d(bad).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    let wrong = dev.tensor(&[0.0; 2 * 2 * 3 * 3], &[2, 2, 3, 3]).unwrap();
    assert!(matches!(
        t.conv2d(&wrong, None, Default::default()).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
}
