//! Byte-level BPE, as GPT-2 and the llama family's `gpt2` tokenizers in GGUF files define it:
//! special tokens written in the text are matched as themselves; the rest is split into
//! single numeric characters and then by GPT-2's pattern (contractions, letter runs, number runs,
//! other-symbol runs, each with at most one leading space, and whitespace runs), each piece's
//! UTF-8 bytes are mapped to printable characters and merged pair by pair in the order of the
//! merge list. Decoding maps the characters back to bytes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::BuildHasherDefault;

use unicode_properties::{GeneralCategoryGroup, UnicodeGeneralCategory};

use crate::error::{Error, Result};
use crate::models::gguf::Gguf;
use crate::models::wordpiece::Fnv;

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "tokenizer",
        reason: reason.into(),
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<Fnv>>;

/// A byte-level BPE tokenizer (see the module docs).
#[derive(Debug, Clone)]
pub struct Bpe {
    tokens: Vec<String>,
    vocab: Map<String, u32>,
    /// `(left, right)` -> `(rank, merged id)`.
    merges: Map<(u32, u32), (u32, u32)>,
    /// The id of each byte's character; a byte whose character the vocabulary lacks is
    /// dropped, as Hugging Face's BPE without an unknown token drops it.
    byte_ids: [Option<u32>; 256],
    /// Each character of the byte alphabet back to its byte.
    char_bytes: Map<char, u8>,
    /// Special tokens matched in the text, the longest first.
    special: Vec<(String, u32)>,
    is_special: Vec<bool>,
}

/// GPT-2's byte alphabet: printable bytes stand for themselves, the others for characters
/// from U+0100 on, in byte order.
fn byte_chars() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || b >= 174;
        out[b as usize] = if printable {
            char::from_u32(b).unwrap_or('\0')
        } else {
            let c = char::from_u32(next).unwrap_or('\0');
            next += 1;
            c
        };
    }
    out
}

