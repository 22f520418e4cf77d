// The models of the embeddings and LLM issues in the package's web build (`gpukit/models`) on
// WebGPU through Dawn, each checked against the same build's CPU backend in the same process:
//   E1: one sentence of 15 tokens, text to vector (median of 30 after 3 warm-ups);
//   E2: 128 sentences of 128 tokens; E3: 32 sentences of 15 tokens (sentences/s);
//   C1: decode tokens/s, 128 new tokens (greedy, end tokens ignored) after a 128-token prompt;
//   C2: prefill tokens/s of a 512-token prompt (its time to the first new token).
// The same workloads as `gpukit bench-embed` and `gpukit bench-chat` natively.
// With `--tjs DIR --tjs-model DIR` transformers.js (onnxruntime-web on WebGPU) embeds the same
// texts in the same process (transformers.mjs), each workload timed for both libraries in turn,
// and its vectors must agree with gpukit's.
//   node scripts/dawn/models.mjs --www DIR --minilm DIR --smollm FILE --text FILE
//     [--tjs DIR --tjs-model DIR] [--weights f16|bf16] [--quick] [--json FILE]
// --quick: fewer runs and no E2 (for a software adapter). --weights: MiniLM's linear weights
// on the WebGPU side (kept in that dtype, `weightDtype`; the CPU reference keeps f32).
import fs from "node:fs";
import path from "node:path";
import { opt, args, loadPackage } from "./env.mjs";
import { loadTransformers } from "./transformers.mjs";

const pkg = await loadPackage("pkg/models");
const gpu = await pkg.Gpu.create({ backend: "webgpu" });
const cpu = await pkg.Gpu.create({ backend: "cpu" });
console.log(`gpukit models on ${gpu.info.adapter} (${gpu.info.backend}), checked against wasm CPU`);
const median = (v) => v.slice().sort((x, y) => x - y)[Math.floor(v.length / 2)];
const report = { date: new Date().toISOString(), adapter: gpu.info.adapter, rows: [] };
const row = (id, workload, value, unit, note = "", library = "gpukit") => {
  report.rows.push({ id, library, workload, value, unit, note });
  console.log(
    `${id.padEnd(3)} ${library.padEnd(15)} ${workload.padEnd(44)} ${value.toFixed(2).padStart(10)} ${unit} ${note}`,
  );
};
const quick = args.includes("--quick");
let failed = false;

// Each model's failure is reported and fails the run without stopping the other.
const guarded = async (what, f) => {
  try {
    await f();
  } catch (e) {
    failed = true;
    console.error(`${what} failed: ${e.message}`);
  }
};

