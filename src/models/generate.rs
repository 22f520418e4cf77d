//! Text generation with an [`Llm`]: the prompt runs in one pass (prefill), then one token at a
//! time against the generation's own KV cache. Greedy picking is an argmax on the device, and
//! only the chosen id comes back; sampling reads back the `top_k` largest logits and their ids
//! (at most [`SAMPLE_CANDIDATES`]), never the whole vocabulary.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::models::decode::{Decoder, KvCache, Picked};
use crate::models::llama::{Llm, Model};
use crate::Tensor;

/// How [`Llm::generate`] picks tokens and when it stops.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerateOptions {
    /// The most tokens to generate.
    pub max_tokens: usize,
    /// 0 picks the most likely token (greedy); above 0 samples from the logits divided by it.
    pub temperature: f32,
    /// Sample among the `top_k` most likely tokens only (0: [`SAMPLE_CANDIDATES`]).
    pub top_k: usize,
    /// Sample among the smallest set of tokens whose probabilities sum to `top_p` (1: off).
    pub top_p: f32,
    /// Seeds the sampler: the same seed, prompt and options give the same tokens.
    pub seed: u64,
    /// Send the prompt as it is, without the chat template.
    pub raw: bool,
    /// Go on past end tokens, to `max_tokens` or a full context (for benchmarks).
    pub ignore_eos: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            max_tokens: 256,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            raw: false,
            ignore_eos: false,
        }
    }
}

/// The most candidates sampling reads back and draws from.
pub const SAMPLE_CANDIDATES: usize = 256;

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model wrote an end token (`<|im_end|>` or end-of-sequence).
    Stop,
    /// `max_tokens` were generated.
    Length,
    /// The context is full.
    ContextFull,
}

/// One generated token and the text it completes.
#[derive(Debug, Clone, PartialEq)]
pub struct Token {
    /// The token's id.
    pub id: u32,
    /// The text this token completes: empty while a character's UTF-8 bytes are split
    /// across tokens, then the whole character.
    pub text: String,
}

/// A generation in progress: call [`Generation::next_token`] (or iterate, natively) for each
/// token as it comes. Each holds its own KV cache, so several may run on one model. Not
/// `Send` (its recorded decode step holds the batch it was recorded from): make and use a
/// generation on one thread (the [`Llm`] itself is `Send` and `Sync`).
pub struct Generation {
    llm: std::sync::Arc<Model>,
    options: GenerateOptions,
    cache: KvCache,
    prompt: Vec<u32>,
    ids: Vec<u32>,
    /// The recorded decode step, made at the first step where the cache is preallocated.
    decoder: Option<Decoder>,
    rng: u64,
    pending: Vec<u8>,
    finish: Option<Finish>,
    prefill_time: Duration,
    decode_time: Duration,
}

fn invalid(reason: impl Into<String>) -> Error {
    Error::InvalidArgument {
        op: "generate",
        reason: reason.into(),
    }
}

impl Llm {
    /// Starts generating an answer to `prompt` (a user message in the chat template, or the
    /// exact text with `raw`). Nothing runs until the first [`Generation::next_token`].
    pub fn generate(&self, prompt: &str, options: GenerateOptions) -> Result<Generation> {
        let o = options;
        let text = if o.raw {
            prompt.to_string()
        } else {
            Llm::chat_prompt(prompt)
        };
        self.generate_ids(self.model.tokenizer.encode(&text), options)
    }

    /// [`Llm::generate`] from token ids (the prompt already tokenized, template included).
    pub fn generate_ids(&self, ids: Vec<u32>, options: GenerateOptions) -> Result<Generation> {
        let o = options;
        if !(o.temperature.is_finite() && o.temperature >= 0.0) {
            return Err(invalid(format!(
                "temperature must be finite and >= 0, got {}",
                o.temperature
            )));
        }
        if !(o.top_p > 0.0 && o.top_p <= 1.0) {
            return Err(invalid(format!("top_p must be in (0, 1], got {}", o.top_p)));
        }
        let m = &self.model;
        if let Some(bad) = ids.iter().find(|&&id| id as usize >= m.config.vocab) {
            return Err(invalid(format!(
                "token id {bad} is not below the vocabulary size {}",
                m.config.vocab
            )));
        }
        if ids.is_empty() {
            return Err(invalid(
                "the prompt is empty (there is nothing to continue)",
            ));
        }
        if ids.len() >= m.context {
            return Err(invalid(format!(
                "the prompt is {} tokens; the context holds {} (prompt and answer)",
                ids.len(),
                m.context
            )));
        }
        // Room for the prompt and every new token but the last (which is never run).
        let capacity = ids.len().saturating_add(o.max_tokens).min(m.context);
        Ok(Generation {
            llm: m.clone(),
            options,
            cache: KvCache::new(m, capacity)?,
            prompt: ids,
            ids: Vec::new(),
            decoder: None,
            rng: o.seed ^ 0x9e37_79b9_7f4a_7c15,
            pending: Vec::new(),
            finish: None,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
        })
    }
}

impl Generation {
    /// The prompt's token ids (with the chat template, unless raw).
    pub fn prompt_ids(&self) -> &[u32] {
        &self.prompt
    }

    /// The ids generated so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Why the generation ended, once it has.
    pub fn finish(&self) -> Option<Finish> {
        self.finish
    }

    /// Time spent in the prefill (to its first logits read back) and in the steps after.
    pub fn timings(&self) -> (Duration, Duration) {
        (self.prefill_time, self.decode_time)
    }

