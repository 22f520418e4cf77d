// gpukit's `Llm` beside wllama (llama.cpp in wasm, @wllama/wllama 3.8.1) in headless Chromium,
// in one page: C1 (decode tokens/s, 128 new tokens after a 128-token prompt, greedy, end tokens
// ignored) and C2 (prefill tokens/s of a 512-token prompt) on scripts/peers/bench_text.txt,
// both on one thread (the page is not cross-origin isolated, so neither can start threads)
// and on the CPU (wllama with n_gpu_layers 0; gpukit's CPU backend). Prints one JSON object.
//
//   node scripts/peers/wllama.mjs      (after `make www`; installs wllama into target/peers)
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, rmSync, symlinkSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "../serve.mjs";

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
const site = join(peers, "wllama-site");
rmSync(site, { recursive: true, force: true });
mkdirSync(site, { recursive: true });
symlinkSync(resolve(root, "www/pkg"), join(site, "pkg"));
symlinkSync(resolve(root, "target/models"), join(site, "models"));
symlinkSync(wllama, join(site, "wllama"));
symlinkSync(resolve(root, "scripts/peers/bench_text.txt"), join(site, "bench_text.txt"));
symlinkSync(resolve(root, "www/index.html"), join(site, "index.html"));

const server = await serve(site, 0);
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless=new", "--no-sandbox", "--enable-unsafe-webgpu", "--disable-dev-shm-usage"],
});
try {
  const page = await browser.newPage();
  page.on("console", (m) => m.type() === "error" && console.error(m.text()));
  await page.goto(`${base}/index.html`);
  const result = await page.evaluate(async () => {
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
  });
  console.log(JSON.stringify(result));
} finally {
  await browser.close();
  server.close();
}
