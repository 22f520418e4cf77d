// The `gpukit/models` entry from the installed npm tarball (scripts/test-npm.sh): all-MiniLM-L6-v2
// in Node on the CPU backend (wasm32, SIMD128), loaded from bytes and from a URL with progress,
// against the f64 reference of examples/bert_reference.rs computed from the same weights
// (its vectors arrive in $GPUKIT_REFERENCE; the texts are TEXTS below). Then the inputs a
// hostile page could pass. Exits non-zero on the first failure.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Gpu, Embedder } from "gpukit/models";
import { rejects } from "./expect.mjs";

const [modelDir, root] = process.argv.slice(2);
const TEXTS = JSON.parse(readFileSync(join(root, "tests/data/embedding_texts.json"), "utf8"));
const reference = JSON.parse(readFileSync(process.env.GPUKIT_REFERENCE, "utf8"));
const cosine = (a, b) => a.reduce((s, v, i) => s + v * b[i], 0);

const gpu = await Gpu.create({ backend: "cpu" });
const files = {
  config: readFileSync(join(modelDir, "config.json"), "utf8"),
  tokenizer: readFileSync(join(modelDir, "tokenizer.json")),
  weights: readFileSync(join(modelDir, "model.safetensors")),
};
const embedder = await Embedder.load(gpu, files);
assert.equal(embedder.dim, 384);
assert.equal(embedder.maxTokens, 512);
assert.deepEqual(Array.from(embedder.tokenize("Hello, world!")), [101, 7592, 1010, 2088, 999, 102]);

const start = performance.now();
const vectors = await embedder.embed(TEXTS);
const ms = performance.now() - start;
assert.equal(vectors.length, TEXTS.length);
let worst = 1;
TEXTS.forEach((text, i) => {
  assert.ok(vectors[i] instanceof Float32Array && vectors[i].length === 384, `${text}: a vector`);
  const c = cosine(vectors[i], reference[i]);
  worst = Math.min(worst, c);
  assert.ok(c >= 0.9999, `${JSON.stringify(text)}: cosine ${c} to the f64 reference`);
});
assert.equal(embedder.weightDtype, "f32");
// 16 short texts replayed a compiled graph; 17 run eagerly, with the same results. Two calls at
// once: one replays, the other (finding the graphs busy) runs eagerly.
const eager = await embedder.embed([...TEXTS, "one more"]);
TEXTS.forEach((text, i) =>
  assert.ok(cosine(eager[i], vectors[i]) >= 0.99999, `${text}: replayed against eager`),
);
const [a, b] = await Promise.all([embedder.embed([TEXTS[0]]), embedder.embed([TEXTS[1]])]);
assert.ok(cosine(a[0], reference[0]) >= 0.9999 && cosine(b[0], reference[1]) >= 0.9999, "at once");
const half = await Embedder.load(gpu, files, { weights: "f16" });
// The wasm CPU backend keeps half weights and widens them as its products read them.
assert.equal(half.weightDtype, "f16", "weights kept on the wasm CPU backend");
const halfVectors = await half.embed(TEXTS.slice(0, 4));
halfVectors.forEach((v, i) =>
  assert.ok(
    cosine(v, reference[i]) >= 0.9999,
    `f16 weights, text ${i}: ${cosine(v, reference[i])}`,
  ),
);
await rejects(
  () => Embedder.load(gpu, files, { weights: "f8" }),
  /weights must be "f32"/,
  "weights f8",
);
console.log(
  `models: ${TEXTS.length} texts embedded in ${ms.toFixed(0)} ms (Node, CPU backend, wasm ` +
    `SIMD128); lowest cosine to the f64 reference ${worst.toFixed(9)}`,
);

// From a URL, with progress: the files served over HTTP by the project's static server.
const { serve } = await import(join(root, "scripts/serve.mjs"));
const server = await serve(modelDir);
const url = `http://127.0.0.1:${server.address().port}/`;
const progress = [];
const fromUrl = await Embedder.load(gpu, url, { onProgress: (p) => progress.push(p) });
const last = progress.at(-1);
assert.ok(progress.length >= 3, `progress was reported ${progress.length} times`);
assert.equal(last.loaded, last.total, "the last progress covers every byte");
assert.equal(last.file, "model.safetensors");
assert.ok(last.total > 80e6, `total ${last.total}`);
const again = await fromUrl.embed([TEXTS[0]]);
assert.ok(cosine(again[0], reference[0]) >= 0.9999, "loaded from a URL");
await rejects(() => Embedder.load(gpu, `${url}missing/`), /HTTP status 404/, "a 404");
server.close();

// Hostile input: each embeds or fails with a clear Error, and the embedder keeps working.
const odd = await embedder.embed([
  "",
  "x".repeat(10000),
  "\ud800 lone surrogate \udfff",
  new TextEncoder().encode("bytes: café"),
  "qwzxqwzxqwzx unknownwordzzzz ⟁⟁⟁",
]);
odd.forEach((v, i) =>
  assert.ok(v.every(Number.isFinite) && Math.abs(cosine(v, v) - 1) < 1e-4, `odd ${i}`),
);
const many = await embedder.embed(Array.from({ length: 1000 }, (_, i) => `s${i % 10}`));
assert.equal(many.length, 1000);
assert.ok(cosine(many[0], many[10]) > 0.9999, "the same text twice in a large batch");
assert.deepEqual(await embedder.embed([]), []);
await rejects(
  () => embedder.embed([new Uint8Array([0x66, 0xff, 0xfe])]),
  /not valid UTF-8/,
  "invalid UTF-8",
);
await rejects(() => embedder.embed("a string"), /array of strings/, "not an array");
await rejects(() => embedder.embed([1, 2]), /text 0 must be a string/, "numbers");
await rejects(() => Embedder.load(gpu, 42), /folder URL/, "a number as the source");
await rejects(
  () => Embedder.load(gpu, { ...files, weights: "text" }),
  /weights must be/,
  "text weights",
);
await rejects(
  () => Embedder.load(gpu, { ...files, weights: files.weights.subarray(0, 1000) }),
  /safetensors|truncated|header/i,
  "truncated weights",
);
await rejects(
  () => Embedder.load(gpu, { ...files, config: "{" }),
  /config\.json/,
  "a broken config",
);
await rejects(
  () => Embedder.load(gpu, files, { onProgres: () => {} }),
  /unknown key "onProgres"/,
  "a typo",
);
await rejects(() => Embedder.load(gpu, url, { onProgress: 3 }), /must be a function/, "progress");
const check = await embedder.embed([TEXTS[0]]);
assert.ok(cosine(check[0], reference[0]) >= 0.9999, "still right after the errors");
console.log("models: the gpukit/models entry loads, embeds and rejects bad input in Node");