    /// The next token, or `None` once the generation has ended (see [`Generation::finish`]).
    pub async fn next_token(&mut self) -> Option<Result<Token>> {
        if self.finish.is_some() {
            return None;
        }
        match self.step().await {
            Ok(t) => t.map(Ok),
            Err(e) => {
                self.finish = Some(Finish::Stop);
                Some(Err(e))
            }
        }
    }

    async fn step(&mut self) -> Result<Option<Token>> {
        let start = web_time::Instant::now();
        let id = match self.ids.last().copied() {
            None => {
                let prompt = self.prompt.clone();
                let (llm, cache) = (&self.llm, &mut self.cache);
                let logits = llm
                    .device
                    .run_on_host_threads(|| llm.forward(&prompt, cache))?;
                let id = self.pick(&logits).await?;
                self.prefill_time += start.elapsed();
                id
            }
            Some(last) => {
                let id = self.decode(last).await?;
                self.decode_time += start.elapsed();
                id
            }
        };
        if !self.options.ignore_eos && self.llm.stop_ids.contains(&id) {
            self.finish = Some(Finish::Stop);
            return Ok(None);
        }
        self.ids.push(id);
        if self.ids.len() >= self.options.max_tokens {
            self.finish = Some(Finish::Length);
        } else if self.cache.len >= self.llm.context {
            self.finish = Some(Finish::ContextFull);
        }
        Ok(Some(Token {
            id,
            text: self.text_of(id),
        }))
    }

    /// Runs token `last` at the next position and picks the one after it: through the
    /// recorded step where the cache is preallocated, op by op elsewhere.
    async fn decode(&mut self, last: u32) -> Result<u32> {
        if self.cache.capacity().is_none() {
            let (llm, cache) = (&self.llm, &mut self.cache);
            let logits = llm
                .device
                .run_on_host_threads(|| llm.forward(&[last], cache))?;
            return self.pick(&logits).await;
        }
        let decoder = match &mut self.decoder {
            Some(d) => d,
            None => self
                .decoder
                .insert(Decoder::new(&self.llm, &self.cache, self.candidates())?),
        };
        match decoder.step(&self.llm, last, &mut self.cache).await? {
            Picked::Id(id) => Ok(id),
            Picked::Candidates(values, ids) => Ok(self.sample(&values, &ids)),
        }
    }

    /// How many of the largest logits sampling draws from; `None` when greedy.
    fn candidates(&self) -> Option<usize> {
        let o = self.options;
        if o.temperature == 0.0 {
            return None;
        }
        let k = match o.top_k {
            0 => SAMPLE_CANDIDATES,
            k => k.min(SAMPLE_CANDIDATES),
        };
        Some(k.min(self.llm.config.vocab))
    }

    /// Draws one of `ids` (the largest logits `values`, largest first).
    fn sample(&mut self, values: &[f32], ids: &[u32]) -> u32 {
        let draw = next_uniform(&mut self.rng);
        sample(
            values,
            ids,
            self.options.temperature,
            self.options.top_p,
            draw,
        )
    }

    /// The bytes of `id` added to any incomplete character before them; the complete
    /// characters come out, the rest waits for the next token.
    fn text_of(&mut self, id: u32) -> String {
        self.pending
            .extend_from_slice(&self.llm.tokenizer.token_bytes(id));
        let valid = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            // An incomplete sequence at the end waits; an invalid one is replaced.
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        let out: Vec<u8> = self.pending.drain(..valid).collect();
        let mut text = String::from_utf8_lossy(&out).into_owned();
        if self.finish.is_some() && !self.pending.is_empty() {
            text.push_str(&String::from_utf8_lossy(&std::mem::take(&mut self.pending)));
        }
        text
    }

    async fn pick(&mut self, logits: &Tensor) -> Result<u32> {
        let Some(k) = self.candidates() else {
            let id = logits.argmax_last()?.read_as::<u32>().await?;
            return id.first().copied().ok_or_else(|| invalid("no logits"));
        };
        let (values, indices) = logits.topk_last(k)?;
        let values = values.read().await?;
        let indices = indices.read_as::<u32>().await?;
        Ok(self.sample(&values, &indices))
    }
}

/// Picks from candidates sorted by logit, largest first: softmax of `logits / temperature`,
/// cut to the smallest prefix whose probability reaches `top_p`, then the token where the
/// cumulative probability passes `draw` (in [0, 1)). NaN logits count as impossible.
pub(crate) fn sample(logits: &[f32], ids: &[u32], temperature: f32, top_p: f32, draw: f64) -> u32 {
    let max = logits.first().copied().unwrap_or(0.0) as f64;
    let mut p: Vec<f64> = logits
        .iter()
        .map(|&l| {
            let e = ((l as f64 - max) / temperature as f64).exp();
            if e.is_nan() {
                0.0
            } else {
                e
            }
        })
        .collect();
    let total: f64 = p.iter().sum();
    let n = p.len();
    let mut kept = n;
    let mut acc = 0.0;
    for (i, x) in p.iter_mut().enumerate() {
        *x /= total;
        acc += *x;
        if acc >= top_p as f64 && kept == n {
            kept = i + 1;
        }
    }
    let mass: f64 = p[..kept].iter().sum();
    let mut acc = 0.0;
    for i in 0..kept {
        acc += p[i] / mass;
        if draw < acc {
            return ids[i];
        }
    }
    ids[kept.saturating_sub(1)]
}

/// SplitMix64, as a uniform draw in [0, 1).
fn next_uniform(state: &mut u64) -> f64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(not(target_arch = "wasm32"))]
impl Iterator for Generation {
    type Item = Result<Token>;

    /// Blocking [`Generation::next_token`].
    fn next(&mut self) -> Option<Result<Token>> {
        pollster::block_on(self.next_token())
    }
}
