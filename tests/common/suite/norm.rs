//! layer_norm and rms_norm.

use super::*;

/// layernorm and rmsnorm, with and without weight and bias, rows shorter and longer than a
/// workgroup, a constant row, a NaN row, and bad arguments.
pub async fn norms(dev: &Device) {
    let shapes: [&[usize]; 6] = [
        &[1, 1],
        &[3, 7],
        &[37, 129],
        &[4, 4097],
        &[2, 65537],
        &[0, 5],
    ];
    for (si, shape) in shapes.into_iter().enumerate() {
        let cols = *shape.last().unwrap();
        let n: usize = shape.iter().product();
        let seed = 9000 + si as u64;
        let mut rng = Rng::new(seed);
        let mut x = rng.vec(n, -3.0, 5.0);
        if n >= 2 * cols && cols > 1 {
            x[..cols].fill(1.5); // a constant row: layernorm gives the bias
            x[cols + cols / 2] = f32::NAN; // the second row is NaN throughout
        }
        let w = rng.vec(cols, 0.5, 2.0);
        let b = rng.vec(cols, -1.0, 1.0);
        let t = dev.tensor(&x, shape).unwrap();
        let (tw, tb) = (
            dev.tensor(&w, &[cols]).unwrap(),
            dev.tensor(&b, &[cols]).unwrap(),
        );
        for rms in [false, true] {
            for (wi, (weight, bias)) in [
                (None, None),
                (Some(&tw), None),
                (Some(&tw), Some(&tb)),
                (None, Some(&tb)),
            ]
            .into_iter()
            .enumerate()
            {
                let y = if rms {
                    t.rms_norm(weight, bias, 1e-5)
                } else {
                    t.layer_norm(weight, bias, 1e-5)
                }
                .unwrap();
                assert_eq!(y.shape(), shape);
                let got = y.read().await.unwrap();
                let (wv, bv) = (weight.map(|_| &w[..]), bias.map(|_| &b[..]));
                let want: Vec<(f64, Tol)> = widen(&x)
                    .chunks(cols.max(1))
                    .flat_map(|row| {
                        let (v, tol) = oracle::norm(row, rms, wv, bv, 1e-5);
                        v.into_iter().map(move |v| (v, tol))
                    })
                    .collect();
                let ctx = format!(
                    "{} {shape:?} weights#{wi} seed {seed}",
                    if rms { "rms_norm" } else { "layer_norm" }
                );
                check(&ctx, &|i| format!("{:e}", x[i]), &got, &want);
            }
        }
    }
    let t = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    let short = dev.tensor(&[1.0; 2], &[2]).unwrap();
    assert!(matches!(
        t.layer_norm(Some(&short), None, 1e-5).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        t.rms_norm(None, None, f32::NAN).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        dev.scalar(1.0)
            .unwrap()
            .layer_norm(None, None, 1e-5)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
}
