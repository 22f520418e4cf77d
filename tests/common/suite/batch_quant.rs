//! Quantized products recorded in a batch: `matmul_quant` shape-checked at the call, and
//! `matmul_quant_with` with its options' operands as values, in f16 and f32.

use super::*;

/// A batch's quantized products against the eager op's.
pub async fn batch_quant(dev: &Device) {
    let mut rng = Rng::new(4321);
    // A quantized weight, shape-checked at the call.
    let (n, kq) = (5, 64);
    let wq = std::rc::Rc::new(
        dev.quantized(
            &oracle::quantize(&rng.vec(n * kq, -1.0, 1.0), gpukit::QuantFormat::Q8_0),
            gpukit::QuantFormat::Q8_0,
            n,
            kq,
        )
        .unwrap(),
    );
    let xq = rng.vec(3 * kq, -1.0, 1.0);
    let mut b = dev.batch();
    let bxq = b.upload(&xq, &[3, kq]).unwrap();
    let yq = b.matmul_quant(bxq, wq.clone()).unwrap();
    assert_eq!(b.shape(yq).unwrap(), &[3, n]);
    let wrong = b.upload(&[1.0; 30], &[3, 10]).unwrap();
    assert!(matches!(
        b.matmul_quant(wrong, wq.clone()).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    b.output(yq).unwrap();
    let want = dev
        .tensor(&xq, &[3, kq])
        .unwrap()
        .matmul_quant(&wq)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert_close(
        "batch matmul_quant",
        b.run().await.unwrap().get(yq).unwrap(),
        &want,
        1e-6,
    );

    // The options' operands as values, and the prompt path's precision: 40 rows (past every
    // backend's GEMV) normalised, multiplied in f16 and added to a residual, as the eager op
    // does with the same options (which the quantized suite checks against f64). In f32 the
    // product differs from f16's by far more than the tolerance.
    let m = 40;
    let (xr, res, norm) = (
        rng.vec(m * kq, -1.0, 1.0),
        rng.vec(m * n, -1.0, 1.0),
        rng.vec(kq, 0.5, 1.5),
    );
    let mut b = dev.batch();
    let (bx, bres, bnorm) = (
        b.upload(&xr, &[m, kq]).unwrap(),
        b.upload(&res, &[m, n]).unwrap(),
        b.upload(&norm, &[kq]).unwrap(),
    );
    let options = |precision| gpukit::QuantMatmulOptions {
        residual: Some(bres),
        rms_norm: Some((bnorm, 1e-5)),
        precision,
        ..Default::default()
    };
    let y16 = b
        .matmul_quant_with(bx, wq.clone(), options(Precision::F16))
        .unwrap();
    let y32 = b
        .matmul_quant_with(bx, wq.clone(), options(Precision::F32))
        .unwrap();
    b.output(y16).unwrap();
    b.output(y32).unwrap();
    let got = b.run().await.unwrap();
    let apart = (got.get(y16).unwrap().iter())
        .zip(got.get(y32).unwrap())
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(apart > 1e-4, "f16 and f32 products {apart} apart");
    let (tx, tres, tnorm) = (
        dev.tensor(&xr, &[m, kq]).unwrap(),
        dev.tensor(&res, &[m, n]).unwrap(),
        dev.tensor(&norm, &[kq]).unwrap(),
    );
    for (precision, value) in [(Precision::F16, y16), (Precision::F32, y32)] {
        let eager = gpukit::QuantMatmulOptions {
            residual: Some(&tres),
            rms_norm: Some((&tnorm, 1e-5)),
            precision,
            ..Default::default()
        };
        let want = tx
            .matmul_quant_with(&wq, eager)
            .unwrap()
            .read()
            .await
            .unwrap();
        assert_close(
            &format!("batch matmul_quant_with in {precision:?}"),
            got.get(value).unwrap(),
            &want,
            1e-6,
        );
    }
}
