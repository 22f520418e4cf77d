//! Errors that every op reports the same way on every backend.

use super::*;

/// Bad input gives the same clear errors on every backend, and the device stays usable.
pub async fn errors(dev: &Device) {
    let a = dev.tensor(&[1.0; 6], &[2, 3]).unwrap();
    let b = dev.tensor(&[1.0; 6], &[3, 2]).unwrap();
    let e = a.add(&b).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { .. }) && e.is_input(),
        "{e}"
    );
    assert!(
        e.to_string().contains("[2, 3]") && e.to_string().contains("[3, 2]"),
        "message names both shapes: {e}"
    );
    assert!(matches!(
        dev.tensor(&[1.0; 5], &[2, 3]).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        a.clip(1.0, 0.0).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        a.clip(f32::NAN, 0.0).unwrap_err(),
        Error::InvalidArgument { .. }
    ));
    assert!(matches!(
        a.reshape(&[4]).unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        a.read_scalar().await.unwrap_err(),
        Error::ShapeMismatch { .. }
    ));
    let scalar = dev.scalar(3.0).unwrap();
    assert!(scalar.softmax().is_err() && scalar.sum_last().is_err());
    let other = Device::cpu();
    let c = other.tensor(&[1.0; 6], &[2, 3]).unwrap();
    if !dev.info().backend.eq(&gpukit::Backend::Cpu) {
        assert!(matches!(
            a.add(&c).unwrap_err(),
            Error::DeviceMismatch { .. }
        ));
    }
    // Still usable after the errors.
    let r = a
        .reshape(&[6])
        .unwrap()
        .add(&scalar)
        .unwrap()
        .read()
        .await
        .unwrap();
    assert_eq!(r, vec![4.0; 6]);
    let mut out = vec![0.0; 2];
    assert!(dev.relu_slice(&[1.0, 2.0, 3.0], &mut out).await.is_err());
    dev.relu_slice(&[1.0, -2.0], &mut out).await.unwrap();
    assert_eq!(out, [1.0, 0.0]);
    assert_eq!(dev.sum_slice(&[1.0, 2.0, 3.5]).await.unwrap(), 6.5);
}

/// An axis that is valid beside a zero axis but whose tensor, without the zero, cannot exist:
/// its bytes exceed the address range on every target (2^62 natively, 2^30 on wasm32).
const HUGE: usize = usize::MAX / 4 + 1;

/// An axis whose square overflows `usize`.
const ROOT: usize = 1 << (usize::BITS / 2);

fn is_limit<T: std::fmt::Debug>(what: &str, r: gpukit::Result<T>) {
    match r {
        Err(e) if e.is_resource() || e.is_input() => {}
        other => panic!("{what}: expected a limit or input error, got {other:?}"),
    }
}

