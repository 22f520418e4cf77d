// gpukit's `Embedder` beside transformers.js (@huggingface/transformers 4.3.1, onnxruntime-web
// underneath) in headless Chromium, in one page, on all-MiniLM-L6-v2 with the same weights: the
// ONNX graph scripts/peers/minilm_onnx.py builds from the model's safetensors, and the model's
// own tokenizer files. E1: one sentence of 14 tokens (latency, median of 20 after 3 warm-ups);
// E3: 32 such sentences in one call (sentences/s, median of 5 after 1). Both libraries pool
// over tokens and L2-normalise, text in, host vectors out. Each runs on the CPU (gpukit's CPU
// backend, wasm SIMD128, with f32 and with f16 linear weights; transformers.js's "wasm" device)
// and on WebGPU (SwiftShader here), one thread each (the page is not cross-origin isolated).
// Prints one JSON object with the timings and the lowest cosine between the libraries' vectors.
//
//   node scripts/peers/transformers_js.mjs   (after `make www`; installs its peers into
//                                             target/peers on first use)
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { inPage } from "./page.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const peers = join(root, "target/peers");
const minilm = join(root, "target/models/all-minilm-l6-v2");
const run = (cmd, args) => execFileSync(cmd, args, { stdio: "inherit" });

// transformers.js without its Node runtime's install script (the page needs onnxruntime-web
// only).
const tjs = join(peers, "tjs/node_modules/@huggingface/transformers/dist");
if (!existsSync(tjs)) {
  mkdirSync(join(peers, "tjs"), { recursive: true });
  run("npm", [
    "install",
    "--no-audit",
    "--no-fund",
    "--ignore-scripts",
    "--prefix",
    join(peers, "tjs"),
    "@huggingface/transformers@4.3.1",
  ]);
}
// The model as transformers.js reads it: config, tokenizer files and onnx/model.onnx.
const python = join(peers, "venv/bin/python");
if (!existsSync(python)) {
  run("python3", ["-m", "venv", join(peers, "venv")]);
  run(join(peers, "venv/bin/pip"), ["install", "-q", "onnx", "numpy"]);
}
const model = join(peers, "tjs-models/all-MiniLM-L6-v2");
if (!existsSync(join(model, "onnx/model.onnx"))) {
  mkdirSync(join(model, "onnx"), { recursive: true });
  run(python, [join(root, "scripts/peers/minilm_onnx.py"), minilm, join(model, "onnx/model.onnx")]);
}
copyFileSync(join(minilm, "config.json"), join(model, "config.json"));
// The file's fixed padding to 128 is for training; both libraries pad a batch to its longest.
const tokenizer = JSON.parse(readFileSync(join(minilm, "tokenizer.json"), "utf8"));
tokenizer.padding = null;
writeFileSync(join(model, "tokenizer.json"), JSON.stringify(tokenizer));
writeFileSync(
  join(model, "tokenizer_config.json"),
  JSON.stringify({
    tokenizer_class: "BertTokenizer",
    do_lower_case: true,
    model_max_length: 512,
    cls_token: "[CLS]",
    sep_token: "[SEP]",
    pad_token: "[PAD]",
    unk_token: "[UNK]",
    mask_token: "[MASK]",
  }),
);

// One origin serving gpukit's web build, both models and transformers.js with ORT's wasm.
const result = await inPage(
  join(peers, "tjs-site"),
  {
    pkg: "www/pkg",
    models: "target/models",
    "tjs-models": join(peers, "tjs-models"),
    tjs,
    ort: join(peers, "tjs/node_modules/onnxruntime-web/dist"),
  },
  async () => {
    const SENTENCE = "The quick brown fox jumps over the lazy dog near the river.";
    const batch = Array(32).fill(SENTENCE);
    const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    // E1 and E3 of `embed` (texts -> arrays of vectors), and the vectors of the batch.
    const time = async (embed) => {
      const e1 = [];
      const e3 = [];
      for (let i = 0; i < 23; i++) {
        const t = performance.now();
        await embed([SENTENCE]);
        if (i >= 3) e1.push(performance.now() - t);
      }
      let vectors;
      for (let i = 0; i < 6; i++) {
        const t = performance.now();
        vectors = await embed(batch);
        if (i >= 1) e3.push(performance.now() - t);
      }
      return {
        e1_ms: median(e1),
        e3_sentences_per_s: 32000 / median(e3),
        e1_runs: e1,
        e3_runs_ms: e3,
        vectors,
      };
    };
    const out = {};

    const g = await import("/pkg/models/gpukit.js");
    await g.default();
    // The CPU backend also with f16 linear weights (kept as such, widened as they are read).
    for (const [backend, weights] of [
      ["cpu", "f32"],
      ["cpu", "f16"],
      ["webgpu", "f32"],
    ]) {
      const gpu = await g.Gpu.create({ backend });
      const embedder = await g.Embedder.load(gpu, "/models/all-minilm-l6-v2/", { weights });
      const name = weights === "f32" ? `gpukit_${backend}` : `gpukit_${backend}_${weights}`;
      out[name] = {
        adapter: gpu.info.adapter,
        weights: embedder.weightDtype,
        ...(await time((texts) => embedder.embed(texts))),
      };
    }

    const { pipeline, env } = await import("/tjs/transformers.js");
    env.allowRemoteModels = false;
    env.allowLocalModels = true;
    env.localModelPath = "/tjs-models/";
    env.backends.onnx.wasm.wasmPaths = "/ort/";
    env.backends.onnx.wasm.numThreads = 1;
    for (const device of ["wasm", "webgpu"]) {
      const extract = await pipeline("feature-extraction", "all-MiniLM-L6-v2", {
        device,
        dtype: "fp32",
      });
      out[`transformers_js_${device}`] = await time(async (texts) => {
        const t = await extract(texts, { pooling: "mean", normalize: true });
        return t.tolist();
      });
      await extract.dispose();
    }

    // The two libraries' vectors of the batch, pairwise.
    const cosine = (a, b) => {
      let [ab, aa, bb] = [0, 0, 0];
      for (let i = 0; i < a.length; i++) {
        ab += a[i] * b[i];
        aa += a[i] * a[i];
        bb += b[i] * b[i];
      }
      return ab / Math.sqrt(aa * bb);
    };
    let lowest = 1;
    for (const a of ["gpukit_cpu", "gpukit_cpu_f16", "gpukit_webgpu"]) {
      for (const b of ["transformers_js_wasm", "transformers_js_webgpu"]) {
        out[a].vectors.forEach((v, i) => {
          lowest = Math.min(lowest, cosine(Array.from(v), out[b].vectors[i]));
        });
      }
    }
    for (const k of Object.keys(out)) delete out[k].vectors;
    out.lowest_cosine = lowest;
    return out;
  },
);
console.log(JSON.stringify(result));
// The timings compare the same model only if the vectors agree.
if (!(result.lowest_cosine >= 0.9999)) {
  console.error(`transformers_js: the libraries' vectors differ (cosine ${result.lowest_cosine})`);
  process.exit(1);
}
