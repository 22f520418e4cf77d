//! The models layer: the WordPiece tokenizer against Hugging Face `tokenizers` on 1,100 varied
//! strings (tests/data/wordpiece_vectors.json, written by scripts/test-data/), and the
//! all-MiniLM-L6-v2 embedder against an f64 reference written here over the same weights, on
//! the CPU backend and the GPU adapter. The weights come from `scripts/fetch-models.sh`, which
//! `make test` runs; without them these tests fail and say so.
#![cfg(all(feature = "models", not(target_arch = "wasm32")))]

use std::path::PathBuf;

use gpukit::models::{Embedder, WordPiece};
use gpukit::Device;

#[path = "common/backends.rs"]
mod backends;
#[path = "common/bert_reference.rs"]
mod bert_reference;
#[allow(dead_code)]
#[path = "common/oracle.rs"]
mod oracle;
use bert_reference::Reference;

/// The model folder: `GPUKIT_MODEL_DIR`, or where `scripts/fetch-models.sh` puts it.
fn model_dir() -> PathBuf {
    let dir = std::env::var_os("GPUKIT_MODEL_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/models/all-minilm-l6-v2"),
        PathBuf::from,
    );
    assert!(
        dir.join("model.safetensors").exists(),
        "{} is missing: run scripts/fetch-models.sh (make test runs it)",
        dir.display()
    );
    dir
}

#[test]
fn wordpiece_matches_hugging_face_tokenizers() {
    let json = std::fs::read_to_string(model_dir().join("tokenizer.json")).unwrap();
    let tok = WordPiece::from_json(&json, 512).unwrap();
    let vectors: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/wordpiece_vectors.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let rows = vectors["rows"].as_array().unwrap();
    assert!(rows.len() >= 1000);
    let mut bad = Vec::new();
    for row in rows {
        let text = row["text"].as_str().unwrap();
        let want: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let got = tok.encode(text);
        if got != want {
            bad.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ; first: {}",
        bad.len(),
        rows.len(),
        bad[..bad.len().min(3)].join("\n")
    );
}

const SENTENCES: [&str; 6] = [
    "GPU compute in the browser",
    "A cat sits on the mat.",
    "",
    "Ångström-scale café naïveté, 中文字符 and emoji 🚀!",
    "The quick brown fox jumps over the lazy dog, again and again and again.",
    "supercalifragilisticexpialidocious",
];

fn check(device: &Device) {
    let embedder = Embedder::load(device, model_dir()).unwrap();
    let got = against_reference(&embedder, device);
    session_replays(&embedder, &got);
}

/// The embeddings of SENTENCES (one batch of different lengths: padding and key lengths) at
/// cosine 0.9999 or more to the f64 reference, one of them alone matching its batched one.
fn against_reference(embedder: &Embedder, device: &Device) -> Vec<Vec<f32>> {
    assert_eq!(embedder.dim(), 384);
    let reference = Reference::load(&model_dir());
    let got = embedder.embed_blocking(&SENTENCES).unwrap();
    let alone = embedder.embed_blocking(&SENTENCES[1..2]).unwrap();
    for (i, text) in SENTENCES.iter().enumerate() {
        let want = reference.embed(&embedder.tokenizer().encode(text));
        let cos: f64 = got[i].iter().zip(&want).map(|(a, b)| *a as f64 * b).sum();
        assert!(
            cos >= 0.9999,
            "{}: {text:?}: cosine {cos}",
            device.info().backend
        );
        // For the record (the H100 runs' summary): --nocapture shows it.
        println!("{} {text:?}: cosine {cos:.9}", device.info().backend);
    }
    let same: f32 = alone[0].iter().zip(&got[1]).map(|(a, b)| a * b).sum();
    assert!(same >= 0.9999, "batched against alone: {same}");
    assert!(embedder.embed_blocking(&[]).unwrap().is_empty());
    got
}

/// A session's compiled graphs give the eager results: the first texts, other texts in the
/// same (batch, length) bucket (new ids, lengths and pooling weights in a replay), more
/// buckets than the session keeps, then the first texts again after their graph was dropped.
fn session_replays(embedder: &Embedder, eager: &[Vec<f32>]) {
    let mut session = embedder.session();
    let close = |a: &[Vec<f32>], b: &[Vec<f32>], what: &str| {
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            let cos: f32 = x.iter().zip(y).map(|(p, q)| p * q).sum();
            assert!(cos >= 0.99999, "{what}: text {i}: cosine {cos}");
        }
    };
    close(
        &session.embed_blocking(&SENTENCES).unwrap(),
        eager,
        "first run",
    );
    let others = [
        "GPU kernels",
        "",
        "a dog",
        "rain in the forecast",
        "x y z",
        "hello",
    ];
    let want = embedder.embed_blocking(&others).unwrap();
    close(
        &session.embed_blocking(&others).unwrap(),
        &want,
        "replayed with new texts",
    );
    // Nine more buckets (one text of 16 n tokens each), one more than the session keeps.
    let words: Vec<String> = (1..=9).map(|n| "word ".repeat(n * 16 - 2)).collect();
    for (n, text) in words.iter().enumerate() {
        let want = embedder.embed_blocking(&[text.as_str()]).unwrap();
        let got = session.embed_blocking(&[text.as_str()]).unwrap();
        close(&got, &want, &format!("bucket {n}"));
    }
    close(
        &session.embed_blocking(&SENTENCES).unwrap(),
        eager,
        "after eviction",
    );
    assert!(session.embed_blocking(&[]).unwrap().is_empty());
}

