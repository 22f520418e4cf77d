//! Models on gpukit (feature `models`, on by default natively): a sentence-embedding BERT
//! (all-MiniLM-L6-v2) with its WordPiece tokenizer. Kept apart from the core: the npm core
//! package is built without this feature, so pages that only need tensors do not carry the
//! tokenizer and loaders.

pub mod bert;
pub mod wordpiece;

pub use bert::{BertConfig, EmbedSession, Embedder};
pub use wordpiece::WordPiece;
