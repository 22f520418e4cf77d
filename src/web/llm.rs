//! `Llm` in JS (the package's `gpukit/models` entry): loads a llama GGUF (SmolLM2-135M-Instruct)
//! from a URL (with progress and an optional Cache Storage copy) or from bytes, and streams
//! answers: `for await (const piece of llm.generate(prompt, options))`.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Float32Array, Object, Promise, Reflect, Symbol, Uint32Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::download::{bytes, float_dtype, Download, JsResult};
use super::gpu::JsGpu;
use super::{describe, js_error, property};
use crate::models::{Finish, GenerateOptions, Generation, Llm, LlmOptions};

#[wasm_bindgen(typescript_custom_section)]
const TS_LLM: &'static str = r#"
export interface LlmLoadOptions {
  /** Called as the file downloads. */
  onProgress?: (progress: LoadProgress) => void;
  /** A Cache Storage name: a file found there is not downloaded again (see EmbedderLoadOptions). */
  cache?: string;
  /** Tokens (prompt and answer) a generation may hold; 2048 (or the model's, if less) by default. */
  context?: number;
  /** The KV cache's dtype: "f32" (the default), or "f16" or "bf16" for half the memory. */
  kvCache?: "f32" | "f16" | "bf16";
}
export interface GenerateOptions {
  /** The most tokens to generate (256). */
  maxTokens?: number;
  /** 0 (the default) picks the most likely token; above 0 samples. */
  temperature?: number;
  /** Sample among the k most likely tokens (0: the 256 most likely). */
  topK?: number;
  /** Sample among the tokens whose probabilities sum to p (1: off). */
  topP?: number;
  /** Seeds the sampler. */
  seed?: number;
  /** Send the prompt as it is, without the chat template. */
  raw?: boolean;
  /** Go on past end tokens, to maxTokens or a full context (for benchmarks). */
  ignoreEos?: boolean;
  /** Aborts the answer: a pending or later `next()` rejects with the signal's reason (an
   *  "AbortError" DOMException unless given another) at once, and `finish` is "aborted". A
   *  token being computed completes in the background and is dropped. */
  signal?: AbortSignal;
}
export interface Generation {
  [Symbol.asyncIterator](): AsyncIterator<string, undefined>;
}
"#;

/// A llama-architecture chat model on a `Gpu`.
#[wasm_bindgen(js_name = Llm)]
pub struct JsLlm {
    inner: Llm,
}

/// What `next()` and `stop()` share.
struct State {
    generation: Option<Generation>,
    stopped: bool,
    finish: Option<&'static str>,
    /// The ids and timings, kept once the generation is gone.
    ids: Vec<u32>,
    prompt: Vec<u32>,
    rates: (f64, f64),
    /// The last `next()` promise: a new one waits for it, so calls made at once run in turn.
    tail: Option<Promise>,
    /// The options' AbortSignal, and a promise that rejects with its reason when it aborts.
    abort: Option<(JsValue, Promise)>,
}

/// Whether `signal` has aborted.
fn aborted(signal: &JsValue) -> bool {
    property(signal, "aborted").as_bool() == Some(true)
}

/// A promise that rejects with `signal`'s reason once it aborts (at once if it has), marked
/// handled so that an abort with no `next()` pending is not an unhandled rejection.
fn on_abort(signal: &JsValue) -> JsResult<Promise> {
    let make = js_sys::Function::new_with_args(
        "signal",
        "const p = new Promise((_, reject) => { \
           if (signal.aborted) reject(signal.reason); \
           else signal.addEventListener('abort', () => reject(signal.reason), { once: true }); \
         }); \
         p.catch(() => {}); \
         return p;",
    );
    make.call1(&JsValue::NULL, signal)
        .map(Promise::unchecked_from_js)
        .map_err(|e| js_error(format!("generate: the signal could not be watched: {e:?}")))
}

/// One answer in progress: an async iterator of text pieces.
#[wasm_bindgen(js_name = Generation)]
pub struct JsGeneration {
    state: Rc<RefCell<State>>,
}