const minilm = opt("--minilm");
if (minilm)
  await guarded("all-MiniLM-L6-v2", async () => {
    const files = {
      config: fs.readFileSync(path.join(minilm, "config.json"), "utf8"),
      tokenizer: fs.readFileSync(path.join(minilm, "tokenizer.json")),
      weights: fs.readFileSync(path.join(minilm, "model.safetensors")),
    };
    const weights = opt("--weights") ?? "f32";
    const embedder = await pkg.Embedder.load(gpu, files, { weights });
    const reference = await pkg.Embedder.load(cpu, files);
    console.log(`all-MiniLM-L6-v2 with ${embedder.weightDtype} linear weights on WebGPU`);
    const sentence = "The quick brown fox jumps over the lazy dog near the river.";
    const long = "word ".repeat(126);
    const texts = [sentence, "GPU compute in the browser", "Ünïcödé, emoji 🚀 and 漢字."];
    const [got, want] = [await embedder.embed(texts), await reference.embed(texts)];
    const worst = Math.min(...got.map((v, i) => v.reduce((s, x, j) => s + x * want[i][j], 0)));
    const ok = worst >= 0.9999;
    failed ||= !ok;
    console.log(
      `embeddings: lowest cosine to the CPU backend ${worst.toFixed(7)} ${ok ? "ok" : "WRONG"}`,
    );
    // The peer, loaded after gpukit's check so that a failure there is told apart.
    const peers = [{ library: "gpukit", embed: (texts) => embedder.embed(texts) }];
    if (opt("--tjs")) {
      const tjs = await loadTransformers(opt("--tjs"), opt("--tjs-model"));
      const theirs = await tjs.embed(texts);
      const agree = Math.min(...theirs.map((v, i) => v.reduce((s, x, j) => s + x * got[i][j], 0)));
      const same = agree >= 0.9999;
      failed ||= !same;
      console.log(
        `transformers.js ${tjs.version}: lowest cosine to gpukit ${agree.toFixed(7)} ${same ? "ok" : "WRONG"}`,
      );
      peers.push({ library: "transformers.js", embed: tjs.embed });
    }
    // A workload's median time in ms for each library, the libraries taking turns run by run.
    const time = async (batch, warm, runs) => {
      const times = peers.map(() => []);
      for (let i = 0; i < warm + runs; i++) {
        for (const [p, peer] of peers.entries()) {
          const t0 = performance.now();
          const out = await peer.embed(batch);
          if (i >= warm) times[p].push(performance.now() - t0);
          if (out.length !== batch.length) throw new Error(`${peer.library}: a vector is missing`);
        }
      }
      return times.map(median);
    };
    const tokens = embedder.tokenize(sentence).length;
    const runs = (n) => (quick ? Math.min(n, 3) : n);
    const e1 = await time([sentence], quick ? 1 : 3, runs(30));
    peers.forEach((p, i) =>
      row("E1", `batch 1, one sentence of ${tokens} tokens`, e1[i], "ms", "", p.library),
    );
    if (!quick) {
      const e2 = await time(Array(128).fill(long), 1, 5);
      peers.forEach((p, i) =>
        row(
          "E2",
          "128 sentences x 128 tokens",
          (128 / e2[i]) * 1e3,
          "sentences/s",
          `${e2[i].toFixed(1)} ms`,
          p.library,
        ),
      );
    }
    const e3 = await time(Array(32).fill(sentence), quick ? 1 : 2, runs(10));
    peers.forEach((p, i) =>
      row(
        "E3",
        `32 sentences of ${tokens} tokens`,
        (32 / e3[i]) * 1e3,
        "sentences/s",
        `${e3[i].toFixed(1)} ms`,
        p.library,
      ),
    );
  });

const smollm = opt("--smollm");
if (smollm)
  await guarded("SmolLM2", async () => {
    const bytes = fs.readFileSync(smollm);
    const llm = await pkg.Llm.load(gpu, bytes, { context: 1024 });
    const reference = await pkg.Llm.load(cpu, bytes, { context: 1024 });
    const text = fs.readFileSync(opt("--text"), "utf8");
    const ids = llm.tokenize(text);
    if (ids.length < 512) throw new Error(`the text has ${ids.length} tokens, fewer than 512`);
    // Logits after a 64-token prompt against the CPU backend's.
    const probe = ids.slice(0, 64);
    const [got, want] = [await llm.logits(probe), await reference.logits(probe)];
    const scale = want.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
    const err = want.reduce((m, v, i) => Math.max(m, Math.abs(v - got[i])), 0);
    const ok = err <= 1e-3 * scale;
    failed ||= !ok;
    console.log(
      `llm: logits differ from the CPU backend's by ${err.toExponential(2)} of ${scale.toFixed(1)} ${ok ? "ok" : "WRONG"}`,
    );
    const run = async (prompt, maxTokens) => {
      const gen = llm.generate(llm.detokenize(prompt), { raw: true, ignoreEos: true, maxTokens });
      for await (const _ of gen);
      return gen;
    };
    await run(ids.slice(0, 128), 16); // warm-up: pipelines, the decode graph
    const decode = [];
    const prompts = [];
    for (let i = 0; i < 3; i++) {
      const gen = await run(ids.slice(0, 128), 128);
      decode.push(gen.decodeTokensPerSecond);
      prompts.push(gen.promptIds.length);
    }
    row(
      "C1",
      `decode, 128 new tokens after ${prompts[0]} prompt tokens`,
      median(decode),
      "tokens/s",
      `runs ${decode.map((d) => d.toFixed(1)).join(", ")}`,
    );
    const prefill = [];
    for (let i = 0; i < 3; i++)
      prefill.push((await run(ids.slice(0, 512), 1)).prefillTokensPerSecond);
    row(
      "C2",
      "prefill, a 512-token prompt",
      median(prefill),
      "tokens/s",
      `runs ${prefill.map((d) => d.toFixed(0)).join(", ")}`,
    );
  });

const out = opt("--json");
if (out) fs.writeFileSync(out, JSON.stringify(report, null, 1));
process.exit(failed ? 1 : 0);
