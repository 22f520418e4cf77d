//! The conv2d row: C1, a ResNet-style 3x3 layer.

use super::{data, median, time, Ctx, Id, Row};

/// C1: 64 -> 64 channels on 56 x 56, batch 8 (1/8 the pixels with --quick).
pub(crate) fn row(cx: &Ctx) -> Result<Row, String> {
    let device = &cx.device;
    let (cn, side) = if cx.quick { (1, 28) } else { (8, 56) };
    let x = device
        .tensor(&data(cn * 64 * side * side, 15), &[cn, 64, side, side])
        .map_err(|e| e.to_string())?;
    let w = device
        .tensor(&data(64 * 64 * 9, 16), &[64, 64, 3, 3])
        .map_err(|e| e.to_string())?;
    let opts = gpukit::Conv2dOptions {
        padding: [1, 1],
        ..Default::default()
    };
    let t = time(1, 5, || {
        drop(x.conv2d(&w, None, opts)?);
        device.synchronize_blocking()
    })?;
    let flops = 2.0 * (cn * 64 * side * side * 64 * 9) as f64;
    Ok(Row::new(
        Id::C1,
        format!("conv2d 3x3, [{cn}, 64, {side}, {side}] -> 64 channels"),
        flops / median(t.clone()) / 1e12,
        "TFLOP/s",
        t.len(),
        "implicit GEMM, device-resident",
    ))
}