impl Bpe {
    /// Reads the tokenizer of a GGUF file (`tokenizer.ggml.model` = `gpt2`): tokens, token
    /// types (control and user-defined ones are special) and merges.
    pub fn from_gguf(g: &Gguf<'_>) -> Result<Bpe> {
        let model = g.string("tokenizer.ggml.model")?;
        if model != "gpt2" {
            return Err(invalid(format!(
                "tokenizer.ggml.model is {model:?}; byte-level BPE (\"gpt2\") is read"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>> {
            g.get(key)?
                .as_array()
                .ok_or_else(|| invalid(format!("{key} is not an array")))?
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| invalid(format!("{key} holds a non-string")))
                })
                .collect()
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let types: Vec<u64> = match g.metadata.get("tokenizer.ggml.token_type") {
            Some(v) => v
                .as_array()
                .ok_or_else(|| invalid("tokenizer.ggml.token_type is not an array"))?
                .iter()
                .map(|t| t.as_u64().unwrap_or(1))
                .collect(),
            None => vec![1; tokens.len()],
        };
        if types.len() != tokens.len() || u32::try_from(tokens.len()).is_err() {
            return Err(invalid(format!(
                "{} tokens and {} token types",
                tokens.len(),
                types.len()
            )));
        }
        let mut vocab = Map::default();
        for (i, t) in tokens.iter().enumerate() {
            vocab.entry(t.clone()).or_insert(i as u32);
        }
        let chars = byte_chars();
        let mut byte_ids = [None; 256];
        let mut char_bytes = Map::default();
        for (b, &c) in chars.iter().enumerate() {
            byte_ids[b] = vocab.get(c.encode_utf8(&mut [0; 4]) as &str).copied();
            char_bytes.insert(c, b as u8);
        }
        let mut merges = Map::default();
        for (rank, m) in strings("tokenizer.ggml.merges")?.iter().enumerate() {
            let (a, b) = m
                .split_once(' ')
                .ok_or_else(|| invalid(format!("merge {rank} ({m:?}) is not two tokens")))?;
            let id = |t: &str| vocab.get(t).copied();
            let (Some(l), Some(r), Some(to)) = (id(a), id(b), id(&format!("{a}{b}"))) else {
                return Err(invalid(format!(
                    "merge {rank} ({m:?}) names unknown tokens"
                )));
            };
            merges.entry((l, r)).or_insert((rank as u32, to));
        }
        let is_special: Vec<bool> = types.iter().map(|&t| t == 3 || t == 4).collect();
        let mut special: Vec<(String, u32)> = tokens
            .iter()
            .zip(&is_special)
            .enumerate()
            .filter(|(_, (t, &s))| s && !t.is_empty())
            .map(|(i, (t, _))| (t.clone(), i as u32))
            .collect();
        special.sort_by_key(|(t, _)| Reverse(t.len()));
        Ok(Bpe {
            tokens,
            vocab,
            merges,
            byte_ids,
            char_bytes,
            special,
            is_special,
        })
    }

    /// The vocabulary's size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    /// The id of a token written exactly so (`<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.vocab.get(token).copied()
    }

    /// Whether `id` is a special (control) token.
    pub fn is_special(&self, id: u32) -> bool {
        self.is_special.get(id as usize).copied().unwrap_or(false)
    }

    /// The ids of `text`, special tokens written in it included as themselves.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut ids = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The leftmost special token, the longest where several start at one place.
            let hit = self
                .special
                .iter()
                .filter_map(|(t, id)| rest.find(t.as_str()).map(|at| (at, Reverse(t.len()), *id)))
                .min();
            let (plain, next) = match hit {
                Some((at, Reverse(len), id)) => (&rest[..at], Some((id, at + len))),
                None => (rest, None),
            };
            self.encode_plain(plain, &mut ids);
            match next {
                Some((id, end)) => {
                    ids.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        ids
    }

    fn encode_plain(&self, text: &str, ids: &mut Vec<u32>) {
        let mut cache: Map<&str, Vec<u32>> = Map::default();
        for piece in pieces(text) {
            if let Some(hit) = cache.get(piece) {
                ids.extend_from_slice(hit);
                continue;
            }
            let word = self.merge(piece.as_bytes());
            ids.extend_from_slice(&word);
            cache.insert(piece, word);
        }
    }

    /// BPE over one piece's bytes: the lowest-ranked adjacent pair merges first (the leftmost
    /// of equal ranks), through a heap over a linked list, so a long piece costs n log n.
    fn merge(&self, bytes: &[u8]) -> Vec<u32> {
        let mut id: Vec<u32> = bytes
            .iter()
            .filter_map(|&b| self.byte_ids[b as usize])
            .collect();
        let n = id.len();
        if n < 2 {
            return id;
        }
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, id: &[u32], i: usize, j: usize| {
            if let Some(&(rank, to)) = self.merges.get(&(id[i], id[j])) {
                heap.push(Reverse((rank, i, j, id[i], id[j], to)));
            }
        };
        for i in 0..n - 1 {
            push(&mut heap, &id, i, i + 1);
        }
        while let Some(Reverse((_, i, j, l, r, to))) = heap.pop() {
            // Stale entries: either side merged since, or the pair changed.
            if !alive[i] || !alive[j] || next[i] != j || id[i] != l || id[j] != r {
                continue;
            }
            id[i] = to;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            if prev[i] < n {
                push(&mut heap, &id, prev[i], i);
            }
            if next[i] < n {
                push(&mut heap, &id, i, next[i]);
            }
        }
        (0..n).filter(|&i| alive[i]).map(|i| id[i]).collect()
    }

    /// The bytes of `id`'s token: a special token's text, or the bytes its characters stand
    /// for. An id outside the vocabulary gives no bytes.
    pub fn token_bytes(&self, id: u32) -> Vec<u8> {
        let Some(t) = self.tokens.get(id as usize) else {
            return Vec::new();
        };
        if self.is_special(id) {
            return t.as_bytes().to_vec();
        }
        let mut out = Vec::with_capacity(t.len());
        for c in t.chars() {
            match self.char_bytes.get(&c) {
                Some(&b) => out.push(b),
                None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
            }
        }
        out
    }

    /// The text of `ids` (invalid UTF-8, as from a cut sequence, replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.token_bytes(id)).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

#[derive(PartialEq, Clone, Copy)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

fn class(c: char) -> Class {
    if c.is_whitespace() {
        return Class::Space;
    }
    match c.general_category_group() {
        GeneralCategoryGroup::Letter => Class::Letter,
        GeneralCategoryGroup::Number => Class::Number,
        _ => Class::Other,
    }
}

/// The pre-tokenizer: each numeric character (Unicode's Nd, Nl and No: `7`, `٣`, `²`, `Ⅻ`)
/// alone, then GPT-2's pattern over the text between.
fn pieces(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive(char::is_numeric)
        .flat_map(|s| match s.char_indices().last() {
            Some((at, c)) if c.is_numeric() => [&s[..at], &s[at..]],
            _ => [s, ""],
        })
        .filter(|s| !s.is_empty())
        .flat_map(Gpt2Pieces::new)
}

/// GPT-2's pattern, `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
/// as a scanner.
struct Gpt2Pieces<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Gpt2Pieces<'a> {
    fn new(s: &'a str) -> Gpt2Pieces<'a> {
        Gpt2Pieces { s, at: 0 }
    }

    /// The end of the longest run from `from` of characters of class `k`.
    fn run(&self, from: usize, k: Class) -> usize {
        self.s[from..]
            .char_indices()
            .find(|&(_, c)| class(c) != k)
            .map_or(self.s.len(), |(i, _)| from + i)
    }
}

impl<'a> Iterator for Gpt2Pieces<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let rest = &self.s[self.at..];
        let first = rest.chars().next()?;
        let start = self.at;
        let end = 'end: {
            if first == '\'' {
                for c in ["s", "t", "re", "ve", "m", "ll", "d"] {
                    if rest[1..].starts_with(c) {
                        break 'end start + 1 + c.len();
                    }
                }
            }
            // An optional space, then a run of letters, numbers or other symbols.
            let (body, c) = if first == ' ' {
                match rest[1..].chars().next() {
                    Some(c) => (start + 1, c),
                    None => (start, first),
                }
            } else {
                (start, first)
            };
            let k = class(c);
            if k != Class::Space {
                break 'end self.run(body, k);
            }
            // Whitespace: the whole run at the end of the text, else all but its last
            // character (which then leads the next piece), or one lone character.
            let run = self.run(start, Class::Space);
            if run == self.s.len() {
                break 'end run;
            }
            let last = self.s[..run]
                .char_indices()
                .last()
                .map_or(start, |(i, _)| i);
            if last > start {
                last
            } else {
                run
            }
        };
        self.at = end;
        Some(&self.s[start..end])
    }
}
