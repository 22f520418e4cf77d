//! `Embedder` in JS (feature `models`, the package's `gpukit/models` entry): loads
//! all-MiniLM-L6-v2 from a URL (with progress and an optional Cache Storage copy) or from bytes,
//! and embeds strings. The core entry is built without it.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Float32Array, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

use super::download::{bytes, file_url, float_dtype, text, Download, JsResult};
use super::gpu::JsGpu;
use super::{describe, js_error, property};
use crate::models::bert::Buckets;
use crate::models::{Embedder, EmbedderOptions};

/// The most texts, and characters a text, that `embed` sends through a kept compiled graph
/// (larger calls run eagerly, so the kept buckets' activations stay small).
const REPLAY_TEXTS: usize = 16;
const REPLAY_CHARS: usize = 512;

#[wasm_bindgen(typescript_custom_section)]
const TS_MODELS: &'static str = r#"
/** The three files of a model, as bytes or text (`Embedder.load(gpu, files)`). */
export interface EmbedderFiles {
  /** config.json */
  config: string | Uint8Array;
  /** tokenizer.json */
  tokenizer: string | Uint8Array;
  /** model.safetensors (f32, f16 or bf16 weights) */
  weights: Uint8Array | ArrayBuffer;
}
/** Download progress: bytes so far and in all (null when a server does not say). */
export interface LoadProgress {
  file: string;
  loaded: number;
  total: number | null;
}
export interface EmbedderLoadOptions {
  /** Called as the files download (several times a second at most per chunk). */
  onProgress?: (progress: LoadProgress) => void;
  /** A Cache Storage name: files found there are not downloaded again, and downloads are
   *  stored there. Ignored where Cache Storage is missing (Node, insecure origins). */
  cache?: string;
  /** The linear layers' weights: "f32" (the default), "f16" or "bf16". Half weights are kept
   *  as such on WebGPU and on the wasm CPU backend, which multiply by them as stored: half
   *  the memory and of the bytes each product reads (`weightDtype` says what was kept). */
  weights?: "f32" | "f16" | "bf16";
}
"#;

/// A sentence embedder (all-MiniLM-L6-v2 and other BERT encoders of its shape) on a `Gpu`.
#[wasm_bindgen(js_name = Embedder)]
pub struct JsEmbedder {
    inner: Rc<Embedder>,
    /// Compiled graphs of small calls' (batch, length) buckets, replayed with new ids; taken
    /// out while a call replays them (`None`: busy).
    buckets: Rc<RefCell<Option<Buckets>>>,
}

/// The texts of `embed`: an array of strings (a string with lone surrogates is read with
/// U+FFFD in their place) or of UTF-8 bytes (invalid UTF-8 is an error naming the text).
fn texts(value: &JsValue) -> JsResult<Vec<String>> {
    if !Array::is_array(value) {
        return Err(js_error(format!(
            "embed takes an array of strings, got {}",
            describe(value)
        )));
    }
    Array::from(value)
        .iter()
        .enumerate()
        .map(|(i, v)| match v.as_string() {
            Some(s) => Ok(s),
            None if v.has_type::<Uint8Array>() => String::from_utf8(Uint8Array::from(v).to_vec())
                .map_err(|e| js_error(format!("embed: text {i} is not valid UTF-8 ({e})"))),
            None => Err(js_error(format!(
                "embed: text {i} must be a string or a Uint8Array of UTF-8, got {}",
                describe(&v)
            ))),
        })
        .collect()
}

