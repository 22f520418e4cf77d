//! The chat model: the byte-level BPE against Hugging Face `tokenizers` on 1,100 varied strings
//! (tests/data/bpe_vectors.json, written by scripts/test-data/bpe_vectors.py from the GGUF's
//! own vocabulary), the GGUF reader on broken files, and SmolLM2-135M-Instruct against an f64
//! reference written here over the same weights (tests/common/llama_reference.rs), on the CPU
//! backend, the GPU adapter and CUDA where it runs. The GGUF comes from
//! `scripts/fetch-models.sh`, which `make test` runs; without it these tests fail and say so.
#![cfg(all(feature = "models", not(target_arch = "wasm32")))]

use std::path::PathBuf;
use std::sync::OnceLock;

use gpukit::models::{Bpe, GenerateOptions, Gguf, Llm, LlmOptions};
use gpukit::{DType, Device, Precision};

#[path = "common/backends.rs"]
mod backends;
#[path = "common/llama_reference.rs"]
mod llama_reference;

/// The GGUF: `GPUKIT_LLM_FILE`, or where `scripts/fetch-models.sh` puts it.
fn model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let path = std::env::var_os("GPUKIT_LLM_FILE").map_or_else(
            || {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
            },
            PathBuf::from,
        );
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: run scripts/fetch-models.sh (make test runs it)",
                path.display()
            )
        })
    })
}

#[test]
fn bpe_matches_hugging_face_tokenizers() {
    let bpe = Bpe::from_gguf(&Gguf::parse(model_bytes()).unwrap()).unwrap();
    let json = include_str!("data/bpe_vectors.json");
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(rows.len() >= 1000, "the corpus has {} strings", rows.len());
    let (mut mismatches, mut round_trips) = (Vec::new(), 0);
    for r in rows {
        let text = r["text"].as_str().unwrap();
        let want: Vec<u32> = r["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        let got = bpe.encode(text);
        if got != want {
            mismatches.push(format!("{text:?}: got {got:?}, want {want:?}"));
        }
        // Decoding gives the text back, except where it holds a byte the vocabulary lacks
        // (ASCII control characters, dropped as Hugging Face drops them).
        let lacks = text
            .chars()
            .any(|c| (c as u32) < 0x20 && !matches!(c, '\t' | '\n' | '\r') || c == '\x7f');
        if !lacks {
            assert_eq!(bpe.decode(&got), text, "decode(encode({text:?}))");
            round_trips += 1;
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} differ:\n{}",
        mismatches.len(),
        rows.len(),
        mismatches[..mismatches.len().min(10)].join("\n")
    );
    assert!(round_trips > 900, "only {round_trips} texts round-tripped");
}

/// A tiny GGUF: the header, the given metadata (pre-encoded) and tensor infos, then data.
fn gguf(
    kvs: &[(&str, u32, Vec<u8>)],
    tensors: &[(&str, &[u64], u32, u64)],
    data: usize,
) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    let s = |b: &mut Vec<u8>, x: &str| {
        b.extend((x.len() as u64).to_le_bytes());
        b.extend(x.as_bytes());
    };
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((kvs.len() as u64).to_le_bytes());
    for (k, ty, v) in kvs {
        s(&mut b, k);
        b.extend(ty.to_le_bytes());
        b.extend(v);
    }
    for (name, dims, ty, offset) in tensors {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(ty.to_le_bytes());
        b.extend(offset.to_le_bytes());
    }
    while !b.len().is_multiple_of(32) {
        b.push(0);
    }
    b.resize(b.len() + data, 7);
    b
}

fn string_value(x: &str) -> Vec<u8> {
    let mut v = (x.len() as u64).to_le_bytes().to_vec();
    v.extend(x.as_bytes());
    v
}

