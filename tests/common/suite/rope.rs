//! RoPE and its tables.

use super::*;

/// RoPE in both layouts against rotations computed in f64, and its table checks.
pub async fn rope(dev: &Device) {
    let (b, h, seq, d) = (2, 3, 5, 8);
    let offset = 3;
    let x = Rng::new(9301).vec(b * h * seq * d, -2.0, 2.0);
    let tx = dev.tensor(&x, &[b, h, seq, d]).unwrap();
    let (cos, sin) = dev.rope_tables(seq, d, 10000.0, offset).unwrap();
    for layout in [
        gpukit::RopeLayout::Interleaved,
        gpukit::RopeLayout::HalfSplit,
    ] {
        let got = tx.rope(&cos, &sin, layout).unwrap().read().await.unwrap();
        let mut want = vec![0.0f64; x.len()];
        for (row, chunk) in x.chunks(d).enumerate() {
            let p = (row % seq + offset) as f64;
            for j in 0..d / 2 {
                let angle = p * 10000f64.powf(-2.0 * j as f64 / d as f64);
                let (i0, i1) = match layout {
                    gpukit::RopeLayout::Interleaved => (2 * j, 2 * j + 1),
                    gpukit::RopeLayout::HalfSplit => (j, j + d / 2),
                };
                let (x0, x1) = (chunk[i0] as f64, chunk[i1] as f64);
                want[row * d + i0] = x0 * angle.cos() - x1 * angle.sin();
                want[row * d + i1] = x0 * angle.sin() + x1 * angle.cos();
            }
        }
        let tol = Tol {
            atol: 2e-6,
            rtol: 1e-5,
        };
        let want: Vec<(f64, Tol)> = want.into_iter().map(|w| (w, tol)).collect();
        check(
            &format!("rope {layout:?}"),
            &|i| format!("{:e}", x[i]),
            &got,
            &want,
        );
    }
    assert!(
        tx.rope(&sin, &cos, gpukit::RopeLayout::HalfSplit).is_ok(),
        "any [seq, dim/2] tables are accepted"
    );
    let (c2, s2) = dev.rope_tables(seq + 1, d, 10000.0, 0).unwrap();
    assert!(matches!(
        tx.rope(&c2, &s2, gpukit::RopeLayout::HalfSplit)
            .unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    let odd = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    assert!(matches!(
        odd.rope(&cos, &sin, gpukit::RopeLayout::Interleaved)
            .unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(dev.rope_tables(4, 7, 10000.0, 0).is_err());
}
