//! Quantized rows: Q1 (one token through a Q4_1 layer, a GEMV), Q2 (a prompt through the
//! same layer: dequantise once, then the tiled matmul) and Q3 (one token through LLaMA-7B's
//! FFN up projection, 4096 -> 14336).

use gpukit::{QuantFormat, QuantTensor};

use super::matmul::per_gemv;
use super::{data, median, time, Ctx, Id, Row};

/// A Q4_1 weight of `rows` x `cols` in GGUF blocks: scales of 0.01-0.03, a min of -0.08, and
/// quants from a hash of the block index.
fn q4_1_bytes(rows: usize, cols: usize) -> Vec<u8> {
    let fmt = QuantFormat::Q4_1;
    let blocks = rows * cols / 32;
    let mut bytes = Vec::with_capacity(blocks * fmt.block_bytes());
    for (b, noise) in (0..blocks).zip(data(blocks, 17)) {
        bytes.extend(half::f16::from_f32(0.01 + noise.abs() * 0.01).to_le_bytes());
        bytes.extend(half::f16::from_f32(-0.08).to_le_bytes());
        bytes.extend(
            (0..16u32).map(|i| ((b as u32).wrapping_mul(2654435761).rotate_left(i) & 0xff) as u8),
        );
    }
    bytes
}

/// One token through `copies` Q4_1 weights of `[n, k]` in turn (so they come from memory, not
/// the L2): the row, and the weights for the rows after it.
fn gemv_row(
    cx: &Ctx,
    id: Id,
    (n, k): (usize, usize),
    copies: usize,
    seed: u64,
) -> Result<(Row, Vec<QuantTensor>), String> {
    let device = &cx.device;
    let bytes = q4_1_bytes(n, k);
    let w = (0..copies)
        .map(|_| device.quantized(&bytes, QuantFormat::Q4_1, n, k))
        .collect::<gpukit::Result<Vec<QuantTensor>>>()
        .map_err(|e| e.to_string())?;
    let x = device
        .tensor(&data(k, seed), &[1, k])
        .map_err(|e| e.to_string())?;
    let per = per_gemv(device, cx.runs, |i| x.matmul_quant(&w[i % w.len()]))?;
    let row = Row::new(
        id,
        format!("Q4_1 GEMV, one token through [{n}, {k}]"),
        per * 1e6,
        "us",
        cx.runs,
        format!(
            "{:.0} GB/s of weights ({:.1} MB as GGUF)",
            bytes.len() as f64 / per / 1e9,
            bytes.len() as f64 / 1e6
        ),
    );
    Ok((row, w))
}

pub(crate) fn rows(cx: &Ctx) -> Result<Vec<Row>, String> {
    let device = &cx.device;
    let mut rows = Vec::new();
    // Q1: one token through a Q4_1 4096 x 4096 layer (1024 with --quick). Eight weights in turn
    // (84 MB at 4096), so they are read from memory, not the L2.
    let qn = if cx.quick { 1024 } else { 4096 };
    let (row, wq) = gemv_row(cx, Id::Q1, (qn, qn), 8, 18)?;
    rows.push(row);

    // Q2: a 512-token prompt (64 with --quick) through the same layer: more rows than a GEMV
    // takes, so the weights are dequantised once and multiplied by the tiled matmul.
    let tokens = if cx.quick { 64 } else { 512 };
    let xp = device
        .tensor(&data(tokens * qn, 22), &[tokens, qn])
        .map_err(|e| e.to_string())?;
    let t = time(1, 5, || {
        drop(xp.matmul_quant(&wq[0])?);
        device.synchronize_blocking()
    })?;
    let flops = 2.0 * (tokens * qn * qn) as f64;
    rows.push(Row::new(
        Id::Q2,
        format!("Q4_1 matmul, a {tokens}-token prompt through [{qn}, {qn}]"),
        flops / median(t.clone()) / 1e12,
        "TFLOP/s",
        t.len(),
        "dequantise once, then the f32 matmul (cuBLAS on CUDA); one submit and wait included",
    ));

    // Q3: one token through a Q4_1 [14336, 4096] layer (LLaMA-7B's FFN; a quarter with
    // --quick), four weights in turn (132 MB) so they come from memory.
    let shape = if cx.quick {
        (3584, 1024)
    } else {
        (14336, 4096)
    };
    rows.push(gemv_row(cx, Id::Q3, shape, 4, 23)?.0);
    Ok(rows)
}