/// The generate options, and the AbortSignal among them.
fn options(o: &JsValue) -> JsResult<(GenerateOptions, Option<JsValue>)> {
    let mut out = GenerateOptions::default();
    let mut signal = None;
    if o.is_undefined() || o.is_null() {
        return Ok((out, signal));
    }
    if !o.is_object() {
        return Err(js_error(format!(
            "generate options must be an object, got {}",
            describe(o)
        )));
    }
    for key in Object::keys(o.unchecked_ref::<Object>()).iter() {
        let key = key.as_string().unwrap_or_default();
        let v = property(o, &key);
        let number = |min: f64, max: f64| -> JsResult<f64> {
            v.as_f64()
                .filter(|x| x.is_finite() && *x >= min && *x <= max)
                .ok_or_else(|| {
                    js_error(format!(
                        "generate: {key} must be a number in [{min}, {max}], got {}",
                        describe(&v)
                    ))
                })
        };
        let whole = |x: f64| -> JsResult<f64> {
            if x.fract() == 0.0 {
                Ok(x)
            } else {
                Err(js_error(format!("generate: {key} must be a whole number")))
            }
        };
        match key.as_str() {
            "maxTokens" => out.max_tokens = whole(number(1.0, 1e9)?)? as usize,
            "temperature" => out.temperature = number(0.0, 1e6)? as f32,
            "topK" => out.top_k = whole(number(0.0, 1e9)?)? as usize,
            "topP" => out.top_p = number(1e-9, 1.0)? as f32,
            "seed" => out.seed = whole(number(0.0, 9_007_199_254_740_991.0)?)? as u64,
            "signal" => {
                let check = js_sys::Function::new_with_args(
                    "v",
                    "return typeof AbortSignal === 'function' && v instanceof AbortSignal",
                );
                let is_signal = check
                    .call1(&JsValue::NULL, &v)
                    .ok()
                    .and_then(|r| r.as_bool());
                if is_signal != Some(true) {
                    return Err(js_error(format!(
                        "generate: signal must be an AbortSignal, got {}",
                        describe(&v)
                    )));
                }
                signal = Some(v);
            }
            "raw" | "ignoreEos" => {
                let b = v.as_bool().ok_or_else(|| {
                    js_error(format!(
                        "generate: {key} must be a boolean, got {}",
                        describe(&v)
                    ))
                })?;
                match key.as_str() {
                    "raw" => out.raw = b,
                    _ => out.ignore_eos = b,
                }
            }
            _ => {
                return Err(js_error(format!(
                    "generate options: unknown key {key:?} (expected maxTokens, temperature, \
                     topK, topP, seed, raw, ignoreEos, signal)"
                )))
            }
        }
    }
    Ok((out, signal))
}

fn finish_name(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ContextFull => "context",
    }
}

#[wasm_bindgen(js_class = Llm)]
impl JsLlm {
    /// Loads a GGUF file onto `gpu`, from a URL or from its bytes.
    #[wasm_bindgen(unchecked_return_type = "Promise<Llm>")]
    pub fn load(
        gpu: &JsGpu,
        #[wasm_bindgen(unchecked_param_type = "string | Uint8Array | ArrayBuffer")] source: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "LlmLoadOptions")] options: JsValue,
    ) -> Promise {
        let device = gpu.device().clone();
        future_to_promise(async move {
            let mut download = Download::new(&options, "Llm.load", &["context", "kvCache"]).await?;
            let context = match property(&options, "context") {
                v if v.is_undefined() || v.is_null() => None,
                v => Some(
                    v.as_f64()
                        .filter(|x| *x >= 1.0 && x.fract() == 0.0 && *x <= 1e9)
                        .ok_or_else(|| {
                            js_error(format!(
                                "Llm.load context must be a positive whole number, got {}",
                                describe(&v)
                            ))
                        })? as usize,
                ),
            };
            let kv_cache = float_dtype(&options, "kvCache", "Llm.load kvCache")?;
            let file = match source.as_string() {
                Some(url) => {
                    let name = url.rsplit('/').next().unwrap_or("model.gguf").to_string();
                    let mut got = download.fetch(&[(&name, url.clone())]).await?;
                    got.pop()
                        .ok_or_else(|| js_error(format!("{url} was not read")))?
                }
                None => bytes(&source, "Llm.load source").map_err(|_| {
                    js_error(format!(
                        "Llm.load takes a URL or the GGUF's bytes (Uint8Array, ArrayBuffer), got {}",
                        describe(&source)
                    ))
                })?,
            };
            let options = LlmOptions {
                context,
                kv_cache,
                ..Default::default()
            };
            let inner = Llm::from_bytes(&device, &file, options).map_err(js_error)?;
            Ok(JsLlm { inner }.into())
        })
    }

