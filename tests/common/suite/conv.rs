//! conv2d.

use super::*;

/// conv2d (padding, stride, dilation, groups, depthwise, 1x1, bias) against direct loops in
/// f64.
pub async fn conv(dev: &Device) {
    use gpukit::Conv2dOptions;
    // (n, c, h, w, o, kh, kw, stride, padding, dilation, groups, bias)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 2],
        usize,
        bool,
    );
    let cases: [Case; 6] = [
        (2, 3, 9, 11, 5, 3, 3, [1, 1], [1, 1], [1, 1], 1, true),
        (1, 2, 13, 10, 3, 3, 2, [2, 1], [0, 1], [2, 1], 1, false),
        (1, 6, 7, 7, 9, 3, 3, [1, 2], [1, 0], [1, 1], 3, true),
        (2, 4, 8, 8, 4, 3, 3, [1, 1], [1, 1], [1, 1], 4, false),
        (1, 16, 5, 5, 70, 1, 1, [1, 1], [0, 0], [1, 1], 1, true),
        (2, 8, 20, 20, 16, 3, 3, [1, 1], [1, 1], [1, 1], 1, true),
    ];
    for (ci, (n, c, h, w, o, kh, kw, stride, padding, dilation, groups, with_bias)) in
        cases.into_iter().enumerate()
    {
        let seed = 9700 + ci as u64;
        let mut rng = Rng::new(seed);
        let cg = c / groups;
        let x = rng.vec(n * c * h * w, -1.0, 1.0);
        let wt = rng.vec(o * cg * kh * kw, -1.0, 1.0);
        let b = rng.vec(o, -1.0, 1.0);
        let opts = Conv2dOptions {
            stride,
            padding,
            dilation,
            groups,
        };
        let tb = dev.tensor(&b, &[o]).unwrap();
        let y = dev
            .tensor(&x, &[n, c, h, w])
            .unwrap()
            .conv2d(
                &dev.tensor(&wt, &[o, cg, kh, kw]).unwrap(),
                with_bias.then_some(&tb),
                opts,
            )
            .unwrap();
        let oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
        let ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
        assert_eq!(y.shape(), &[n, o, oh, ow]);
        let got = y.read().await.unwrap();
        let mut want = Vec::new();
        for ni in 0..n {
            for oc in 0..o {
                let g = oc / (o / groups);
                for oy in 0..oh {
                    for ox in 0..ow {
                        let (mut acc, mut mag) =
                            (if with_bias { b[oc] as f64 } else { 0.0 }, 0.0f64);
                        for ci2 in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * stride[0] + ky * dilation[0]) as isize
                                        - padding[0] as isize;
                                    let ix = (ox * stride[1] + kx * dilation[1]) as isize
                                        - padding[1] as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= w as isize {
                                        continue;
                                    }
                                    let xv = x[((ni * c + g * cg + ci2) * h + iy as usize) * w
                                        + ix as usize]
                                        as f64;
                                    let t = xv * wt[((oc * cg + ci2) * kh + ky) * kw + kx] as f64;
                                    acc += t;
                                    mag += t.abs();
                                }
                            }
                        }
                        want.push((
                            acc,
                            Tol {
                                atol: 1e-4 * mag + 1e-6,
                                rtol: 1e-6,
                            },
                        ));
                    }
                }
            }
        }
        check(
            &format!("conv2d case {ci} seed {seed}"),
            &|i| format!("flat {i}"),
            &got,
            &want,
        );
    }
}
