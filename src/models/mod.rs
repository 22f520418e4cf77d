//! Models on gpukit (feature `models`, on by default natively): a sentence-embedding BERT
//! (all-MiniLM-L6-v2) with its WordPiece tokenizer, and a llama-architecture chat model
//! (SmolLM2-135M-Instruct) from a GGUF file with its byte-level BPE tokenizer. Kept apart from
//! the core: the npm core package is built without this feature, so pages that only need
//! tensors do not carry the tokenizers and loaders.

pub mod bert;
mod bert_config;
pub mod bpe;
mod decode;
mod fused_step;
pub mod generate;
pub mod gguf;
mod linear;
pub mod llama;
pub mod wordpiece;

pub use bert::{BertConfig, EmbedSession, Embedder, EmbedderOptions};
pub use bpe::Bpe;
pub use generate::{Finish, GenerateOptions, Generation, Token};
pub use gguf::Gguf;
pub use llama::{Llm, LlmConfig, LlmOptions};
pub use wordpiece::WordPiece;