/// Shapes whose element counts or byte sizes overflow, and zero-element inputs with huge
/// outputs: each is an error before anything is allocated, on every backend.
pub async fn hostile_shapes(dev: &Device) {
    is_limit("[MAX, MAX]", dev.tensor(&[1.0], &[usize::MAX, usize::MAX]));
    is_limit("[ROOT, ROOT]", dev.tensor(&[1.0], &[ROOT, ROOT]));
    is_limit("[ROOT, ROOT, 0]", dev.tensor(&[], &[ROOT, ROOT, 0]));
    is_limit("[HUGE] of nothing", dev.tensor(&[], &[HUGE]));
    // Zero elements, but an output of HUGE elements.
    let empty = dev.tensor(&[], &[HUGE, 0]).expect("a valid empty tensor");
    assert_eq!(empty.len(), 0);
    is_limit("sum_last of [HUGE, 0]", empty.sum_last());
    is_limit("mean_last of [HUGE, 0]", empty.mean_last());
    is_limit("reshape to [HUGE, HUGE]", empty.reshape(&[HUGE, HUGE]));
    is_limit("reshape to [MAX, 2, 0]", empty.reshape(&[usize::MAX, 2, 0]));
    let a = dev.tensor(&[], &[ROOT, 0]).unwrap();
    let b = dev.tensor(&[], &[0, ROOT]).unwrap();
    is_limit("[ROOT, 0] x [0, ROOT]", a.matmul(&b));
    let bt = dev.tensor(&[], &[ROOT, 0]).unwrap();
    let nt = MatmulOptions {
        transpose_b: true,
        ..Default::default()
    };
    is_limit("[ROOT, 0] x [ROOT, 0]^T", a.matmul_with(&bt, nt));
    // Concatenating two axes of usize::MAX.
    let wide = dev.tensor(&[], &[usize::MAX, 0]).unwrap();
    is_limit("concat overflow", Tensor::concat(&[&wide, &wide], 0));
    // Pooling and convolution spans.
    let img = dev.tensor(&[1.0; 4], &[1, 1, 2, 2]).unwrap();
    let pool = gpukit::Pool2dOptions {
        kernel: [2, 2],
        stride: [1, 1],
        padding: [usize::MAX, 0],
    };
    is_limit("max_pool2d padding MAX", img.max_pool2d(pool));
    let wt = dev.tensor(&[1.0], &[1, 1, 1, 1]).unwrap();
    for (padding, dilation) in [([usize::MAX, 0], [1, 1]), ([HUGE, 0], [1, 1])] {
        let opts = gpukit::Conv2dOptions {
            padding,
            dilation,
            ..Default::default()
        };
        is_limit("conv2d padding", img.conv2d(&wt, None, opts));
    }
    let w2 = dev.tensor(&[1.0; 4], &[1, 1, 2, 2]).unwrap();
    let dil = gpukit::Conv2dOptions {
        dilation: [usize::MAX, 1],
        ..Default::default()
    };
    is_limit("conv2d dilation MAX", img.conv2d(&w2, None, dil));
    let planes = dev.tensor(&[], &[HUGE, 1, 0, 0]).unwrap();
    let p1 = gpukit::Pool2dOptions {
        kernel: [1, 1],
        stride: [1, 1],
        padding: [0, 0],
    };
    // No window fits a 0 x 0 plane: an input error, not an allocation of HUGE planes.
    match planes.max_pool2d(p1) {
        Err(e) => assert!(e.is_input(), "{e:?}"),
        Ok(t) => panic!("pooled {:?}", t.shape()),
    }
    let empty_planes = dev.tensor(&[], &[HUGE, 0, 1, 1]).unwrap();
    let pooled = empty_planes.max_pool2d(p1).expect("an empty pool is empty");
    assert_eq!(pooled.shape(), &[HUGE, 0, 1, 1]);
    // RoPE tables.
    is_limit("rope_tables(HUGE, 2)", dev.rope_tables(HUGE, 2, 1e4, 0));
    is_limit(
        "rope_tables(MAX, 2)",
        dev.rope_tables(usize::MAX, 2, 1e4, 0),
    );
    is_limit("rope_tables offset", dev.rope_tables(2, 2, 1e4, usize::MAX));
    // Quantized sizes.
    is_limit(
        "quantized [MAX, 32]",
        dev.quantized(&[0; 18], gpukit::QuantFormat::Q4_0, usize::MAX, 32),
    );
    is_limit(
        "quantized [ROOT, ROOT]",
        dev.quantized(&[0; 18], gpukit::QuantFormat::Q8_0, ROOT, ROOT),
    );
    // Batches check what they record.
    let mut batch = dev.batch();
    let x = batch.upload(&[], &[HUGE, 0]).unwrap();
    is_limit(
        "batch sum_last",
        batch.reduce_last(gpukit::ReduceOp::Sum, x),
    );
    is_limit("batch reshape", batch.reshape(x, &[ROOT, ROOT, 0]));
    let ok = batch.reshape(x, &[0, HUGE]).expect("an empty reshape");
    is_limit(
        "batch apply",
        batch.apply("sum", &[ok], |t| t[0].transpose(0, 1)?.sum_last()),
    );
    // The device is unharmed: an ordinary op still works.
    let t = dev.tensor(&[1.0, 2.0, 3.0], &[3]).unwrap();
    assert_eq!(t.sum().unwrap().read().await.unwrap(), vec![6.0]);
}
