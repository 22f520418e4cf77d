//! `gpukit bench-embed`: all-MiniLM-L6-v2 sentence embeddings, latency at batch 1, throughput
//! at 32 sentences of 14 tokens and at 128 sentences of 128 tokens, text to host vectors
//! (tokenising, the forward pass and the read back). `scripts/peers/torch_minilm.py` (PyTorch,
//! CUDA) and `scripts/peers/ort_minilm.py` (onnxruntime, CPU) time their runtimes the same way.

use std::time::Instant;

use gpukit::models::Embedder;

/// One sentence of 14 tokens with [CLS] and [SEP].
const SENTENCE: &str = "The quick brown fox jumps over the lazy dog near the river.";

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let super::embed::ModelArgs {
        device,
        model,
        options,
        json,
        rest,
    } = super::embed::parse(args, "bench-embed")?;
    if let Some(extra) = rest.first() {
        return Err(format!("unexpected argument {extra:?} for bench-embed"));
    }
    let embedder = Embedder::load_with(&device, &model, options).map_err(|e| e.to_string())?;
    let mut session = embedder.session();
    // Each workload eagerly, then replayed through the session's compiled graph per bucket.
    let mut time = |texts: &[&str], warm: usize, runs: usize| -> Result<(f64, f64), String> {
        let mut eager = Vec::new();
        let mut replayed = Vec::new();
        for i in 0..warm + runs {
            let t0 = Instant::now();
            let out = embedder.embed_blocking(texts).map_err(|e| e.to_string())?;
            let t1 = Instant::now();
            let again = session.embed_blocking(texts).map_err(|e| e.to_string())?;
            if i >= warm {
                eager.push((t1 - t0).as_secs_f64());
                replayed.push(t1.elapsed().as_secs_f64());
            }
            assert_eq!(out.len(), texts.len());
            assert_eq!(again.len(), texts.len());
        }
        Ok((median(eager), median(replayed)))
    };
    let one = time(&[SENTENCE], 3, 30)?;
    let batch32 = time(&[SENTENCE; 32], 2, 10)?;
    let long = "word ".repeat(126);
    let batch: Vec<&str> = (0..128).map(|_| long.as_str()).collect();
    let many = time(&batch, 1, 5)?;
    let tokens = embedder.tokenizer().encode(SENTENCE).len();
    let mut rows = Vec::new();
    for (graph, pick) in [("", 0usize), (", graph replay", 1)] {
        let at = |t: (f64, f64)| if pick == 0 { t.0 } else { t.1 };
        let id = |s: &str| {
            if pick == 0 {
                s.to_string()
            } else {
                format!("{s}g")
            }
        };
        rows.push((
            id("E1"),
            format!("batch 1, one sentence of {tokens} tokens{graph}"),
            at(one) * 1e3,
            "ms",
        ));
        rows.push((
            id("E3"),
            format!("32 sentences of {tokens} tokens{graph}"),
            32.0 / at(batch32),
            "sentences/s",
        ));
        rows.push((
            id("E2"),
            format!("128 sentences x 128 tokens{graph}"),
            128.0 / at(many),
            "sentences/s",
        ));
    }
    let info = device.info();
    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(id, w, v, unit)| serde_json::json!({"id": id, "workload": w, "value": v, "unit": unit}))
            .collect();
        let out = serde_json::json!({"backend": info.backend.to_string(), "adapter": info.adapter, "weights": embedder.weight_dtype().name(), "rows": rows});
        println!("{out}");
    } else {
        println!(
            "all-minilm-l6-v2 ({} linear weights) on {} ({})",
            embedder.weight_dtype().name(),
            info.backend,
            info.adapter
        );
        for (id, w, v, unit) in rows {
            println!("{id:<4} {w:<56} {v:>10.3} {unit}");
        }
    }
    Ok(())
}
