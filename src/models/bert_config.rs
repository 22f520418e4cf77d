//! The shape of a BERT encoder, read from its `config.json` (see `bert.rs` for the model).

use crate::error::{Error, Result};

/// The shape of a BERT encoder, as its `config.json` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    /// Width of the hidden states.
    pub hidden: usize,
    /// Encoder layers.
    pub layers: usize,
    /// Attention heads (each `hidden / heads` wide).
    pub heads: usize,
    /// Width of the feed-forward layer.
    pub intermediate: usize,
    /// Positions the model has embeddings for (the longest input).
    pub max_positions: usize,
    /// Layer norm epsilon.
    pub eps: f32,
}

pub(super) fn invalid(what: &str, reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "embedder",
        reason: format!("{what}: {}", reason.into()),
    }
}

impl BertConfig {
    /// Reads a Hugging Face `config.json` of a BERT model.
    pub fn from_json(json: &str) -> Result<BertConfig> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| invalid("config.json", e.to_string()))?;
        let int = |key: &str| {
            v[key]
                .as_u64()
                .map(|x| x as usize)
                .filter(|&x| x > 0)
                .ok_or_else(|| invalid("config.json", format!("no positive {key}")))
        };
        if v["model_type"] != "bert" {
            return Err(invalid(
                "config.json",
                format!("model_type is {}, not bert", v["model_type"]),
            ));
        }
        if v["hidden_act"] != "gelu" {
            return Err(invalid(
                "config.json",
                format!("hidden_act {} is not gelu", v["hidden_act"]),
            ));
        }
        let c = BertConfig {
            hidden: int("hidden_size")?,
            layers: int("num_hidden_layers")?,
            heads: int("num_attention_heads")?,
            intermediate: int("intermediate_size")?,
            max_positions: int("max_position_embeddings")?,
            eps: v["layer_norm_eps"].as_f64().unwrap_or(1e-12) as f32,
        };
        if !c.hidden.is_multiple_of(c.heads) {
            return Err(invalid(
                "config.json",
                "hidden_size is not a multiple of the heads",
            ));
        }
        Ok(c)
    }
}
