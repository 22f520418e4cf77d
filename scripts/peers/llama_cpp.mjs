// llama.cpp on a GGUF, through node-llama-cpp and its prebuilt binaries: the peer of
// `gpukit bench-chat`, run beside it with the same prompts. Prints one JSON object:
// {"peer", "backend", "decode_tokens_per_s", "prefill_tokens_per_s", "decode_runs", "prefill_runs"}.
//
//   node scripts/peers/llama_cpp.mjs MODEL.gguf [cpu|cuda|vulkan] [THREADS]
//
// node-llama-cpp is imported from LLAMA_CPP_MODULES (default target/peers/llama/node_modules,
// where `make bench-chat` installs it). The prompt
// is scripts/peers/bench_text.txt, as gpukit's benchmark uses it, cut to 128 tokens (decode: then 128 new tokens,
// greedy, end tokens ignored) and to 512 tokens (prefill: the time to the first new token).
import { readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";

// ES modules ignore NODE_PATH: the package is imported from the folder it was installed in.
const modules = process.env.LLAMA_CPP_MODULES ?? "target/peers/llama/node_modules";
const { getLlama } = await import(
  pathToFileURL(resolve(join(modules, "node-llama-cpp/dist/index.js"))).href
);

const [model, backend = "cpu", threads = "2"] = process.argv.slice(2);
const gpu = backend === "cpu" ? false : backend;
const llama = await getLlama({ gpu, build: "never", maxThreads: Number(threads) });
const m = await llama.loadModel({ modelPath: model, gpuLayers: gpu ? "max" : 0 });
const context = await m.createContext({
  contextSize: 1024,
  threads: Number(threads),
  batchSize: 512,
});
const seq = context.getSequence();

const base = readFileSync(new URL("bench_text.txt", import.meta.url), "utf8");
const all = m.tokenize(base);
if (all.length < 512) throw new Error(`the text is ${all.length} tokens; 512 are needed`);

async function run(prompt, newTokens) {
  await seq.clearHistory();
  const t0 = performance.now();
  let first = 0;
  let n = 0;
  for await (const _ of seq.evaluate(prompt, { temperature: 0 })) {
    n += 1;
    if (n === 1) first = performance.now();
    if (n >= newTokens) break;
  }
  const end = performance.now();
  return { prefill: prompt.length / ((first - t0) / 1e3), decode: (n - 1) / ((end - first) / 1e3) };
}

const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
await run(all.slice(0, 128), 16); // warm-up
const decode = [];
const prefill = [];
for (let i = 0; i < 3; i++) decode.push((await run(all.slice(0, 128), 128)).decode);
for (let i = 0; i < 3; i++) prefill.push((await run(all.slice(0, 512), 1)).prefill);
console.log(
  JSON.stringify({
    peer: "llama.cpp (node-llama-cpp 3.22.1)",
    backend,
    decode_tokens_per_s: median(decode),
    prefill_tokens_per_s: median(prefill),
    decode_runs: decode,
    prefill_runs: prefill,
  }),
);
process.exit(0);
