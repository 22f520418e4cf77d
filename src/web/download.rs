//! Model files in JS: fetched with progress (read from the body stream) and an optional Cache
//! Storage copy, or given as bytes. Shared by `Embedder.load` and `Llm.load`.

use js_sys::{Array, Function, Object, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::{describe, js_error, property};

#[wasm_bindgen]
extern "C" {
    #[wasm_bindgen(catch, js_name = fetch)]
    fn global_fetch(url: &str) -> Result<Promise, JsValue>;
}

pub(super) type JsResult<T> = Result<T, JsError>;

/// The message of a thrown JS value.
pub(super) fn message(e: &JsValue) -> String {
    e.dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_else(|| describe(e))
}

pub(super) async fn wait(p: JsValue, what: &str) -> JsResult<JsValue> {
    let p = p
        .dyn_into::<Promise>()
        .map_err(|_| js_error(format!("{what}: not a Promise")))?;
    JsFuture::from(p)
        .await
        .map_err(|e| js_error(format!("{what}: {}", message(&e))))
}

/// `target.name(args..)`, awaited when it returns a Promise.
pub(super) async fn call(
    target: &JsValue,
    name: &str,
    args: &[JsValue],
    what: &str,
) -> JsResult<JsValue> {
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
pub(super) fn file_url(base: &str, name: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{name}")
    } else {
        format!("{base}/{name}")
    }
}

/// Where downloads come from and go: the responses, the Cache Storage and the progress.
pub(super) struct Download {
    cache: Option<JsValue>,
    on_progress: Option<Function>,
    loaded: f64,
    total: Option<f64>,
}

impl Download {
    /// Reads `onProgress` and `cache` from the options of `op` (`Embedder.load`), which may
    /// hold only those and the `more` keys.
    pub(super) async fn new(options: &JsValue, op: &str, more: &[&str]) -> JsResult<Download> {
        if !(options.is_undefined() || options.is_null() || options.is_object()) {
            return Err(js_error(format!(
                "{op} options must be an object, got {}",
                describe(options)
            )));
        }
        if options.is_object() {
            let known: Vec<&str> = ["onProgress", "cache"]
                .iter()
                .chain(more)
                .copied()
                .collect();
            for key in Object::keys(options.unchecked_ref::<Object>()).iter() {
                let key = key.as_string().unwrap_or_default();
                if !known.contains(&key.as_str()) {
                    return Err(js_error(format!(
                        "{op} options: unknown key {key:?} (expected {})",
                        known.join(", ")
                    )));
                }
            }
        }
        let on_progress = match property(options, "onProgress") {
            v if v.is_undefined() || v.is_null() => None,
            v => Some(v.dyn_into::<Function>().map_err(|v| {
                js_error(format!(
                    "{op} onProgress must be a function, got {}",
                    describe(&v)
                ))
            })?),
        };
        let cache = match property(options, "cache") {
            v if v.is_undefined() || v.is_null() => None,
            v => {
                let name = v.as_string().ok_or_else(|| {
                    js_error(format!("{op} cache must be a string, got {}", describe(&v)))
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
    pub(super) async fn fetch(&mut self, files: &[(&str, String)]) -> JsResult<Vec<Vec<u8>>> {
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
pub(super) fn text(value: &JsValue, what: &str) -> JsResult<String> {
    if let Some(s) = value.as_string() {
        return Ok(s);
    }
    let bytes = bytes(value, what)?;
    String::from_utf8(bytes).map_err(|e| js_error(format!("{what} is not UTF-8: {e}")))
}

/// Bytes given as a Uint8Array or an ArrayBuffer.
pub(super) fn bytes(value: &JsValue, what: &str) -> JsResult<Vec<u8>> {
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

/// The float dtype an option names ("f32", "f16" or "bf16"; f32 when absent), for the load
/// option `what` (`Llm.load kvCache`, `Embedder.load weights`).
pub(super) fn float_dtype(options: &JsValue, key: &str, what: &str) -> JsResult<crate::DType> {
    if !options.is_object() {
        return Ok(crate::DType::F32);
    }
    match property(options, key) {
        v if v.is_undefined() || v.is_null() => Ok(crate::DType::F32),
        v => v
            .as_string()
            .and_then(|name| name.parse::<crate::DType>().ok())
            .filter(|d| d.is_float())
            .ok_or_else(|| {
                js_error(format!(
                    "{what} must be \"f32\", \"f16\" or \"bf16\", got {}",
                    describe(&v)
                ))
            }),
    }
}