    /// Starts an answer to `prompt` (a user message, put in the chat template unless `raw`):
    /// an async iterator of text pieces, one per token (empty while a character's bytes are
    /// split across tokens). Several may run at once on one model.
    #[wasm_bindgen(unchecked_return_type = "Generation")]
    pub fn generate(
        &self,
        prompt: &str,
        #[wasm_bindgen(unchecked_optional_param_type = "GenerateOptions")] options: JsValue,
    ) -> JsResult<JsValue> {
        let (options, signal) = self::options(&options)?;
        let abort = match signal {
            Some(signal) => {
                let watch = on_abort(&signal)?;
                Some((signal, watch))
            }
            None => None,
        };
        let g = self.inner.generate(prompt, options).map_err(js_error)?;
        let prompt = g.prompt_ids().to_vec();
        let state = State {
            generation: Some(g),
            stopped: false,
            finish: None,
            ids: Vec::new(),
            prompt,
            rates: (0.0, 0.0),
            tail: None,
            abort,
        };
        let out = JsValue::from(JsGeneration {
            state: Rc::new(RefCell::new(state)),
        });
        // The object is its own async iterator (`for await` calls this, then next()).
        let itself = js_sys::Function::new_no_args("return this");
        Reflect::set(&out, &Symbol::async_iterator(), &itself)
            .map_err(|_| js_error("generate: the iterator could not be made"))?;
        Ok(out)
    }

    /// The token ids of `text` (special tokens written in it included as themselves).
    pub fn tokenize(&self, text: &str) -> Uint32Array {
        Uint32Array::from(&self.inner.tokenizer().encode(text)[..])
    }

    /// The text of token ids.
    pub fn detokenize(&self, ids: &[u32]) -> String {
        self.inner.tokenizer().decode(ids)
    }

    /// The logits of the token after `ids` (run from an empty context), for checks and scoring.
    #[wasm_bindgen(unchecked_return_type = "Promise<Float32Array>")]
    pub fn logits(&self, ids: Vec<u32>) -> Promise {
        let llm = self.inner.clone();
        future_to_promise(async move {
            let l = llm.logits(&ids).await.map_err(js_error)?;
            Ok(Float32Array::from(&l[..]).into())
        })
    }

    /// Tokens (prompt and answer) one generation may hold.
    #[wasm_bindgen(getter)]
    pub fn context(&self) -> usize {
        self.inner.context()
    }

    /// The KV cache's dtype: "f32", "f16" or "bf16".
    #[wasm_bindgen(getter, js_name = kvCache)]
    pub fn kv_cache(&self) -> String {
        self.inner.kv_cache_dtype().name().to_string()
    }

    /// The chat template's text for one user message.
    #[wasm_bindgen(js_name = chatPrompt)]
    pub fn chat_prompt(message: &str) -> String {
        Llm::chat_prompt(message)
    }
}

fn result(done: bool, value: JsValue) -> JsValue {
    let o = Object::new();
    let _ = Reflect::set(&o, &"done".into(), &done.into());
    let _ = Reflect::set(&o, &"value".into(), &value);
    o.into()
}

