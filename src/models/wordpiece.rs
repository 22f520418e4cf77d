//! BERT's WordPiece tokenizer, read from a model's `tokenizer.json`: the BERT normalizer
//! (control characters removed, whitespace made spaces, CJK characters set apart, accents
//! stripped, lower case), the BERT pre-tokenizer (split on whitespace, each punctuation
//! character a word of its own), then greedy longest-match WordPiece with `##` continuations,
//! and `[CLS] .. [SEP]` around the ids, truncated to the model's length.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use unicode_normalization::UnicodeNormalization;
use unicode_properties::{GeneralCategory, GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::error::{Error, Result};

/// FNV-1a: the vocabulary's keys are short and not chosen by an attacker who could gain by
/// collisions (the model file is), and SipHash took a third of the tokenizer's time.
#[derive(Default)]
pub(crate) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

type Vocab = HashMap<String, u32, BuildHasherDefault<Fnv>>;

/// A WordPiece tokenizer (see the module docs).
#[derive(Debug, Clone)]
pub struct WordPiece {
    vocab: Vocab,
    unk: u32,
    cls: u32,
    sep: u32,
    pad: u32,
    lowercase: bool,
    strip_accents: bool,
    max_word_chars: usize,
    max_len: usize,
    /// The tokenizer's added tokens (`[CLS]`, `[MASK]`, ...): written in a text, each is its
    /// own id, as Hugging Face's tokenizers match them before normalising.
    added: Vec<(String, u32)>,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "tokenizer",
        reason: reason.into(),
    }
}

