//! `Embedder` in JS (feature `models`, the package's `gpukit/models` entry): loads
//! all-MiniLM-L6-v2 from a URL (with progress and an optional Cache Storage copy) or from bytes,
//! and embeds strings. The core entry is built without it.

use std::rc::Rc;

use js_sys::{Array, Float32Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{future_to_promise, JsFuture};

use super::gpu::JsGpu;
use super::{describe, js_error, property};
use crate::models::Embedder;

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
}
"#;

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_name = fetch)]
    fn global_fetch(url: &str) -> Result<Promise, JsValue>;
}

/// A sentence embedder (all-MiniLM-L6-v2 and other BERT encoders of its shape) on a `Gpu`.
#[wasm_bindgen(js_name = Embedder)]
pub struct JsEmbedder {
    inner: Rc<Embedder>,
}

type JsResult<T> = Result<T, JsError>;

/// The message of a thrown JS value.
fn message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_else(|| describe(e))
}

async fn wait(p: JsValue, what: &str) -> JsResult<JsValue> {
    let p = p
        .dyn_into::<Promise>()
        .map_err(|_| js_error(format!("{what}: not a Promise")))?;
    JsFuture::from(p)
        .await
        .map_err(|e| js_error(format!("{what}: {}", message(&e))))
}

/// `target.name(args..)`, awaited when it returns a Promise.
async fn call(target: &JsValue, name: &str, args: &[JsValue], what: &str) -> JsResult<JsValue> {
    let f = property(target, name)
        .dyn_into::<Function>()
        .map_err(|_| js_error(format!("{what}: no {name}()")))?;
    let r = f
        .apply(target, &args.iter().collect::<Array>())
        .map_err(|e| js_error(format!("{what}: {}", message(&e))))?;
    if r.has_type::<Promise>() {
        wait(r, what).await
    } else {
        Ok(r)
    }
}

/// A file of the model folder at `base` (a URL, relative to the page or absolute).
fn file_url(base: &str, name: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{name}")
    } else {
        format!("{base}/{name}")
    }
}

/// Where downloads come from and go: the responses, the Cache Storage and the progress.
struct Download {
    cache: Option<JsValue>,
    on_progress: Option<Function>,
    loaded: f64,
    total: Option<f64>,
}

impl Download {
    async fn new(options: &JsValue) -> JsResult<Download> {
        if !(options.is_undefined() || options.is_null() || options.is_object()) {
            return Err(js_error(format!(
                "Embedder.load options must be an object, got {}",
                describe(options)
            )));
        }
        if options.is_object() {
            for key in Object::keys(options.unchecked_ref::<Object>()).iter() {
                let key = key.as_string().unwrap_or_default();
                if key != "onProgress" && key != "cache" {
                    return Err(js_error(format!(
                        "Embedder.load options: unknown key {key:?} (expected onProgress, cache)"
                    )));
                }
            }
        }
        let on_progress = match property(options, "onProgress") {
            v if v.is_undefined() || v.is_null() => None,
            v => Some(v.dyn_into::<Function>().map_err(|v| {
                js_error(format!(
                    "Embedder.load onProgress must be a function, got {}",
                    describe(&v)
                ))
            })?),
        };
        let cache = match property(options, "cache") {
            v if v.is_undefined() || v.is_null() => None,
            v => {
                let name = v.as_string().ok_or_else(|| {
                    js_error(format!(
                        "Embedder.load cache must be a string, got {}",
                        describe(&v)
                    ))
                })?;
                let caches = property(&js_sys::global(), "caches");
                if caches.is_object() {
                    Some(call(&caches, "open", &[name.into()], "opening the cache").await?)
                } else {
                    None
                }
            }
        };
        Ok(Download {
            cache,
            on_progress,
            loaded: 0.0,
            total: Some(0.0),
        })
    }

    /// The response for `url`: from the cache when it holds one, else from the network.
    async fn open(&mut self, url: &str) -> JsResult<(JsValue, bool)> {
        if let Some(cache) = &self.cache {
            let hit = call(cache, "match", &[url.into()], "reading the cache").await?;
            if hit.is_object() {
                return Ok((hit, true));
            }
        }
        let what = format!("fetching {url}");
        let promise = global_fetch(url)
            .map_err(|e| js_error(format!("{what}: {} (is fetch available?)", message(&e))))?;
        let response = wait(promise.into(), &what).await?;
        if property(&response, "ok").as_bool() != Some(true) {
            let status = property(&response, "status").as_f64().unwrap_or(0.0);
            return Err(js_error(format!("{what}: HTTP status {status}")));
        }
        Ok((response, false))
    }

    fn progress(&self, file: &str) -> JsResult<()> {
        let Some(f) = &self.on_progress else {
            return Ok(());
        };
        let p = Object::new();
        let set = |k: &str, v: JsValue| Reflect::set(&p, &k.into(), &v).map(drop);
        set("file", file.into())
            .and_then(|_| set("loaded", self.loaded.into()))
            .and_then(|_| set("total", self.total.map_or(JsValue::NULL, JsValue::from)))
            .map_err(|_| JsError::new("progress could not be built"))?;
        f.call1(&JsValue::UNDEFINED, &p)
            .map(drop)
            .map_err(|e| js_error(format!("onProgress threw: {}", message(&e))))
    }

