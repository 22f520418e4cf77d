//! Attention rows: A1 (16 heads of 64 at three lengths) and A2 (LLaMA-7B's 32 heads of 128),
//! causal, batch 1, in f32, f16 and bf16 (operands stored in the dtype), with the extra memory
//! each takes; A3, decoding: one query row of 32 heads
//! against a KV cache of 8 heads x 4096 positions x 128 (GQA), as bandwidth; A4, a short
//! prompt: SmolLM2-135M's attention over a 512-token prompt (9 query heads on 3 KV heads of 64).

use super::matmul::per_gemv;
use super::{data, median, time, Ctx, Id, Row};

pub(crate) fn rows(cx: &Ctx) -> Result<Vec<Row>, String> {
    let device = &cx.device;
    let shapes = [
        (Id::A1, 16, 64, 1024usize),
        (Id::A1, 16, 64, 2048),
        (Id::A1, 16, 64, 4096),
        (Id::A2, 32, 128, 2048),
    ];
    let mut rows = Vec::new();
    let dtypes = [None, Some(gpukit::DType::F16), Some(gpukit::DType::BF16)];
    for ((id, heads, hd, seq), dtype) in
        shapes.into_iter().flat_map(|s| dtypes.map(move |d| (s, d)))
    {
        let seq = seq / if cx.quick { 32 } else { 1 };
        let len = heads * seq * hd;
        let tensor = |seed| {
            let t = device
                .tensor(&data(len, seed), &[1, heads, seq, hd])
                .map_err(|e| e.to_string())?;
            match dtype {
                Some(d) => t.cast(d).map_err(|e| e.to_string()),
                None => Ok(t),
            }
        };
        let (suffix, bytes) = match dtype {
            Some(d) => (format!(", {}", d.name()), 2.0),
            None => (String::new(), 4.0),
        };
        let (q, k, v) = (tensor(12)?, tensor(13)?, tensor(14)?);
        let options = gpukit::AttentionOptions {
            causal: true,
            lengths: None,
            ..Default::default()
        };
        device.synchronize_blocking().map_err(|e| e.to_string())?;
        device.reset_peak_memory();
        let before = device.memory_stats().live_bytes;
        let t = time(1, 5, || {
            drop(q.attention(&k, &v, options)?);
            device.synchronize_blocking()
        })?;
        let peak = device.memory_stats().peak_live_bytes.saturating_sub(before);
        rows.push(Row::new(
            id,
            format!("causal attention, {heads} heads x {seq} x {hd}, batch 1{suffix}"),
            median(t.clone()) * 1e6,
            "us",
            t.len(),
            format!(
                "peak extra memory {:.1} MiB (inputs {:.1} MiB; a stored score matrix would be {:.0} MiB)",
                peak as f64 / 1048576.0,
                3.0 * len as f64 * bytes / 1048576.0,
                (heads * seq * seq * 4) as f64 / 1048576.0
            ),
        ));
    }
    rows.push(decode(cx, None)?);
    rows.push(decode(cx, Some(gpukit::DType::F16))?);
    rows.push(prompt(cx, None)?);
    rows.push(prompt(cx, Some(gpukit::DType::F16))?);
    Ok(rows)
}

/// A4: a short prompt's attention, SmolLM2-135M's shape over 512 tokens (64 with --quick): 9
/// query heads on 3 KV heads of 64, causal, batch 1, 100 calls in a chain (each output the
/// next query), as a prompt's layers call it. Its few heads and rows give a GPU few blocks of
/// work, which is what it measures.
fn prompt(cx: &Ctx, dtype: Option<gpukit::DType>) -> Result<Row, String> {
    let device = &cx.device;
    let (heads, kv_heads, hd) = (9usize, 3usize, 64usize);
    let seq = if cx.quick { 64 } else { 512 };
    let stored = |t: gpukit::Tensor| match dtype {
        Some(d) => t.cast(d).map_err(|e| e.to_string()),
        None => Ok(t),
    };
    let tensor = |h: usize, seed| {
        device
            .tensor(&data(h * seq * hd, seed), &[1, h, seq, hd])
            .map_err(|e| e.to_string())
            .and_then(stored)
    };
    let (q, k, v) = (
        tensor(heads, 51)?,
        tensor(kv_heads, 52)?,
        tensor(kv_heads, 53)?,
    );
    let options = gpukit::AttentionOptions {
        causal: true,
        ..Default::default()
    };
    // Each call's output is the next call's query, as each layer's attention waits for the
    // layer before: independent calls would overlap on the GPU and hide how long one takes.
    const CALLS: usize = 100;
    let t = time(2, cx.runs, || {
        let mut x = q.clone();
        for _ in 0..CALLS {
            x = x.attention(&k, &v, options)?;
        }
        drop(x);
        device.synchronize_blocking()
    })?;
    let per = median(t) / CALLS as f64;
    let name = dtype.map_or("f32", |d| d.name());
    let flops = 2.0 * 2.0 * (heads * hd) as f64 * (seq * (seq + 1) / 2) as f64;
    Ok(Row::new(
        Id::A4,
        format!("prompt attention, {heads} heads on {kv_heads} x {seq} x {hd}, causal ({name})"),
        per * 1e6,
        "us",
        cx.runs,
        format!("{:.2} TFLOP/s of the causal products", flops / per / 1e12),
    ))
}

/// A3: one query row, 32 heads of 128, against 8 KV heads of 4096 positions (512 with
/// --quick, N with --decode-keys N). Four caches in turn (134 MB at 4096) so the keys and
/// values come from memory, not the L2.
fn decode(cx: &Ctx, dtype: Option<gpukit::DType>) -> Result<Row, String> {
    let device = &cx.device;
    let (heads, kv_heads, hd) = (32usize, 8usize, 128usize);
    let keys = cx.decode_keys.unwrap_or(if cx.quick { 512 } else { 4096 });
    let q = device
        .tensor(&data(heads * hd, 31), &[1, heads, 1, hd])
        .map_err(|e| e.to_string())?;
    let stored = |t: gpukit::Tensor| match dtype {
        Some(d) => t.cast(d).map_err(|e| e.to_string()),
        None => Ok(t),
    };
    let q = stored(q)?;
    let cache = |seed| {
        device
            .tensor(&data(kv_heads * keys * hd, seed), &[1, kv_heads, keys, hd])
            .map_err(|e| e.to_string())
            .and_then(stored)
    };
    let caches = (0..4)
        .map(|i| Ok((cache(40 + 2 * i)?, cache(41 + 2 * i)?)))
        .collect::<Result<Vec<_>, String>>()?;
    let per = per_gemv(device, cx.runs, |i| {
        let (k, v) = &caches[i % caches.len()];
        q.attention(k, v, Default::default())
    })?;
    let (name, size) = dtype.map_or(("f32", 4), |d| (d.name(), d.size()));
    let bytes = 2.0 * (kv_heads * keys * hd * size) as f64;
    Ok(Row::new(
        Id::A3,
        format!("decode attention, 1 x {heads} heads against {kv_heads} x {keys} x {hd} ({name})"),
        per * 1e6,
        "us",
        cx.runs,
        format!(
            "{:.0} GB/s of keys and values ({:.1} MB)",
            bytes / per / 1e9,
            bytes / 1e6
        ),
    ))
}
