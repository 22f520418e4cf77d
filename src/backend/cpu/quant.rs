//! Quantized weights on the CPU: dequantization and the quantized matmul.

use super::matmul::{round_inputs, rounded, sgemm, View};
use super::par;
use super::quant_rows::{block, Row};
use super::CpuStorage;
use crate::ops::matmul::Precision;
use crate::ops::quant::{QuantParts, BLOCK};

/// Dequantizes weight rows `r0..` into `out`, whole rows of `w.cols` each.
pub(super) fn dequant_rows(w: &QuantParts<'_, CpuStorage>, r0: usize, out: &mut [f32]) {
    let wpb = w.format.words_per_block();
    for (i, row) in out.chunks_exact_mut(w.cols.max(1)).enumerate() {
        let parts = Row::of(w, r0 + i);
        for (b, dst) in row.chunks_exact_mut(BLOCK).enumerate() {
            if let Ok(dst) = dst.try_into() {
                block(
                    w.format,
                    &parts.words[b * wpb..(b + 1) * wpb],
                    parts.scales[b],
                    parts.min(w.format, b),
                    dst,
                    |a, b, c| a * b + c,
                );
            }
        }
    }
}

pub(super) fn dequantize(w: QuantParts<'_, CpuStorage>) -> Vec<f32> {
    let mut out = vec![0.0f32; w.rows * w.cols];
    par::rows_mut(&mut out, w.cols, |r0, block| dequant_rows(&w, r0, block));
    out
}

use crate::error::Result;

/// Weight rows dequantized at a time by `matmul_quant`.
const QUANT_ROWS: usize = 64;

/// `x[m, k] * w[n, k]^T` with `w` quantized: blocks of weight rows are dequantized into a
/// small buffer (in parallel) and multiplied at once, so the f32 weights never exist whole.
/// Past the few-row kernel's rows, both operands are first rounded as `precision` reads them.
pub(super) fn matmul_quant(
    x: &[f32],
    w: QuantParts<'_, CpuStorage>,
    m: usize,
    precision: Precision,
) -> Result<Vec<f32>> {
    let (n, k) = (w.rows, w.cols);
    if (1..=super::quant_rows::MAX_ROWS).contains(&m) && x.len() >= m * k {
        return Ok(super::quant_rows::product(x, &w, m));
    }
    let x = rounded(precision, x);
    let x = &x[..];
    // Computed transposed, out^T[n, m] = w x^T, so each task owns whole rows of the result.
    let mut out_t = vec![0.0f32; n * m];
    par::try_chunks_mut(&mut out_t, (QUANT_ROWS * m).max(1), |start, dst| {
        let r0 = start / m.max(1);
        let rows = dst.len() / m.max(1);
        let mut deq = vec![0.0f32; rows * k];
        dequant_rows(&w, r0, &mut deq);
        round_inputs(precision, &mut deq);
        let wv = View {
            data: &deq,
            rs: k,
            cs: 1,
        };
        let xv = View {
            data: x,
            rs: 1,
            cs: k,
        };
        sgemm(rows, m, k, wv, xv, dst, m, false, 1, None)
    })?;
    let mut out = vec![0.0f32; m * n];
    for (j, col) in out_t.chunks_exact(m.max(1)).enumerate() {
        for (i, &v) in col.iter().enumerate() {
            out[i * n + j] = v;
        }
    }
    Ok(out)
}