#[wasm_bindgen(js_class = Embedder)]
impl JsEmbedder {
    /// Loads a model onto `gpu`: from a folder URL holding `config.json`, `tokenizer.json`
    /// and `model.safetensors`, or from the files' bytes (`{ config, tokenizer, weights }`).
    #[wasm_bindgen(unchecked_return_type = "Promise<Embedder>")]
    pub fn load(
        gpu: &JsGpu,
        #[wasm_bindgen(unchecked_param_type = "string | EmbedderFiles")] source: JsValue,
        #[wasm_bindgen(unchecked_optional_param_type = "EmbedderLoadOptions")] options: JsValue,
    ) -> Promise {
        let device = gpu.device().clone();
        future_to_promise(async move {
            let mut download = Download::new(&options, "Embedder.load", &["weights"]).await?;
            let weights_dtype = float_dtype(&options, "weights", "Embedder.load weights")?;
            let (config, tokenizer, weights) = if let Some(base) = source.as_string() {
                let names = ["config.json", "tokenizer.json", "model.safetensors"];
                let files: Vec<(&str, String)> =
                    names.iter().map(|&n| (n, file_url(&base, n))).collect();
                let mut got = download.fetch(&files).await?.into_iter();
                let mut next = |name: &str| {
                    got.next()
                        .ok_or_else(|| js_error(format!("{name} was not read")))
                };
                let utf8 = |b: Vec<u8>, name: &str| {
                    String::from_utf8(b).map_err(|_| js_error(format!("{name} is not UTF-8")))
                };
                let config = utf8(next("config.json")?, "config.json")?;
                let tokenizer = utf8(next("tokenizer.json")?, "tokenizer.json")?;
                (config, tokenizer, next("model.safetensors")?)
            } else if source.is_object() {
                (
                    text(&property(&source, "config"), "config")?,
                    text(&property(&source, "tokenizer"), "tokenizer")?,
                    bytes(&property(&source, "weights"), "weights")?,
                )
            } else {
                return Err(js_error(format!(
                    "Embedder.load takes a folder URL or {{ config, tokenizer, weights }}, got {}",
                    describe(&source)
                ))
                .into());
            };
            let options = EmbedderOptions {
                weights: weights_dtype,
            };
            let inner = Embedder::from_bytes_with(&device, &config, &tokenizer, &weights, options)
                .map_err(js_error)?;
            Ok(JsEmbedder {
                inner: Rc::new(inner),
                buckets: Rc::new(RefCell::new(Some(Buckets::default()))),
            }
            .into())
        })
    }

    /// One L2-normalised embedding per text, in order (a `Float32Array` of `dim` values each).
    /// Texts past 512 tokens are truncated; any number of texts is split into batches. A
    /// call of at most 16 texts of at most 512 characters replays a compiled graph of its
    /// (batch, length) bucket, recorded on first use (the results equal the eager pass's);
    /// larger calls, and calls made while another is replaying, run eagerly.
    #[wasm_bindgen(unchecked_return_type = "Promise<Float32Array[]>")]
    pub fn embed(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(string | Uint8Array)[]")] texts: JsValue,
    ) -> JsResult<Promise> {
        let texts = self::texts(&texts)?;
        let inner = self.inner.clone();
        let buckets = self.buckets.clone();
        Ok(future_to_promise(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let small = refs.len() <= REPLAY_TEXTS && refs.iter().all(|t| t.len() <= REPLAY_CHARS);
            let replay = if small {
                buckets.borrow_mut().take()
            } else {
                None
            };
            let vectors = match replay {
                Some(mut b) => {
                    let v = b.embed(&inner, &refs).await;
                    *buckets.borrow_mut() = Some(b);
                    v
                }
                None => inner.embed(&refs).await,
            }
            .map_err(js_error)?;
            Ok(vectors
                .iter()
                .map(|v| JsValue::from(Float32Array::from(&v[..])))
                .collect::<Array>()
                .into())
        }))
    }

    /// The token ids of `text` as the model sees it (`[CLS] ... [SEP]`, at most 512).
    pub fn tokenize(&self, text: &str) -> Vec<u32> {
        self.inner.tokenizer().encode(text)
    }

    /// The dtype the linear layers' weights are kept in: "f32", "f16" or "bf16".
    #[wasm_bindgen(getter, js_name = weightDtype)]
    pub fn weight_dtype(&self) -> String {
        self.inner.weight_dtype().name().to_string()
    }

    /// The width of an embedding (384 for all-MiniLM-L6-v2).
    #[wasm_bindgen(getter)]
    pub fn dim(&self) -> usize {
        self.inner.dim()
    }

    /// The most tokens of a text (longer texts are truncated).
    #[wasm_bindgen(getter, js_name = maxTokens)]
    pub fn max_tokens(&self) -> usize {
        self.inner.config().max_positions
    }
}
