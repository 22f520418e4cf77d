//! `gpukit embed`: sentence embeddings of the TEXT arguments with all-MiniLM-L6-v2.

use gpukit::models::{Embedder, EmbedderOptions};
use gpukit::{Backend, Device};

/// The folder `scripts/fetch-models.sh` fills.
const DEFAULT_MODEL: &str = "target/models/all-minilm-l6-v2";

/// The options `embed` and `bench-embed` share: the device, the model folder, the linear
/// weights' dtype (`--weights f16`), `--json`, and the other arguments (the texts).
pub(crate) struct ModelArgs {
    pub(crate) device: Device,
    pub(crate) model: String,
    pub(crate) options: EmbedderOptions,
    pub(crate) json: bool,
    pub(crate) rest: Vec<String>,
}

pub(crate) fn parse(args: &[String], command: &str) -> Result<ModelArgs, String> {
    let (mut backend, mut model, mut json, mut rest) =
        (None, DEFAULT_MODEL.to_string(), false, Vec::new());
    let mut options = EmbedderOptions::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => json = true,
            "--backend" => {
                let name = it.next().ok_or("--backend needs a name")?;
                backend = Some(name.parse::<Backend>().map_err(|e| e.to_string())?);
            }
            "--model" => model = it.next().ok_or("--model needs a folder")?.clone(),
            "--weights" => {
                let name = it.next().ok_or("--weights needs f32, f16 or bf16")?;
                options.weights = match name.as_str() {
                    "f32" => gpukit::DType::F32,
                    "f16" => gpukit::DType::F16,
                    "bf16" => gpukit::DType::BF16,
                    _ => return Err(format!("--weights {name:?}: f32, f16 or bf16")),
                };
            }
            "--" => rest.extend(it.by_ref().cloned()),
            other if other.starts_with("--") => {
                return Err(format!("unknown option {other:?} for {command}"))
            }
            text => rest.push(text.to_string()),
        }
    }
    if !std::path::Path::new(&model)
        .join("model.safetensors")
        .exists()
    {
        return Err(format!(
            "no model in {model}: run `bash scripts/fetch-models.sh` (or `make demo`) to fetch \
             all-minilm-l6-v2, or give --model DIR"
        ));
    }
    let device = match backend {
        Some(b) => Device::with_backend_blocking(b),
        None => Device::new_blocking(),
    }
    .map_err(|e| e.to_string())?;
    Ok(ModelArgs {
        device,
        model,
        options,
        json,
        rest,
    })
}

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let ModelArgs {
        device,
        model,
        options,
        json,
        rest: texts,
    } = parse(args, "embed")?;
    if texts.is_empty() {
        return Err(
            "usage: gpukit embed [--backend B] [--model DIR] [--weights f16] [--json] TEXT..."
                .into(),
        );
    }
    let embedder = Embedder::load_with(&device, &model, options).map_err(|e| e.to_string())?;
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let t0 = std::time::Instant::now();
    let embeddings = embedder.embed_blocking(&refs).map_err(|e| e.to_string())?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let backend = device.info().backend.to_string();
    if json {
        let out = serde_json::json!({
            "model": "all-minilm-l6-v2",
            "backend": backend,
            "dim": embedder.dim(),
            "embeddings": embeddings,
        });
        println!("{out}");
    } else {
        println!(
            "all-minilm-l6-v2 on {backend} ({}): {} texts in {ms:.1} ms",
            device.info().adapter,
            texts.len()
        );
        for (text, e) in texts.iter().zip(&embeddings) {
            let head: Vec<String> = e.iter().take(4).map(|v| format!("{v:.4}")).collect();
            println!("{text:?}: [{}, ...] ({} values)", head.join(", "), e.len());
        }
    }
    Ok(())
}
