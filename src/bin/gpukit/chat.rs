//! `gpukit chat`: answers from SmolLM2-135M-Instruct (or another llama GGUF), streamed to the
//! terminal; interactive when no prompt is given.

use std::io::{BufRead, Write};

use gpukit::models::{Finish, GenerateOptions, Llm, LlmOptions};
use gpukit::{Backend, DType, Device, Precision};

/// The file `scripts/fetch-models.sh` fetches.
pub(crate) const DEFAULT_MODEL: &str = "target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

const USAGE: &str = "usage: gpukit chat [--backend B] [--model FILE] [--max-tokens N] \
     [--temperature T] [--top-k K] [--top-p P] [--seed S] [--context N] [--kv-cache f32|f16|bf16] \
     [--prompt-precision f32|f16|bf16|tf32] [--raw] [--json] [--profile] [PROMPT]";

struct Args {
    backend: Option<Backend>,
    model: String,
    options: GenerateOptions,
    load: LlmOptions,
    json: bool,
    profile: bool,
    prompt: Option<String>,
}

fn number<T: std::str::FromStr>(
    it: &mut std::slice::Iter<'_, String>,
    flag: &str,
) -> Result<T, String> {
    let v = it.next().ok_or(format!("{flag} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{flag}: {v:?} is not a valid value"))
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        backend: None,
        model: DEFAULT_MODEL.to_string(),
        options: GenerateOptions::default(),
        load: LlmOptions::default(),
        json: false,
        profile: false,
        prompt: None,
    };
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let o = &mut a.options;
        match arg.as_str() {
            "--json" => a.json = true,
            "--profile" => a.profile = true,
            "--raw" => o.raw = true,
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                a.backend = Some(name.parse::<Backend>().map_err(|e| e.to_string())?);
            }
            "--model" => a.model = it.next().ok_or("--model needs a file")?.clone(),
            "--max-tokens" => o.max_tokens = number(&mut it, arg)?,
            "--temperature" => o.temperature = number(&mut it, arg)?,
            "--top-k" => o.top_k = number(&mut it, arg)?,
            "--top-p" => o.top_p = number(&mut it, arg)?,
            "--seed" => o.seed = number(&mut it, arg)?,
            "--context" => a.load.context = Some(number(&mut it, arg)?),
            "--kv-cache" => a.load.kv_cache = kv_cache(&mut it)?,
            "--prompt-precision" => a.load.prompt_precision = Some(precision(&mut it)?),
            "--" => words.extend(it.by_ref().cloned()),
            other if other.starts_with("--") => {
                return Err(format!("unknown option {other:?} for chat\n{USAGE}"))
            }
            w => words.push(w.to_string()),
        }
    }
    if !words.is_empty() {
        a.prompt = Some(words.join(" "));
    }
    Ok(a)
}

/// The dtype after `--kv-cache`.
pub(crate) fn kv_cache(it: &mut std::slice::Iter<'_, String>) -> Result<DType, String> {
    it.next()
        .and_then(|v| v.parse::<DType>().ok())
        .filter(|d| d.is_float())
        .ok_or_else(|| "--kv-cache takes f32, f16 or bf16".to_string())
}

/// The precision after `--prompt-precision`.
pub(crate) fn precision(it: &mut std::slice::Iter<'_, String>) -> Result<Precision, String> {
    let name = it.next();
    [
        Precision::F32,
        Precision::F16,
        Precision::Bf16,
        Precision::Tf32,
    ]
    .into_iter()
    .find(|p| name.is_some_and(|n| n == p.name()))
    .ok_or_else(|| "--prompt-precision takes f32, f16, bf16 or tf32".to_string())
}

/// Loads the model a command's arguments name, on the device they name.
pub(crate) fn load(
    backend: Option<Backend>,
    model: &str,
    options: LlmOptions,
) -> Result<Llm, String> {
    if !std::path::Path::new(model).exists() {
        return Err(format!(
            "no model at {model}: run `bash scripts/fetch-models.sh` (or `make demo`) to fetch \
             SmolLM2-135M-Instruct, or give --model FILE"
        ));
    }
    let device = match backend {
        Some(b) => Device::with_backend_blocking(b),
        None => Device::new_blocking(),
    }
    .map_err(|e| e.to_string())?;
    let bytes = std::fs::read(model).map_err(|e| format!("cannot read {model}: {e}"))?;
    Llm::from_bytes(&device, &bytes, options).map_err(|e| e.to_string())
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let a = parse(args)?;
    let llm = load(a.backend, &a.model, a.load)?;
    // Per-op times of the answers (GPU time on CUDA), printed to stderr at the end.
    let profiler = a.profile.then(|| llm.device().profiler());
    let result = converse(&llm, &a);
    if let Some(p) = profiler {
        eprintln!("{}", p.report().map_err(|e| e.to_string())?);
    }
    result
}

fn converse(llm: &Llm, a: &Args) -> Result<(), String> {
    match &a.prompt {
        Some(p) => answer(llm, p, a),
        None => {
            if a.json {
                return Err("--json needs a PROMPT".into());
            }
            eprintln!(
                "{} on {} ({}); an empty line or end of input quits.",
                model_name(&a.model),
                llm.device().info().backend,
                llm.device().info().adapter
            );
            let stdin = std::io::stdin();
            loop {
                eprint!("> ");
                let mut line = String::new();
                if stdin
                    .lock()
                    .read_line(&mut line)
                    .map_err(|e| e.to_string())?
                    == 0
                {
                    return Ok(());
                }
                let line = line.trim_end_matches(['\n', '\r']);
                if line.is_empty() {
                    return Ok(());
                }
                answer(llm, line, a)?;
            }
        }
    }
}

fn model_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_stem()
        .map_or_else(|| path.to_string(), |s| s.to_string_lossy().into_owned())
}

fn answer(llm: &Llm, prompt: &str, a: &Args) -> Result<(), String> {
    let mut gen = llm.generate(prompt, a.options).map_err(|e| e.to_string())?;
    let mut text = String::new();
    let mut out = std::io::stdout();
    for token in gen.by_ref() {
        let token = token.map_err(|e| e.to_string())?;
        if !a.json {
            print!("{}", token.text);
            out.flush().map_err(|e| e.to_string())?;
        }
        text.push_str(&token.text);
    }
    let (prefill, decode) = gen.timings();
    let prefill_rate = gen.prompt_ids().len() as f64 / prefill.as_secs_f64();
    // The first token comes from the prefill; each later one from a step.
    let steps = gen.ids().len().saturating_sub(1);
    let decode_rate = steps as f64 / decode.as_secs_f64().max(1e-9);
    if a.json {
        let out = serde_json::json!({
            "model": model_name(&a.model),
            "backend": llm.device().info().backend.to_string(),
            "prompt_ids": gen.prompt_ids(),
            "ids": gen.ids(),
            "text": text,
            "finish": format!("{:?}", gen.finish().unwrap_or(Finish::Stop)).to_lowercase(),
            "prefill_tokens_per_s": prefill_rate,
            "decode_tokens_per_s": decode_rate,
        });
        println!("{out}");
    } else {
        if gen.finish() == Some(Finish::ContextFull) {
            print!("\n[the context is full: {} tokens]", llm.context());
        }
        println!();
        eprintln!(
            "[{} prompt tokens at {prefill_rate:.0}/s, {} generated at {decode_rate:.1}/s on {}]",
            gen.prompt_ids().len(),
            gen.ids().len(),
            llm.device().info().backend
        );
    }
    Ok(())
}
