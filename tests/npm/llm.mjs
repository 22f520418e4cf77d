// `Llm` from the installed npm tarball's `gpukit/models` entry (scripts/test-npm.sh):
// SmolLM2-135M-Instruct in Node on the CPU backend (wasm32, SIMD128), loaded from bytes and from
// a URL with progress, against the f64 reference of examples/llama_reference.rs over the same
// GGUF (in $GPUKIT_LLM_REFERENCE: prompt ids, greedy ids with their margins, and the logits
// after the prompt). Then streaming, stopping, a full context and the inputs a hostile page
// could pass. Exits non-zero on the first failure.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { Gpu, Llm } from "gpukit/models";
import { rejects, throws } from "./expect.mjs";

const [modelFile, root] = process.argv.slice(2);
const [reference] = JSON.parse(readFileSync(process.env.GPUKIT_LLM_REFERENCE, "utf8"));

const gpu = await Gpu.create({ backend: "cpu" });
const bytes = readFileSync(modelFile);
const llm = await Llm.load(gpu, bytes, { context: 256 });
assert.equal(llm.context, 256);

// Against the reference: the same prompt ids, greedy ids wherever its margin is clear, and the
// logits after the prompt.
const gen = llm.generate(reference.prompt, { maxTokens: reference.ids.length });
assert.deepEqual(Array.from(gen.promptIds), reference.prompt_ids, "prompt ids");
const pieces = [];
for await (const piece of gen) pieces.push(piece);
const ids = Array.from(gen.ids);
for (let i = 0; i < ids.length; i++) {
  if (reference.margins[i] < 0.05) break;
  assert.equal(ids[i], reference.ids[i], `step ${i} (margin ${reference.margins[i]})`);
}
assert.equal(gen.finish, "length");
assert.equal(pieces.join(""), llm.detokenize(gen.ids));
const logits = await llm.logits(gen.promptIds);
const scale = reference.logits.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
const err = reference.logits.reduce((m, v, i) => Math.max(m, Math.abs(v - logits[i])), 0);
assert.ok(err <= 2e-4 * scale, `logits differ by ${err} (largest ${scale})`);
console.log(
  `llm: ${JSON.stringify(pieces.join(""))} ids ${ids} (reference ${reference.ids}); logits max ` +
    `error ${err.toExponential(2)} of ${scale.toFixed(1)}; decode ` +
    `${gen.decodeTokensPerSecond.toFixed(1)} tokens/s (Node, CPU backend, wasm SIMD128)`,
);

// A whole answer stops at <|im_end|>.
let answer = "";
const whole = llm.generate("What is the capital of France?", { maxTokens: 40 });
for await (const piece of whole) answer += piece;
assert.equal(whole.finish, "stop");
assert.match(answer, /Paris/);

// Two generations at once on one model, then `break` ends one.
const a = llm.generate("Count to five.", { maxTokens: 4 });
const b = llm.generate("Name a colour.", { maxTokens: 4, temperature: 0.8, topK: 20, seed: 7 });
const [ra, rb] = await Promise.all([a.next(), b.next()]);
assert.equal(ra.done, false);
assert.equal(rb.done, false);
for await (const _ of a) break;
assert.equal(a.finish, "stopped");
assert.deepEqual(await a.next(), { done: true, value: undefined });
// An AbortSignal rejects a pending next() at once with its reason and ends the answer.
const controller = new AbortController();
const aborting = llm.generate("Tell me a story.", { maxTokens: 50, signal: controller.signal });
assert.equal((await aborting.next()).done, false);
const pending = aborting.next();
controller.abort();
await assert.rejects(pending, (e) => e.name === "AbortError");
assert.equal(aborting.finish, "aborted");
await assert.rejects(aborting.next(), (e) => e.name === "AbortError");
assert.ok(aborting.ids.length <= 2, `ids after the abort: ${aborting.ids.length}`);
await assert.rejects(
  llm.generate("Hi", { signal: AbortSignal.abort(new Error("no thanks")) }).next(),
  /no thanks/,
);
const unaborted = new AbortController();
const kept = llm.generate("Hi", { maxTokens: 2, signal: unaborted.signal });
for await (const _ of kept);
assert.equal(kept.finish, "length");
assert.throws(() => llm.generate("Hi", { signal: {} }), /signal must be an AbortSignal/);
// The same seed samples the same tokens.
const sampled = async () => {
  const g = llm.generate("Name a colour.", { maxTokens: 4, temperature: 0.8, topK: 20, seed: 7 });
  for await (const _ of g);
  return Array.from(g.ids);
};
assert.deepEqual(await sampled(), await sampled());
// next() called again before the last resolved: the calls run in turn.
const c = llm.generate("What is the capital of France?", { maxTokens: 3 });
const calls = await Promise.all([c.next(), c.next(), c.next(), c.next()]);
assert.deepEqual(
  calls.map((r) => r.done),
  [false, false, false, true],
);
assert.deepEqual(Array.from(c.ids), reference.ids.slice(0, 3));

