// gpukit's `Llm` beside wllama (llama.cpp in wasm, @wllama/wllama 3.8.1) in headless Chromium,
// in one page: C1 (decode tokens/s, 128 new tokens after a 128-token prompt, greedy, end tokens
// ignored) and C2 (prefill tokens/s of a 512-token prompt) on scripts/peers/bench_text.txt,
// both on one thread (the page is not cross-origin isolated, so neither can start threads)
// and on the CPU (wllama with n_gpu_layers 0; gpukit's CPU backend). Prints one JSON object.
//
//   node scripts/peers/wllama.mjs      (after `make www`; installs wllama into target/peers)
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { inPage } from "./page.mjs";

const root = fileURLToPath(new URL("../..", import.meta.url));
const peers = join(root, "target/peers");
const wllama = join(peers, "wllama/node_modules/@wllama/wllama/esm");
if (!existsSync(wllama)) {
  mkdirSync(join(peers, "wllama"), { recursive: true });
  execFileSync(
    "npm",
    [
      "install",
      "--no-audit",
      "--no-fund",
      "--prefix",
      join(peers, "wllama"),
      "@wllama/wllama@3.8.1",
    ],
    {
      stdio: "inherit",
    },
  );
}
// One origin serving gpukit's web build, the model, wllama and the text.
const result = await inPage(
  join(peers, "wllama-site"),
  {
    pkg: "www/pkg",
    models: "target/models",
    wllama,
    "bench_text.txt": "scripts/peers/bench_text.txt",
  },
  async () => {
    const MODEL = "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    const text = await (await fetch("/bench_text.txt")).text();
    const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
    const out = {};

    const g = await import("/pkg/models/gpukit.js");
    await g.default();
    const gpu = await g.Gpu.create({ backend: "cpu" });
    const llm = await g.Llm.load(gpu, MODEL, { context: 1024 });
    const ids = llm.tokenize(text);
    const prompt128 = llm.detokenize(ids.slice(0, 128));
    const prompt512 = llm.detokenize(ids.slice(0, 512));
    const run = async (prompt, maxTokens) => {
      const gen = llm.generate(prompt, { raw: true, maxTokens, ignoreEos: true });
      for await (const _ of gen);
      return gen;
    };
    await run(prompt128, 8);
    const gd = [];
    const gp = [];
    for (let i = 0; i < 3; i++) gd.push((await run(prompt128, 128)).decodeTokensPerSecond);
    for (let i = 0; i < 3; i++) gp.push((await run(prompt512, 1)).prefillTokensPerSecond);
    out.gpukit = { decode: median(gd), prefill: median(gp), decodeRuns: gd, prefillRuns: gp };
    llm.free();

    const { Wllama } = await import("/wllama/index.js");
    const w = new Wllama({ default: "/wllama/wasm/wllama.wasm" });
    await w.loadModelFromUrl(`${location.origin}${MODEL}`, {
      n_ctx: 1024,
      n_threads: 1,
      n_gpu_layers: 0,
      useCache: false,
    });
    const complete = (prompt, max_tokens) =>
      w.createCompletion({
        prompt,
        max_tokens,
        temperature: 0,
        ignore_eos: true,
        cache_prompt: false, // each run evaluates its whole prompt, as gpukit's does
      });
    await complete(prompt128, 8);
    const wd = [];
    const wp = [];
    let tokens = 0;
    for (let i = 0; i < 3; i++) {
      const r = await complete(prompt128, 128);
      wd.push(r.timings.predicted_per_second);
      tokens = r.timings.predicted_n;
    }
    for (let i = 0; i < 3; i++) wp.push((await complete(prompt512, 1)).timings.prompt_per_second);
    out.wllama = {
      decode: median(wd),
      prefill: median(wp),
      decodeRuns: wd,
      prefillRuns: wp,
      tokens,
    };
    return out;
  },
);
console.log(JSON.stringify(result));
