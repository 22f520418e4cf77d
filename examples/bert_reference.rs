//! Prints the f64 reference embeddings of texts, for the JS checks of the embedder (Node in
//! `scripts/test-npm.sh`, Chromium in `scripts/e2e.mjs`): reads a JSON array of strings on
//! stdin and writes a JSON array of vectors, computed by the plain f64 BERT of
//! `tests/common/bert_reference.rs` over the same safetensors weights, after gpukit's WordPiece
//! (itself checked against Hugging Face `tokenizers` in tests/models.rs).
//!
//! `cargo run --example bert_reference -- target/models/all-minilm-l6-v2 < texts.json`

#[path = "../tests/common/bert_reference.rs"]
mod bert_reference;
#[allow(dead_code)]
#[path = "../tests/common/oracle.rs"]
mod oracle;

use std::io::Read;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: bert_reference MODEL_DIR < texts.json")?,
    );
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let texts: Vec<String> = serde_json::from_str(&input)?;
    let tokenizer = gpukit::models::WordPiece::from_json(
        &std::fs::read_to_string(dir.join("tokenizer.json"))?,
        512,
    )?;
    let reference = bert_reference::Reference::load(&dir);
    let vectors: Vec<Vec<f64>> = texts
        .iter()
        .map(|t| reference.embed(&tokenizer.encode(t)))
        .collect();
    println!("{}", serde_json::to_string(&vectors)?);
    Ok(())
}