    /// The whole body of `response`, reporting progress per chunk.
    async fn read(&mut self, file: &str, url: &str, response: &JsValue) -> JsResult<Vec<u8>> {
        let what = format!("reading {url}");
        let body = property(response, "body");
        let reader = if body.is_object() {
            call(&body, "getReader", &[], &what).await.ok()
        } else {
            None
        };
        let Some(reader) = reader else {
            // No stream (older runtimes): the whole body at once.
            let buf = call(response, "arrayBuffer", &[], &what).await?;
            let bytes = Uint8Array::new(&buf).to_vec();
            self.loaded += bytes.len() as f64;
            self.progress(file)?;
            return Ok(bytes);
        };
        let mut bytes = Vec::new();
        loop {
            let chunk = call(&reader, "read", &[], &what).await?;
            if property(&chunk, "done").as_bool() == Some(true) {
                break;
            }
            let value = property(&chunk, "value")
                .dyn_into::<Uint8Array>()
                .map_err(|_| js_error(format!("{what}: a chunk is not a Uint8Array")))?;
            let at = bytes.len();
            let n = value.length() as usize;
            let end = at
                .checked_add(n)
                .ok_or_else(|| js_error(format!("{what}: too large")))?;
            bytes
                .try_reserve(n)
                .map_err(|_| js_error(format!("{what}: out of memory at {end} bytes")))?;
            bytes.resize(end, 0);
            value.copy_to(&mut bytes[at..]);
            self.loaded += n as f64;
            self.progress(file)?;
        }
        Ok(bytes)
    }

    /// `url`'s bytes, from the cache or downloaded (and then stored in the cache).
    async fn fetch(&mut self, files: &[(&str, String)]) -> JsResult<Vec<Vec<u8>>> {
        let mut responses = Vec::new();
        for (_, url) in files {
            let (response, cached) = self.open(url).await?;
            let length = call(
                &property(&response, "headers"),
                "get",
                &["content-length".into()],
                "",
            )
            .await
            .ok()
            .and_then(|v| v.as_string())
            .and_then(|v| v.parse::<f64>().ok());
            self.total = match (self.total, length) {
                (Some(t), Some(n)) => Some(t + n),
                _ => None,
            };
            responses.push((response, cached));
        }
        let mut out = Vec::new();
        for ((file, url), (response, cached)) in files.iter().zip(responses) {
            let bytes = self.read(file, url, &response).await?;
            if let (Some(cache), false) = (&self.cache, cached) {
                self.store(cache, url, &bytes).await?;
            }
            out.push(bytes);
        }
        Ok(out)
    }

    /// Keeps a copy of a download in the cache (with its length, for the next progress bar).
    async fn store(&self, cache: &JsValue, url: &str, bytes: &[u8]) -> JsResult<()> {
        let what = "storing in the cache";
        let ctor = property(&js_sys::global(), "Response")
            .dyn_into::<Function>()
            .map_err(|_| js_error(format!("{what}: no Response")))?;
        let headers = Object::new();
        Reflect::set(
            &headers,
            &"content-length".into(),
            &bytes.len().to_string().into(),
        )
        .map_err(|_| js_error(what))?;
        let init = Object::new();
        Reflect::set(&init, &"headers".into(), &headers).map_err(|_| js_error(what))?;
        let args = Array::of2(&Uint8Array::from(bytes).into(), &init);
        let response = Reflect::construct(&ctor, &args)
            .map_err(|e| js_error(format!("{what}: {}", message(&e))))?;
        call(cache, "put", &[url.into(), response], what).await?;
        Ok(())
    }
}

/// A text file of the model given as a string or UTF-8 bytes.
fn text(value: &JsValue, what: &str) -> JsResult<String> {
    if let Some(s) = value.as_string() {
        return Ok(s);
    }
    let bytes = bytes(value, what)?;
    String::from_utf8(bytes).map_err(|e| js_error(format!("{what} is not UTF-8: {e}")))
}

/// Bytes given as a Uint8Array or an ArrayBuffer.
fn bytes(value: &JsValue, what: &str) -> JsResult<Vec<u8>> {
    if let Some(a) = value.dyn_ref::<Uint8Array>() {
        return Ok(a.to_vec());
    }
    if value.has_type::<js_sys::ArrayBuffer>() {
        return Ok(Uint8Array::new(value).to_vec());
    }
    Err(js_error(format!(
        "{what} must be a Uint8Array or an ArrayBuffer, got {}",
        describe(value)
    )))
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
            let mut download = Download::new(&options).await?;
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
            let inner =
                Embedder::from_bytes(&device, &config, &tokenizer, &weights).map_err(js_error)?;
            Ok(JsEmbedder {
                inner: Rc::new(inner),
            }
            .into())
        })
    }

    /// One L2-normalised embedding per text, in order (a `Float32Array` of `dim` values each).
    /// Texts past 512 tokens are truncated; any number of texts is split into batches.
    #[wasm_bindgen(unchecked_return_type = "Promise<Float32Array[]>")]
    pub fn embed(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(string | Uint8Array)[]")] texts: JsValue,
    ) -> JsResult<Promise> {
        let texts = self::texts(&texts)?;
        let inner = self.inner.clone();
        Ok(future_to_promise(async move {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            let vectors = inner.embed(&refs).await.map_err(js_error)?;
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