#[test]
fn broken_gguf_files_are_clear_errors() {
    let arch = ("general.architecture", 8, string_value("llama"));
    let ok = gguf(std::slice::from_ref(&arch), &[("w", &[32, 2], 0, 0)], 256);
    let g = Gguf::parse(&ok).unwrap();
    assert_eq!(g.tensors()[0].dims, [32, 2]);
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty", Vec::new(), "truncated"),
        ("bad magic", b"GGUX\x03\0\0\0".to_vec(), "magic"),
        (
            "version 9",
            {
                let mut b = ok.clone();
                b[4] = 9;
                b
            },
            "version",
        ),
        ("data cut", ok[..ok.len() - 1].to_vec(), "past the end"),
        (
            "unknown type",
            gguf(std::slice::from_ref(&arch), &[("w", &[32], 99, 0)], 256),
            "type 99",
        ),
        (
            "overflowing dims",
            gguf(
                std::slice::from_ref(&arch),
                &[("w", &[u64::MAX, 3], 0, 0)],
                0,
            ),
            "overflow",
        ),
        (
            "offset past the end",
            gguf(
                std::slice::from_ref(&arch),
                &[("w", &[32], 0, u64::MAX - 8)],
                0,
            ),
            "overflow",
        ),
        (
            "huge array",
            gguf(
                &[(
                    "a",
                    9,
                    [4u32.to_le_bytes().to_vec(), u64::MAX.to_le_bytes().to_vec()].concat(),
                )],
                &[],
                0,
            ),
            "array",
        ),
        (
            "huge string",
            gguf(&[("s", 8, u64::MAX.to_le_bytes().to_vec())], &[], 0),
            "truncated",
        ),
        (
            "unknown value type",
            gguf(&[("s", 77, vec![])], &[], 0),
            "value type 77",
        ),
        (
            "five dims",
            gguf(
                std::slice::from_ref(&arch),
                &[("w", &[1, 1, 1, 1, 32], 0, 0)],
                256,
            ),
            "dimensions",
        ),
        (
            "partial block",
            gguf(std::slice::from_ref(&arch), &[("w", &[33], 8, 0)], 256),
            "blocks",
        ),
    ];
    for (what, bytes, needle) in cases {
        let e = Gguf::parse(&bytes).expect_err(what).to_string();
        assert!(e.contains(needle), "{what}: {e:?} does not say {needle:?}");
    }
    // Every prefix of a real file's header, and a few hundred corrupted bytes in it: each
    // parses or fails, none panics.
    let real = model_bytes();
    let g = Gguf::parse(real).unwrap();
    assert_eq!(g.tensors().len(), 272);
    let header = 2_000_000.min(real.len());
    for cut in [0, 3, 4, 8, 23, 24, 100, 1000, 100_000, header] {
        assert!(
            Gguf::parse(&real[..cut]).is_err(),
            "a file cut at {cut} parsed"
        );
    }
    let mut rng = 12345u64;
    for _ in 0..200 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let at = (rng >> 33) as usize % 4096;
        let mut bytes = real[..header].to_vec();
        bytes[at] ^= (rng >> 8) as u8 | 1;
        let _ = Gguf::parse(&bytes);
    }
    // A model that is not llama, and a truncated one, are errors when loading too.
    let device = Device::cpu();
    let e = Llm::from_bytes(&device, &ok, LlmOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no metadata"), "{e}");
    let e = Llm::from_bytes(&device, &real[..real.len() / 2], LlmOptions::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("past the end"), "{e}");
}