impl WordPiece {
    /// Reads a Hugging Face `tokenizer.json` of a BERT WordPiece model; ids are truncated to
    /// `max_len` (the model's positions, 512 for BERT) with `[CLS]` and `[SEP]` included.
    pub fn from_json(json: &str, max_len: usize) -> Result<WordPiece> {
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| invalid(format!("not JSON: {e}")))?;
        let model = &v["model"];
        if model["type"] != "WordPiece" {
            return Err(invalid(format!(
                "the model is {}, not WordPiece",
                model["type"]
            )));
        }
        let vocab: Vocab = model["vocab"]
            .as_object()
            .ok_or_else(|| invalid("no model.vocab"))?
            .iter()
            .map(|(k, id)| {
                let id = id
                    .as_u64()
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| invalid(format!("the id of {k:?} is not a u32")))?;
                Ok((k.clone(), id))
            })
            .collect::<Result<_>>()?;
        let special = |name: &str| {
            vocab
                .get(name)
                .copied()
                .ok_or_else(|| invalid(format!("the vocabulary has no {name}")))
        };
        let mut added: Vec<(String, u32)> = v["added_tokens"]
            .as_array()
            .map(|list| {
                list.iter()
                    .filter_map(|t| {
                        Some((t["content"].as_str()?.to_string(), t["id"].as_u64()? as u32))
                    })
                    .filter(|(c, _)| !c.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        // The longest first, so that one added token inside another never wins.
        added.sort_by_key(|(c, _)| std::cmp::Reverse(c.len()));
        let norm = &v["normalizer"];
        let lowercase = norm["lowercase"].as_bool().unwrap_or(true);
        if max_len < 2 {
            return Err(invalid("max_len must leave room for [CLS] and [SEP]"));
        }
        Ok(WordPiece {
            unk: special(model["unk_token"].as_str().unwrap_or("[UNK]"))?,
            cls: special("[CLS]")?,
            sep: special("[SEP]")?,
            pad: special("[PAD]")?,
            lowercase,
            strip_accents: norm["strip_accents"].as_bool().unwrap_or(lowercase),
            max_word_chars: model["max_input_chars_per_word"].as_u64().unwrap_or(100) as usize,
            max_len,
            vocab,
            added,
        })
    }

    /// The id of `[PAD]`.
    pub fn pad_id(&self) -> u32 {
        self.pad
    }

    /// The vocabulary's size (one past the largest id).
    pub fn vocab_size(&self) -> usize {
        self.vocab.values().max().map_or(0, |&m| m as usize + 1)
    }

    /// The ids of `text`: `[CLS]`, the WordPiece ids of its words (truncated), `[SEP]`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = vec![self.cls];
        let room = self.max_len - 2;
        let mut rest = text;
        'text: while !rest.is_empty() {
            // The next added token written in the text, if any: the text before it is
            // tokenised, the token is its own id.
            let next = self
                .added
                .iter()
                .filter_map(|(c, id)| rest.find(c.as_str()).map(|at| (at, c.len(), *id)))
                .min_by_key(|&(at, len, _)| (at, std::cmp::Reverse(len)));
            let (before, special) = match next {
                Some((at, len, id)) => {
                    let before = &rest[..at];
                    rest = &rest[at + len..];
                    (before, Some(id))
                }
                None => (std::mem::take(&mut rest), None),
            };
            for word in pre_tokenize(&self.normalize(before)) {
                for id in self.word_ids(&word) {
                    if ids.len() > room {
                        break 'text;
                    }
                    ids.push(id);
                }
            }
            if let Some(id) = special {
                if ids.len() > room {
                    break;
                }
                ids.push(id);
            }
        }
        ids.push(self.sep);
        ids
    }

    /// BERT's normalizer.
    fn normalize(&self, text: &str) -> String {
        if text.is_ascii() {
            // ASCII has no CJK, no accents and no case but A-Z: one pass.
            return text
                .chars()
                .filter(|&c| c != '\0' && !is_control(c))
                .map(|c| match c {
                    '\t' | '\n' | '\r' => ' ',
                    c if self.lowercase => c.to_ascii_lowercase(),
                    c => c,
                })
                .collect();
        }
        let mut out = String::with_capacity(text.len());
        for c in text.chars() {
            if c == '\0' || c == '\u{fffd}' || is_control(c) {
                continue;
            }
            if is_whitespace(c) {
                out.push(' ');
            } else if is_cjk(c) {
                out.push(' ');
                out.push(c);
                out.push(' ');
            } else {
                out.push(c);
            }
        }
        if self.strip_accents {
            out = out
                .nfd()
                .filter(|&c| c.general_category() != GeneralCategory::NonspacingMark)
                .collect();
        }
        if self.lowercase {
            out = out.chars().flat_map(char::to_lowercase).collect();
        }
        out
    }

    /// One word's ids: the longest vocabulary piece from the left, then `##` pieces; a word
    /// that does not split into pieces, or longer than the limit, is `[UNK]`.
    fn word_ids(&self, word: &str) -> Vec<u32> {
        let chars: Vec<(usize, char)> = word.char_indices().collect();
        if chars.len() > self.max_word_chars {
            return vec![self.unk];
        }
        let mut ids = Vec::new();
        let mut start = 0;
        let mut piece = String::new();
        while start < chars.len() {
            let from = chars[start].0;
            let mut found = None;
            for end in (start + 1..=chars.len()).rev() {
                let to = chars.get(end).map_or(word.len(), |&(i, _)| i);
                piece.clear();
                if start > 0 {
                    piece.push_str("##");
                }
                piece.push_str(&word[from..to]);
                if let Some(&id) = self.vocab.get(&piece) {
                    found = Some((id, end));
                    break;
                }
            }
            let Some((id, end)) = found else {
                return vec![self.unk];
            };
            ids.push(id);
            start = end;
        }
        ids
    }
}

/// Whitespace ends a word; each punctuation character is a word of its own.
fn pre_tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in text.chars() {
        if c.is_whitespace() || is_punctuation(c) {
            if !word.is_empty() {
                words.push(std::mem::take(&mut word));
            }
            if !c.is_whitespace() {
                words.push(c.to_string());
            }
        } else {
            word.push(c);
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

fn is_whitespace(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r') || c.is_whitespace()
}

/// Unicode's "Other" categories (Cc, Cf, Cn, Co, Cs), tab and newlines excepted.
fn is_control(c: char) -> bool {
    !matches!(c, '\t' | '\n' | '\r') && c.general_category_group() == GeneralCategoryGroup::Other
}

fn is_punctuation(c: char) -> bool {
    c.is_ascii_punctuation() || c.general_category_group() == GeneralCategoryGroup::Punctuation
}

/// The CJK Unified Ideographs blocks BERT sets apart.
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x4E00..=0x9FFF
        | 0x3400..=0x4DBF
        | 0x20000..=0x2A6DF
        | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F
        | 0x2B920..=0x2CEAF
        | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}