// A half-precision KV cache: the same greedy ids where the reference's margin is clear, the
// logits within 2e-3 of the largest (its keys and values rounded to f16).
const halfCache = await Llm.load(gpu, bytes, { context: 64, kvCache: "f16" });
assert.equal(halfCache.kvCache, "f16");
assert.equal(llm.kvCache, "f32");
const hg = halfCache.generate(reference.prompt, { maxTokens: reference.ids.length });
for await (const _ of hg);
const hids = Array.from(hg.ids);
for (let i = 0; i < hids.length; i++) {
  if (reference.margins[i] < 0.1) break;
  assert.equal(hids[i], reference.ids[i], `f16 cache step ${i} (margin ${reference.margins[i]})`);
}
const hl = await halfCache.logits(hg.promptIds);
const herr = reference.logits.reduce((m, v, i) => Math.max(m, Math.abs(v - hl[i])), 0);
assert.ok(herr <= 2e-3 * scale, `f16 cache: logits differ by ${herr} (largest ${scale})`);
console.log(`llm: f16 KV cache, logits max error ${herr.toExponential(2)}`);
halfCache.free();

// A full context ends the answer and says so; a prompt past it is an error.
const small = await Llm.load(gpu, bytes, { context: 24 });
const full = small.generate("Tell me a long story.", { maxTokens: 100 });
for await (const _ of full);
assert.equal(full.finish, "context");
await throws(
  () => small.generate("word ".repeat(40)),
  /context holds 24/,
  "a prompt past the context",
);

// From a URL, with progress.
const { serve } = await import(join(root, "scripts/serve.mjs"));
const server = await serve(dirname(modelFile));
const url = `http://127.0.0.1:${server.address().port}/${basename(modelFile)}`;
const progress = [];
const fromUrl = await Llm.load(gpu, url, { onProgress: (p) => progress.push(p), context: 64 });
assert.equal(progress.at(-1).loaded, bytes.length);
assert.equal(progress.at(-1).total, bytes.length);
assert.equal(fromUrl.context, 64);
await rejects(() => Llm.load(gpu, `${url}.missing`), /404/, "a missing file");
server.close();

// Hostile input: each a clear Error, none a trap.
await rejects(() => Llm.load(gpu, bytes.subarray(0, 1000)), /truncated|past the end/, "a cut file");
await rejects(() => Llm.load(gpu, new Uint8Array(64)), /not a GGUF/, "zeros");
await rejects(() => Llm.load(gpu, 42), /URL or the GGUF's bytes/, "a number");
await rejects(
  () => Llm.load(gpu, bytes, { contxt: 5 }),
  /unknown key "contxt"/,
  "a misspelt option",
);
await rejects(() => Llm.load(gpu, bytes, { context: -1 }), /positive whole number/, "context -1");
await rejects(() => Llm.load(gpu, bytes, { kvCache: "i32" }), /kvCache must be/, "kvCache i32");
await rejects(() => Llm.load(gpu, bytes, { kvCache: 16 }), /kvCache must be/, "kvCache 16");
await throws(() => llm.generate("", { raw: true }), /empty/, "an empty raw prompt");
await throws(() => llm.generate("Hi", { temperature: -1 }), /temperature/, "temperature -1");
await throws(() => llm.generate("Hi", { maxTokens: 1.5 }), /whole number/, "maxTokens 1.5");
await throws(() => llm.generate("Hi", { topP: 0 }), /topP/, "topP 0");
await throws(() => llm.generate("Hi", { mxTokens: 3 }), /unknown key/, "a misspelt option");
await throws(() => llm.generate("Hi", "fast"), /must be an object/, "options not an object");
// A lone surrogate is read as U+FFFD; special tokens typed in a message are themselves.
const odd = llm.generate("\ud800<|im_end|>", { maxTokens: 1 });
for await (const _ of odd);
assert.ok(Array.from(odd.promptIds).includes(2), "<|im_end|> in the text is its own id");
console.log("llm: streaming, stop, context, URL loading and hostile inputs checked");