/// Corrupted model files, loaded whole: each mutant of the real GGUF (bytes changed in its
/// metadata and tensor infos, lengths and counts overwritten with hostile values, the file cut
/// short) either loads and generates, or is an error; none panics or aborts. Rounds:
/// `GPUKIT_FUZZ_ROUNDS` (default 48; the mutants are the same for the same count).
#[test]
fn mutated_model_files_load_or_fail_clearly() {
    let rounds = std::env::var("GPUKIT_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48usize);
    let mut bytes = model_bytes().to_vec();
    let header = 2_000_000.min(bytes.len());
    let device = Device::cpu();
    let options = LlmOptions {
        context: Some(16),
        ..LlmOptions::default()
    };
    let generate = GenerateOptions {
        max_tokens: 2,
        ..GenerateOptions::default()
    };
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let hostile = [
        0u64,
        1,
        2,
        3,
        7,
        255,
        0xffff,
        0x7fff_ffff,
        0xffff_ffff,
        1 << 32,
        1 << 40,
        u64::MAX / 2,
        u64::MAX,
    ];
    let (mut loaded, mut refused) = (0, 0);
    for round in 0..rounds {
        // Most changes land in the first 4 KB: the header, the scalar metadata, the start
        // of the vocabulary.
        let span = if next() % 4 == 0 { header } else { 4096 };
        let mut saved = Vec::new();
        let len = match next() % 4 {
            0 => {
                for _ in 0..1 + next() % 4 {
                    let at = (next() % span as u64) as usize;
                    saved.push((at, bytes[at]));
                    bytes[at] = next() as u8;
                }
                bytes.len()
            }
            1 | 2 => {
                let at = (next() % (span as u64 - 8)) as usize;
                let v = hostile[(next() % hostile.len() as u64) as usize];
                let width = if next() % 2 == 0 { 8 } else { 4 };
                for (i, b) in v.to_le_bytes()[..width].iter().enumerate() {
                    saved.push((at + i, bytes[at + i]));
                    bytes[at + i] = *b;
                }
                bytes.len()
            }
            _ => (next() % bytes.len() as u64) as usize,
        };
        match Llm::from_bytes(&device, &bytes[..len], options) {
            Ok(llm) => {
                let tokens = llm
                    .generate("Hi", generate)
                    .and_then(|g| g.collect::<gpukit::Result<Vec<_>>>());
                if let Err(e) = tokens {
                    assert!(!e.to_string().is_empty(), "round {round}");
                }
                loaded += 1;
            }
            Err(e) => {
                assert!(!e.to_string().is_empty(), "round {round}");
                refused += 1;
            }
        }
        for (at, b) in saved.into_iter().rev() {
            bytes[at] = b;
        }
    }
    // Both outcomes occur, so the mutants reach past the header checks into loading and
    // generation as well as being refused.
    assert!(
        loaded > 0 && refused > 0,
        "{loaded} mutants loaded, {refused} refused: the mutations exercise one path only"
    );
}

/// The prompts checked, in the chat template.
const PROMPTS: [&str; 3] = [
    "What is the capital of France?",
    "Write a haiku about GPUs.",
    "List three prime numbers.",
];
/// Tokens generated per prompt.
const STEPS: usize = 6;

/// What the reference computes for one prompt: its ids in the chat template, its greedy ids,
/// and the logits after the prompt and after each greedy id.
struct Expected {
    prompt: Vec<u32>,
    ids: Vec<u32>,
    logits: Vec<Vec<f64>>,
}

/// The reference's greedy answers, computed once and shared by every backend's test.
fn expected() -> &'static [Expected] {
    static E: OnceLock<Vec<Expected>> = OnceLock::new();
    E.get_or_init(|| {
        let bpe = Bpe::from_gguf(&Gguf::parse(model_bytes()).unwrap()).unwrap();
        let mut r = llama_reference::Reference::new(model_bytes());
        PROMPTS
            .iter()
            .map(|p| {
                let prompt = bpe.encode(&Llm::chat_prompt(p));
                r.reset();
                let mut logits = vec![r.step(&prompt)];
                let mut ids = Vec::new();
                while ids.len() < STEPS {
                    let (id, _) = llama_reference::top(logits.last().unwrap());
                    ids.push(id);
                    logits.push(r.step(&[id]));
                }
                Expected {
                    prompt,
                    ids,
                    logits,
                }
            })
            .collect()
    })
}