#[test]
fn embeddings_match_an_f64_reference_on_the_cpu() {
    check(&Device::cpu());
}

#[test]
fn embeddings_match_an_f64_reference_on_the_gpu() {
    check(&backends::vulkan());
}

#[test]
fn embeddings_match_an_f64_reference_on_cuda() {
    backends::on_cuda(check);
}

/// Half-precision linear weights: kept as f16 or bf16 on the CPU and wgpu, which read them as
/// stored, and within cosine 0.9999 of the f64 reference of the f32 weights. An integer dtype
/// is refused.
#[test]
fn half_precision_weights_match_the_reference() {
    use gpukit::models::EmbedderOptions;
    use gpukit::DType;
    for device in [Device::cpu(), backends::vulkan()] {
        for dtype in [DType::F16, DType::BF16] {
            let options = EmbedderOptions { weights: dtype };
            let embedder = Embedder::load_with(&device, model_dir(), options).unwrap();
            assert_eq!(embedder.weight_dtype(), dtype, "{}", device.info().backend);
            against_reference(&embedder, &device);
        }
    }
    let options = EmbedderOptions {
        weights: DType::I32,
    };
    let e = Embedder::load_with(&Device::cpu(), model_dir(), options)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not f32, f16 or bf16"), "{e}");
}

#[test]
fn hostile_inputs_embed_or_fail_clearly() {
    // On the GPU adapter (lavapipe in CI): the CPU backend is slow in an unoptimised test build.
    let device = backends::vulkan();
    let embedder = Embedder::load(&device, model_dir()).unwrap();
    // A batch of 1,000 short texts (run in parts sorted by length): empty strings, unknown
    // words, control characters, emoji.
    let texts: Vec<String> = (0..1000)
        .map(|i| match i % 5 {
            0 => String::new(),
            1 => format!("sentence number {i}"),
            2 => "\u{0}\u{7}\u{fffd} zzqxj \u{1F680}".to_string(),
            3 => "word ".repeat(i % 9),
            _ => "ok".to_string(),
        })
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    // 10,000 characters in one word ([UNK]) and 2,000 words (truncated to 512 tokens).
    let (long, words) = ("x".repeat(10_000), "lorem ipsum ".repeat(1_000));
    for batch in [refs.clone(), vec![long.as_str(), words.as_str()]] {
        let out = embedder.embed_blocking(&batch).unwrap();
        assert_eq!(out.len(), batch.len());
        for (i, v) in out.iter().enumerate() {
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "text {i}: norm {norm}");
        }
        // The same text gives the same vector wherever it sits in the batch.
        let alone = embedder.embed_blocking(&[batch[1]]).unwrap();
        let cos: f32 = alone[0].iter().zip(&out[1]).map(|(a, b)| a * b).sum();
        assert!(cos > 0.9999, "{cos}");
    }
}

#[test]
fn a_missing_or_truncated_model_is_an_error() {
    let device = Device::cpu();
    let e = Embedder::load(&device, "/nonexistent/model").err().unwrap();
    assert!(e.to_string().contains("fetch-models"), "{e}");
    let dir = model_dir();
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let tokenizer = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
    let weights = std::fs::read(dir.join("model.safetensors")).unwrap();
    assert!(
        Embedder::from_bytes(&device, &config, &tokenizer, &weights[..weights.len() / 2]).is_err()
    );
    assert!(Embedder::from_bytes(&device, "{}", &tokenizer, &weights).is_err());
    assert!(Embedder::from_bytes(&device, &config, "[]", &weights).is_err());
}