#[wasm_bindgen(js_class = Generation)]
impl JsGeneration {
    /// The next text piece (`{ done: false, value }`), or `{ done: true }` once the answer
    /// ended (see `finish`). Calls made before the last one resolved run in turn.
    #[wasm_bindgen(unchecked_return_type = "Promise<IteratorResult<string, undefined>>")]
    pub fn next(&self) -> Promise {
        let state = self.state.clone();
        let before = self.state.borrow_mut().tail.take();
        let p = future_to_promise(async move {
            if let Some(before) = before {
                // Its outcome went to its own caller; this one only waits its turn.
                let _ = wasm_bindgen_futures::JsFuture::from(before).await;
            }
            let taken = {
                let mut s = state.borrow_mut();
                if s.abort.as_ref().is_some_and(|(signal, _)| aborted(signal)) {
                    s.finish.get_or_insert("aborted");
                    // The outward promise rejects with the reason through the race below.
                    return Ok(result(true, JsValue::UNDEFINED));
                }
                if s.stopped || s.finish.is_some() {
                    return Ok(result(true, JsValue::UNDEFINED));
                }
                s.generation.take()
            };
            let Some(mut g) = taken else {
                return Err(
                    js_error("Generation.next: the previous next() has not finished").into(),
                );
            };
            let step = g.next_token().await;
            let mut s = state.borrow_mut();
            if s.abort.as_ref().is_some_and(|(signal, _)| aborted(signal)) {
                s.finish.get_or_insert("aborted");
            }
            s.ids = g.ids().to_vec();
            let (p, d) = g.timings();
            let steps = g.ids().len().saturating_sub(1) as f64;
            s.rates = (
                s.prompt.len() as f64 / p.as_secs_f64().max(1e-9),
                steps / d.as_secs_f64().max(1e-9),
            );
            if let Some(f) = g.finish() {
                s.finish = Some(finish_name(f));
            }
            s.generation = Some(g);
            match step {
                Some(Ok(t)) => Ok(result(false, t.text.into())),
                Some(Err(e)) => Err(js_error(e).into()),
                None => Ok(result(true, JsValue::UNDEFINED)),
            }
        });
        let mut s = self.state.borrow_mut();
        s.tail = Some(p.clone());
        match &s.abort {
            // Whichever settles first: the step, or the signal's abort (rejecting at once).
            Some((_, watch)) => Promise::race(&js_sys::Array::of2(watch, &p)),
            None => p,
        }
    }

    /// Ends the generation (as `break` in `for await` does): the next `next()` is done; a
    /// token being computed still completes. (An AbortSignal in the options also rejects a
    /// pending `next()` at once.)
    #[wasm_bindgen(js_name = "return")]
    pub fn stop(&self) -> Promise {
        let mut s = self.state.borrow_mut();
        s.stopped = true;
        if s.finish.is_none() {
            s.finish = Some("stopped");
        }
        Promise::resolve(&result(true, JsValue::UNDEFINED))
    }

    /// Why it ended: "stop" (an end token), "length" (maxTokens), "context" (the context is
    /// full), "stopped" (`return()`/`break`), "aborted" (the options' signal); null while it
    /// runs.
    #[wasm_bindgen(getter, unchecked_return_type = "string | null")]
    pub fn finish(&self) -> JsValue {
        let s = self.state.borrow();
        let abort = s.abort.as_ref().is_some_and(|(signal, _)| aborted(signal));
        match s.finish {
            Some(f) => JsValue::from(f),
            // Aborted while a token is computed: that token will be dropped.
            None if abort => JsValue::from("aborted"),
            None => JsValue::NULL,
        }
    }

    /// The ids generated so far.
    #[wasm_bindgen(getter)]
    pub fn ids(&self) -> Uint32Array {
        Uint32Array::from(&self.state.borrow().ids[..])
    }

    /// The prompt's ids (template included).
    #[wasm_bindgen(getter, js_name = promptIds)]
    pub fn prompt_ids(&self) -> Uint32Array {
        Uint32Array::from(&self.state.borrow().prompt[..])
    }

    /// Prompt tokens per second of the prefill (to the first token).
    #[wasm_bindgen(getter, js_name = prefillTokensPerSecond)]
    pub fn prefill_rate(&self) -> f64 {
        self.state.borrow().rates.0
    }

    /// Tokens per second of the steps after the first.
    #[wasm_bindgen(getter, js_name = decodeTokensPerSecond)]
    pub fn decode_rate(&self) -> f64 {
        self.state.borrow().rates.1
    }
}
