// transformers.js (its web build, onnxruntime-web's WebGPU execution provider underneath) on
// Dawn's `navigator.gpu` in Node, as the peer of gpukit's embedder in models.mjs.
//
// `root` is a folder holding node_modules/@huggingface/transformers, onnxruntime-web and
// onnxruntime-common (stage.sh packs the files they need); `model` is the model as
// transformers.js reads it (config.json, tokenizer.json, tokenizer_config.json,
// onnx/model.onnx: scripts/peers/minilm_onnx.py's graph of the same weights). Two things make the
// web build run in Node:
//   - it decides that it runs in Node from `process.release.name` and would then load
//     onnxruntime-node, so `process.release` is made to look like a browser's before it loads;
//   - it reads local models with `fetch`, which in Node takes no relative paths, so the model is
//     served from this process over the loopback and named as a remote host (nothing leaves
//     the machine).
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { pathToFileURL } from "node:url";

/** Loads `model` into a feature-extraction pipeline on WebGPU, f32, one thread for its wasm.
 * Returns `embed(texts)`: mean-pooled, L2-normalised vectors, as gpukit's embedder gives. */
export async function loadTransformers(root, model) {
  const folder = path.resolve(path.dirname(model));
  const name = path.basename(model);
  const server = http.createServer((req, res) => {
    const file = path.join(folder, decodeURIComponent(req.url.split("?")[0]));
    const stat = file.startsWith(folder + path.sep) && fs.statSync(file, { throwIfNoEntry: false });
    if (!stat?.isFile()) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-length": stat.size });
    fs.createReadStream(file).pipe(res);
  });
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  server.unref();
  Object.defineProperty(process, "release", { value: { name: "browser-like" } });
  const modules = path.join(path.resolve(root), "node_modules");
  const t = await import(
    pathToFileURL(path.join(modules, "@huggingface/transformers/dist/transformers.web.js")).href
  );
  t.env.allowLocalModels = false;
  t.env.allowRemoteModels = true;
  t.env.remoteHost = `http://127.0.0.1:${server.address().port}/`;
  t.env.remotePathTemplate = "{model}/";
  t.env.useBrowserCache = false;
  t.env.backends.onnx.wasm.wasmPaths = pathToFileURL(
    path.join(modules, "onnxruntime-web/dist/"),
  ).href;
  t.env.backends.onnx.wasm.numThreads = 1;
  const extract = await t.pipeline("feature-extraction", name, { device: "webgpu", dtype: "fp32" });
  return {
    version: t.env.version,
    embed: async (texts) => {
      const out = await extract(texts, { pooling: "mean", normalize: true });
      const width = out.dims[out.dims.length - 1];
      return texts.map((_, i) => out.data.subarray(i * width, (i + 1) * width));
    },
  };
}