/// Greedy ids and the prompt's logits against the reference, with the KV cache in `kv_cache`
/// and the prompt's products in `prompt` (`None`: the device's default): the logits within
/// 2e-3 of the largest in size for f32 and f16 caches (measured: 1e-6 and 3e-4), 1e-2 for
/// bf16 (3e-3), whose keys and values keep 8 bits of mantissa, and as much for prompt
/// products on f16 and bf16 inputs.
fn check(device: &Device, kv_cache: DType, prompt: Option<Precision>) {
    let e = expected();
    let options = LlmOptions {
        context: Some(256),
        kv_cache,
        prompt_precision: prompt,
    };
    let llm = Llm::from_bytes(device, model_bytes(), options).unwrap();
    assert_eq!(llm.kv_cache_dtype(), kv_cache);
    if let Some(p) = prompt {
        assert_eq!(llm.prompt_precision(), p);
    }
    let (tol, margin) = match (kv_cache, llm.prompt_precision()) {
        (DType::F32, Precision::F32) => (2e-3, 0.05),
        (DType::F16, Precision::F32) => (2e-3, 0.1),
        (_, Precision::F32) => (1e-2, 0.3),
        (DType::F32 | DType::F16, Precision::F16) => (5e-3, 0.3),
        _ => (2e-2, 0.5),
    };
    for (prompt, want) in PROMPTS.iter().zip(e) {
        let options = GenerateOptions {
            max_tokens: STEPS,
            ..Default::default()
        };
        let mut gen = llm.generate(prompt, options).unwrap();
        let ids: Vec<u32> = gen.by_ref().map(|t| t.unwrap().id).collect();
        assert_eq!(gen.prompt_ids(), want.prompt, "{prompt:?}: prompt ids");
        let logits = llm.logits_blocking(&want.prompt).unwrap();
        // The prompt's last logits, against the largest in size.
        let scale = want.logits[0].iter().fold(0f64, |m, v| m.max(v.abs()));
        let err = logits
            .iter()
            .zip(&want.logits[0])
            .fold(0f64, |m, (a, b)| m.max((*a as f64 - b).abs()));
        println!(
            "{} {kv_cache} cache, {} prompt {prompt:?}: {ids:?} {:?} (reference {:?}); logits max error {err:.2e} of {scale:.1}",
            device.info().backend,
            llm.prompt_precision().name(),
            llm.tokenizer().decode(&ids),
            want.ids,
        );
        assert!(
            err <= tol * scale,
            "{prompt:?}: logits differ by {err} (largest {scale})"
        );
        // Greedy ids equal the reference's wherever its top-two margin is clear; after the
        // first close call the two may fairly part.
        assert!(!ids.is_empty(), "{prompt:?}: nothing generated");
        for (step, (&id, &want_id)) in ids.iter().zip(&want.ids).enumerate() {
            let (_, m) = llama_reference::top(&want.logits[step]);
            if m < margin {
                break;
            }
            assert_eq!(id, want_id, "{prompt:?}: step {step} (margin {m:.3})");
        }
    }
}

#[test]
fn llm_matches_an_f64_reference_on_the_cpu() {
    check(&Device::cpu(), DType::F32, None);
}

#[test]
fn llm_matches_an_f64_reference_on_the_gpu() {
    check(&backends::vulkan(), DType::F32, None);
}

#[test]
fn llm_matches_an_f64_reference_on_cuda() {
    backends::on_cuda(|d| check(d, DType::F32, None));
}

#[test]
fn a_half_precision_kv_cache_matches_the_reference_on_the_cpu() {
    for dtype in [DType::F16, DType::BF16] {
        check(&Device::cpu(), dtype, None);
    }
}

#[test]
fn a_half_precision_kv_cache_matches_the_reference_on_the_gpu() {
    check(&backends::vulkan(), DType::F16, None);
}

#[test]
fn a_half_precision_kv_cache_matches_the_reference_on_cuda() {
    backends::on_cuda(|d| {
        for dtype in [DType::F16, DType::BF16] {
            check(d, dtype, None);
        }
    });
}

/// The prompt's products in each precision the default does not pick: f16 and bf16 inputs
/// on the CPU (rounded as tensor cores read them) and the GPU adapter, and CUDA both ways.
#[test]
fn prompt_products_in_each_precision_match_the_reference_on_the_cpu() {
    for p in [Precision::F16, Precision::Bf16] {
        check(&Device::cpu(), DType::F32, Some(p));
    }
}

#[test]
fn prompt_products_in_each_precision_match_the_reference_on_the_gpu() {
    let d = backends::vulkan();
    let other = match d.info().features.cooperative_matrix {
        true => Precision::F32,
        false => Precision::F16,
    };
    check(&d, DType::F32, Some(other));
}

