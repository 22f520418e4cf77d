//! `gpukit bench-chat`: the LLM's decode and prefill speed on the workloads of its issue. C1:
//! decode tokens/s, 128 new tokens (greedy, end tokens ignored) after a 128-token prompt; C2:
//! prefill tokens/s of a 512-token prompt (its time to the first new token). The prompt is
//! scripts/peers/bench_text.txt; `scripts/peers/llama_cpp.mjs` times llama.cpp on the same
//! text and counts, to be run beside it. `--profile` then prints the per-op profile of one
//! more C2 prefill (on wgpu each op is submitted and waited for, so small ops read long).

use gpukit::models::{GenerateOptions, LlmOptions};

use crate::chat::{kv_cache, load, precision, DEFAULT_MODEL};

const TEXT: &str = include_str!("../../../scripts/peers/bench_text.txt");
const RUNS: usize = 3;

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let (mut backend, mut model, mut json) = (None, DEFAULT_MODEL.to_string(), false);
    let mut profile = false;
    let mut options = LlmOptions {
        context: Some(1024),
        ..Default::default()
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--profile" => profile = true,
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                backend = Some(name.parse().map_err(|e: gpukit::Error| e.to_string())?);
            }
            "--model" => model = it.next().ok_or("--model needs a file")?.clone(),
            "--kv-cache" => options.kv_cache = kv_cache(&mut it)?,
            "--prompt-precision" => options.prompt_precision = Some(precision(&mut it)?),
            other => return Err(format!("unknown argument {other:?} for bench-chat")),
        }
    }
    let llm = load(backend, &model, options)?;
    let ids = llm.tokenizer().encode(TEXT);
    if ids.len() < 512 {
        return Err(format!(
            "the benchmark text is {} tokens; 512 are needed",
            ids.len()
        ));
    }
    // Returns (prefill tokens/s, decode tokens/s) of one generation.
    let generate = |prompt: usize, new: usize| -> Result<(f64, f64), String> {
        let options = GenerateOptions {
            max_tokens: new,
            ignore_eos: true,
            ..Default::default()
        };
        let mut gen = llm
            .generate_ids(ids[..prompt].to_vec(), options)
            .map_err(|e| e.to_string())?;
        for t in gen.by_ref() {
            t.map_err(|e| e.to_string())?;
        }
        let (p, d) = gen.timings();
        let steps = gen.ids().len().saturating_sub(1);
        Ok((
            prompt as f64 / p.as_secs_f64(),
            steps as f64 / d.as_secs_f64().max(1e-9),
        ))
    };
    generate(128, 16)?;
    generate(512, 1)?;
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let decode: Vec<f64> = (0..RUNS)
        .map(|_| generate(128, 128).map(|r| r.1))
        .collect::<Result<_, _>>()?;
    let prefill: Vec<f64> = (0..RUNS)
        .map(|_| generate(512, 1).map(|r| r.0))
        .collect::<Result<_, _>>()?;
    if profile {
        let profiler = llm.device().profiler();
        generate(512, 1)?;
        let report = profiler.report().map_err(|e| e.to_string())?;
        eprintln!("per-op profile of one C2 prefill:\n{report}");
    }
    let info = llm.device().info();
    let (d, p) = (median(decode.clone()), median(prefill.clone()));
    if json {
        let out = serde_json::json!({
            "model": "SmolLM2-135M-Instruct.Q4_1",
            "backend": info.backend.to_string(),
            "adapter": info.adapter,
            "kv_cache": options.kv_cache.name(),
            "prompt_precision": llm.prompt_precision().name(),
            "decode_tokens_per_s": d,
            "prefill_tokens_per_s": p,
            "decode_runs": decode,
            "prefill_runs": prefill,
        });
        println!("{out}");
    } else {
        println!(
            "SmolLM2-135M-Instruct Q4_1 on {} ({}), {} KV cache, {} prompt products",
            info.backend,
            info.adapter,
            options.kv_cache,
            llm.prompt_precision().name()
        );
        println!("C1 decode, 128 new tokens after 128:  {d:>9.1} tokens/s  (runs {decode:.1?})");
        println!("C2 prefill, 512-token prompt:         {p:>9.1} tokens/s  (runs {prefill:.1?})");
    }
    Ok(())
}
