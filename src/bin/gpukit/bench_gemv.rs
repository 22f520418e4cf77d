//! The token-by-token workloads of `gpukit bench`: G1 (an f32 linear layer), Q1 (a Q4_1
//! layer) for one token, and Q2 (the Q4_1 layer for a 512-token prompt).

use gpukit::{Device, QuantFormat, QuantTensor, Tensor};

use crate::bench::{data, median, time, Row};

/// GEMVs per synchronize in G1 and Q1: each takes microseconds, so one submit and wait (about
/// 80 us on an H100) would otherwise be a large part of the figure.
const GEMV_REPS: usize = 100;

/// A Q4_1 weight of `n` x `n` in GGUF blocks: scales of 0.01-0.03, a min of -0.08, and quants
/// from a hash of the block index.
fn q4_1_bytes(n: usize) -> Vec<u8> {
    let fmt = QuantFormat::Q4_1;
    let mut bytes = Vec::with_capacity(n * n / 32 * fmt.block_bytes());
    for (b, noise) in (0..n * n / 32).zip(data(n * n / 32, 17)) {
        bytes.extend(half::f16::from_f32(0.01 + noise.abs() * 0.01).to_le_bytes());
        bytes.extend(half::f16::from_f32(-0.08).to_le_bytes());
        bytes.extend(
            (0..16u32).map(|i| ((b as u32).wrapping_mul(2654435761).rotate_left(i) & 0xff) as u8),
        );
    }
    bytes
}

/// Seconds per GEMV: the median of `runs` timed rounds (after 2 untimed) of GEMV_REPS calls
/// of `gemv(i)` and one synchronize.
fn per_gemv(
    device: &Device,
    runs: usize,
    mut gemv: impl FnMut(usize) -> gpukit::Result<Tensor>,
) -> Result<f64, String> {
    let t = time(2, runs, || {
        for i in 0..GEMV_REPS {
            drop(gemv(i)?);
        }
        device.synchronize_blocking()
    })?;
    Ok(median(t) / GEMV_REPS as f64)
}

pub(crate) fn rows(device: &Device, quick: bool, runs: usize) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    // G1: one token through an f32 linear layer [4096, 4096] (1024 with --quick). Two weights
    // in turn (128 MiB): more than a GPU's L2 holds, as a model's layers would be.
    let gn = if quick { 1024 } else { 4096 };
    let gw = [19, 21]
        .into_iter()
        .map(|seed| device.tensor(&data(gn * gn, seed), &[gn, gn]))
        .collect::<gpukit::Result<Vec<_>>>()
        .map_err(|e| e.to_string())?;
    let gx = device
        .tensor(&data(gn, 20), &[1, gn])
        .map_err(|e| e.to_string())?;
    let per = per_gemv(device, runs, |i| gx.linear(&gw[i % gw.len()], None, None))?;
    rows.push(Row::new(
        "G1",
        format!("f32 GEMV, one token through a linear [{gn}, {gn}]"),
        per * 1e6,
        "us",
        runs,
        format!("{:.0} GB/s of weights", (gn * gn * 4) as f64 / per / 1e9),
    ));
    drop(gw);

    // Q1: one token through a Q4_1 4096 x 4096 layer (1024 with --quick). Eight weights in turn
    // (84 MB at 4096), so they are read from memory, not the L2.
    let qn = if quick { 1024 } else { 4096 };
    let bytes = q4_1_bytes(qn);
    let wq = (0..8)
        .map(|_| device.quantized(&bytes, QuantFormat::Q4_1, qn, qn))
        .collect::<gpukit::Result<Vec<QuantTensor>>>()
        .map_err(|e| e.to_string())?;
    let xq = device
        .tensor(&data(qn, 18), &[1, qn])
        .map_err(|e| e.to_string())?;
    let per = per_gemv(device, runs, |i| xq.matmul_quant(&wq[i % wq.len()]))?;
    rows.push(Row::new(
        "Q1",
        format!("Q4_1 GEMV, one token through [{qn}, {qn}]"),
        per * 1e6,
        "us",
        runs,
        format!(
            "{:.0} GB/s of weights ({:.1} MB as GGUF)",
            bytes.len() as f64 / per / 1e9,
            bytes.len() as f64 / 1e6
        ),
    ));

    // Q2: a 512-token prompt (64 with --quick) through the same layer: more rows than a GEMV
    // takes, so the weights are dequantised once and multiplied by the tiled matmul.
    let tokens = if quick { 64 } else { 512 };
    let xp = device
        .tensor(&data(tokens * qn, 22), &[tokens, qn])
        .map_err(|e| e.to_string())?;
    let t = time(1, 5, || {
        drop(xp.matmul_quant(&wq[0])?);
        device.synchronize_blocking()
    })?;
    let flops = 2.0 * (tokens * qn * qn) as f64;
    rows.push(Row::new(
        "Q2",
        format!("Q4_1 matmul, a {tokens}-token prompt through [{qn}, {qn}]"),
        flops / median(t.clone()) / 1e12,
        "TFLOP/s",
        t.len(),
        "dequantise once, then the f32 matmul (cuBLAS on CUDA); one submit and wait included",
    ));
    Ok(rows)
}
