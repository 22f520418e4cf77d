//! Device-wide behaviour: verification mode and device loss.

use super::*;

/// Verification mode on a fresh device of the same backend: every op family checked against
/// the CPU backend at the next wait, a batch and a compiled graph included, and the report
/// lists them.
pub async fn verification_mode(dev: &Device) {
    let fresh = match dev.info().backend {
        gpukit::Backend::Cpu => Device::cpu(),
        backend => Device::with_backend(backend).await.unwrap(),
    }
    .with_verification();
    let mut rng = Rng::new(9900);
    let x = fresh.tensor(&rng.vec(6 * 37, -2.0, 2.0), &[6, 37]).unwrap();
    let w = fresh.tensor(&rng.vec(5 * 37, -1.0, 1.0), &[5, 37]).unwrap();
    let y = x
        .linear(&w, None, Some(gpukit::Activation::Relu))
        .unwrap()
        .softmax()
        .unwrap()
        .layer_norm(None, None, 1e-5)
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .sum_last()
        .unwrap();
    y.read().await.unwrap();
    let q = fresh
        .tensor(&rng.vec(2 * 9 * 16, -1.0, 1.0), &[1, 2, 9, 16])
        .unwrap();
    let lens = [7u32];
    let opts = AttentionOptions {
        causal: true,
        key_lengths: Some(&lens),
        scale: None,
        lengths: None,
        layout: Default::default(),
        ..Default::default()
    };
    q.attention(&q, &q, opts).unwrap().read().await.unwrap();
    let mut b = fresh.batch();
    let v = b.upload(&rng.vec(100, -1.0, 1.0), &[100]).unwrap();
    let r = b.relu(v).unwrap();
    let s = b.sub(r, v).unwrap();
    b.output(s).unwrap();
    b.run().await.unwrap();
    let mut graph = b.compile().unwrap();
    graph.run(&[(v, &rng.vec(100, -1.0, 1.0))]).await.unwrap();
    let report = fresh.verification_report().expect("verification is on");
    let names: Vec<&str> = report.ops.iter().map(|o| o.op).collect();
    for op in [
        "matmul",
        "softmax",
        "layer_norm",
        "copy",
        "sum",
        "attention",
        "fused",
    ] {
        assert!(names.contains(&op), "{op} not checked: {names:?}");
    }
    assert!(report.ops.iter().all(|o| o.max_error <= 1.0), "{report:?}");
    assert!(
        dev.verification_report().is_none(),
        "the suite's own device is unaffected"
    );
}

/// A lost device: after `destroy`, every call on it and on its tensors is `DeviceLost` (ops,
/// uploads, reads, batches, synchronize), and a new device of the same backend opened in the
/// same process works.
pub async fn device_loss(dev: &Device) {
    let open = || async {
        match dev.info().backend {
            gpukit::Backend::Cpu => Device::cpu(),
            backend => Device::with_backend(backend).await.unwrap(),
        }
    };
    let doomed = open().await;
    let x = doomed.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    let y = x.relu().unwrap();
    let mut b = doomed.batch();
    let v = b.upload(&[1.0, 2.0], &[2]).unwrap();
    let r = b.relu(v).unwrap();
    b.output(r).unwrap();
    doomed.destroy();
    let lost = |what: &str, e: gpukit::Error| {
        assert!(e.is_device_lost(), "{what}: expected DeviceLost, got {e:?}");
    };
    lost("op", x.relu().unwrap_err());
    lost("binary op", x.add(&y).unwrap_err());
    lost("upload", doomed.tensor(&[1.0], &[1]).unwrap_err());
    lost("read", y.read().await.unwrap_err());
    lost("synchronize", doomed.synchronize().await.unwrap_err());
    lost("batch", b.run().await.unwrap_err());
    // Destroying twice is harmless.
    doomed.destroy();
    lost("read again", x.read().await.unwrap_err());
    drop((x, y, b));
    // A new device works.
    let fresh = open().await;
    let t = fresh.tensor(&[1.0, -2.0, 3.0], &[3]).unwrap();
    assert_eq!(t.relu().unwrap().read().await.unwrap(), vec![1.0, 0.0, 3.0]);
}
