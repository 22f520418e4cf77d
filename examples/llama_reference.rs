//! Prints the f64 reference of the LLM for prompts, for the JS checks of `Llm` (Node in
//! `scripts/test-npm.sh`, Chromium in `scripts/e2e.mjs`): reads a JSON array of user messages on
//! stdin and writes, per message, its prompt ids (chat template, gpukit's BPE, itself checked
//! against Hugging Face `tokenizers` in tests/llm.rs), the reference's greedy ids, the top-two
//! margin before each, and the logits after the prompt, all from the plain f64 llama of
//! `tests/common/llama_reference.rs` over the same GGUF.
//!
//! `cargo run --example llama_reference -- MODEL.gguf STEPS < prompts.json`

#[path = "../tests/common/llama_reference.rs"]
mod llama_reference;

use std::io::Read;

use gpukit::models::{Bpe, Gguf, Llm};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(steps)) = (args.next(), args.next()) else {
        return Err("usage: llama_reference MODEL.gguf STEPS < prompts.json".into());
    };
    let steps: usize = steps.parse()?;
    let bytes = std::fs::read(path)?;
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let prompts: Vec<String> = serde_json::from_str(&input)?;
    let bpe = Bpe::from_gguf(&Gguf::parse(&bytes)?)?;
    let mut r = llama_reference::Reference::new(&bytes);
    let mut out = Vec::new();
    for p in prompts {
        let prompt = bpe.encode(&Llm::chat_prompt(&p));
        r.reset();
        let first = r.step(&prompt);
        let (mut logits, mut ids, mut margins) = (first.clone(), Vec::new(), Vec::new());
        for _ in 0..steps {
            let (id, margin) = llama_reference::top(&logits);
            ids.push(id);
            margins.push(margin);
            logits = r.step(&[id]);
        }
        out.push(serde_json::json!({
            "prompt": p,
            "prompt_ids": prompt,
            "ids": ids,
            "margins": margins,
            "logits": first,
        }));
    }
    println!("{}", serde_json::Value::Array(out));
    Ok(())
}