#[test]
fn prompt_products_in_each_precision_match_the_reference_on_cuda() {
    backends::on_cuda(|d| {
        for p in [Precision::F32, Precision::Bf16] {
            check(d, DType::F32, Some(p));
        }
    });
}

#[test]
fn generation_edges_are_handled_on_the_cpu() {
    generation_edges(&Device::cpu());
}

/// On a device that replays graphs: the preallocated cache, the recorded decode step and its
/// sampling output.
#[test]
fn generation_edges_are_handled_on_the_gpu() {
    generation_edges(&backends::vulkan());
}

#[test]
fn generation_edges_are_handled_on_cuda() {
    backends::on_cuda(generation_edges);
}

fn generation_edges(device: &Device) {
    use gpukit::models::Finish;
    let options = LlmOptions {
        context: Some(12),
        ..Default::default()
    };
    let llm = Llm::from_bytes(device, model_bytes(), options).unwrap();
    assert_eq!(llm.context(), 12);
    let bad = |r: gpukit::Result<gpukit::models::Generation>, needle: &str| {
        let e = r.err().expect(needle).to_string();
        assert!(e.contains(needle), "{e:?} does not say {needle:?}");
    };
    let raw = GenerateOptions {
        raw: true,
        ..Default::default()
    };
    bad(llm.generate("", raw), "empty");
    bad(llm.generate(&"word ".repeat(20), raw), "context holds 12");
    bad(llm.generate_ids(vec![1, 49_152], raw), "vocabulary size");
    for (o, needle) in [
        (
            GenerateOptions {
                temperature: f32::NAN,
                ..raw
            },
            "temperature",
        ),
        (
            GenerateOptions {
                temperature: -1.0,
                ..raw
            },
            "temperature",
        ),
        (GenerateOptions { top_p: 0.0, ..raw }, "top_p"),
        (GenerateOptions { top_p: 1.5, ..raw }, "top_p"),
    ] {
        bad(llm.generate("Hi", o), needle);
    }
    // A context that fills: 10 prompt tokens, then the 11th and 12th positions; the answer
    // says why it ended. Two generations run interleaved on one model with the same ids.
    let mut a = llm.generate("Hi", GenerateOptions::default()).unwrap();
    let mut b = llm.generate("Hi", GenerateOptions::default()).unwrap();
    assert_eq!(a.prompt_ids().len(), 10);
    let (mut ia, mut ib) = (Vec::new(), Vec::new());
    loop {
        let (x, y) = (a.next(), b.next());
        match (x, y) {
            (Some(x), Some(y)) => {
                ia.push(x.unwrap().id);
                ib.push(y.unwrap().id);
            }
            (None, None) => break,
            other => panic!("the two generations parted: {other:?}"),
        }
    }
    assert_eq!(ia, ib);
    assert_eq!(a.finish(), Some(Finish::ContextFull), "{ia:?}");
    assert_eq!(
        ia.len(),
        3,
        "the prefill's token and two steps fill 12 positions"
    );
    // Sampling: the same seed gives the same answer; top_k 1 is greedy whatever the
    // temperature; another seed at a high temperature gives another answer.
    let greedy: Vec<u32> = llm
        .generate("Hi", GenerateOptions::default())
        .unwrap()
        .map(|t| t.unwrap().id)
        .collect();
    let sampled = |temperature: f32, top_k: usize, seed: u64| -> Vec<u32> {
        let o = GenerateOptions {
            temperature,
            top_k,
            seed,
            ..Default::default()
        };
        llm.generate("Hi", o)
            .unwrap()
            .map(|t| t.unwrap().id)
            .collect()
    };
    assert_eq!(sampled(0.8, 1, 7), greedy, "top_k 1 is greedy");
    let hot: Vec<Vec<u32>> = (0..6).map(|seed| sampled(5.0, 0, seed)).collect();
    assert_eq!(sampled(5.0, 0, 3), hot[3], "one seed, one answer");
    assert!(
        hot.iter().any(|h| h != &hot[0]),
        "six seeds at temperature 5 gave one answer: {hot:?}"
    );
}
