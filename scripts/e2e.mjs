// End-to-end: serves www/ on 127.0.0.1, drives Debian's /usr/bin/chromium (headless, WebGPU on
// SwiftShader) through playwright-core, and checks each page: the backend is WebGPU, the
// playground verifies every op, the benchmark page draws its chart from verified results, and
// the digit page classifies digits drawn with mouse events, and the search page runs
// all-MiniLM-L6-v2 (checked against the f64 reference of examples/bert_reference.rs), ranks
// typed queries and reloads its model from Cache Storage, and the chat page answers with
// SmolLM2-135M-Instruct (checked against examples/llama_reference.rs), streams and stops.
// Screenshots go to target/e2e/.
import { execFileSync } from "node:child_process";
import { mkdir, readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { serve } from "./serve.mjs";

const www = fileURLToPath(new URL("../www", import.meta.url));
const shots = fileURLToPath(new URL("../target/e2e", import.meta.url));
await mkdir(shots, { recursive: true });
const server = await serve(www, 0);
const base = `http://127.0.0.1:${server.address().port}`;
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: [
    "--headless=new",
    "--no-sandbox",
    "--enable-unsafe-webgpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
  ],
});
const failures = [];
// GPUKIT_E2E_PAGES=search,digits runs only those pages (all of them by default).
const pages = process.env.GPUKIT_E2E_PAGES?.split(",");
const want = (name) => !pages || pages.includes(name);
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

// Reloads `page` and checks that it gets ready again without requesting any file whose URL
// holds `model`: the model comes from Cache Storage, not the server.
async function reloadsFromCache(page, name, model) {
  const fetched = [];
  page.on("request", (r) => {
    if (r.url().includes(model)) fetched.push(r.url());
  });
  await page.reload();
  await page.waitForFunction(() => ["done", "error"].includes(document.body.dataset.status), null, {
    timeout: 600_000,
  });
  const again = await page.evaluate(() => document.body.dataset.status);
  check(
    again === "done" && fetched.length === 0,
    `${name}: a reload loads the model from the cache (${again}; fetched ${JSON.stringify(fetched)})`,
  );
}

async function open(path, timeout = 300_000) {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  await page.goto(base + path);
  await page.waitForFunction(() => ["done", "error"].includes(document.body.dataset.status), null, {
    timeout,
  });
  return { page, errors };
}

try {
  // The index page opens gpukit with automatic selection and says what it picked.
  if (want("index")) {
    const { page, errors } = await open("/index.html");
    const backend = await page.evaluate(() => document.body.dataset.backend);
    check(["webgpu", "cpu"].includes(backend), `index: automatic selection picked ${backend}`);
    check(errors.length === 0, `index: no page errors ${JSON.stringify(errors)}`);
    await page.screenshot({ path: `${shots}/index.png`, fullPage: true });
    // Hostile calls (tests/npm/hostile.mjs, as in Node) against the WebGPU device: every one
    // returns or fails with an Error, none traps, and the module still computes afterwards.
    const source = (
      await readFile(new URL("../tests/npm/hostile.mjs", import.meta.url), "utf8")
    ).replace("export async function hostile", "async function hostile");
    const outcome = await page.evaluate(async (src) => {
      const hostile = new Function(`${src}; return hostile;`)();
      const gpukit = await import("/pkg/gpukit.js");
      await gpukit.default();
      const gpu = await gpukit.Gpu.create({ backend: "webgpu" });
      try {
        return await hostile(gpukit, gpu, "browser", 1500);
      } catch (e) {
        return { error: `${e?.constructor?.name}: ${e?.message ?? e}` };
      }
    }, source);
    check(!outcome.error, `index: hostile JS calls on WebGPU ${JSON.stringify(outcome)}`);
    // f16 reads come back as a Float16Array where the browser has one (Chromium does).
    const half = await page.evaluate(async () => {
      const gpukit = await import("/pkg/gpukit.js");
      const gpu = await gpukit.Gpu.create({ backend: "webgpu" });
      const t = gpu.tensor(new Float32Array([1.5, -2, 70000]), [3]).cast("f16");
      const r = await t.readTyped();
      return {
        has: typeof globalThis.Float16Array,
        kind: r.constructor.name,
        values: Array.from(r),
      };
    });
    const wantKind = half.has === "function" ? "Float16Array" : "Uint16Array";
    const wantValues = half.has === "function" ? [1.5, -2, null] : [0x3e00, 0xc000, 0x7c00];
    check(
      half.kind === wantKind && JSON.stringify(half.values) === JSON.stringify(wantValues),
      `index: f16 readTyped gives ${wantKind} ${JSON.stringify(half)}`,
    );
    check(
      errors.length === 0,
      `index: no page errors after the hostile calls ${JSON.stringify(errors)}`,
    );
    await page.close();
  }
  // The playground on WebGPU: every op verified against the JS reference.
  if (want("playground")) {
    const { page, errors } = await open("/playground.html?backend=webgpu");
    const info = await page.evaluate(() => ({
      backend: document.body.dataset.backend,
      adapter: document.body.dataset.adapter,
    }));
    check(
      info.backend === "webgpu",
      `playground: backend is WebGPU (${info.backend}, ${info.adapter})`,
    );
    const results = await page.evaluate(() => window.gpukitResults || []);
    check(results.length >= 10, `playground: ${results.length} ops ran`);
    for (const r of results)
      check(
        r.verified,
        `playground: ${r.op} verified (error ${r.err}${r.error ? ", " + r.error : ""})`,
      );
    check(errors.length === 0, `playground: no page errors ${JSON.stringify(errors)}`);
    await page.screenshot({ path: `${shots}/playground.png`, fullPage: true });
    await page.close();
  }
  // The benchmark page (quick sizes): every gpukit and raw-WebGPU result verified, a chart.
  if (want("bench")) {
    const { page, errors } = await open("/bench.html?quick=1&backend=webgpu", 600_000);
    const backend = await page.evaluate(() => document.body.dataset.backend);
    check(backend === "webgpu", `bench: backend is WebGPU (${backend})`);
    const rows = await page.evaluate(() => window.gpukitBench || []);
    check(rows.length === 13, `bench: ${rows.length} workloads ran`);
    for (const r of rows) {
      const fmt = (x) =>
        x ? (x.ok ? `${x.ms.toFixed(2)} ms` : `failed: ${x.error || x.err}`) : "n/a";
      console.log(`     ${r.id}: gpukit ${fmt(r.gpukit)}, raw ${fmt(r.raw)}, tfjs ${fmt(r.tfjs)}`);
      check(r.gpukit?.ok, `bench: ${r.id} gpukit result verified`);
      // Raw WebGPU has no softmax, GEMV, conv2d or attention kernel.
      if (!["W3", "S1", "G1", "C1", "A1"].includes(r.id))
        check(r.raw?.ok, `bench: ${r.id} raw WebGPU result verified`);
    }
    const tuning = await page.evaluate(() => window.gpukitTuning || []);
    check(tuning.length >= 1, `bench: the autotuner reported ${tuning.length} size classes`);
    for (const t of tuning) {
      console.log(
        `     tuner ${t.class} [${t.shape}]: ${t.timingsUs.map(([tile, us]) => `${tile} ${us.toFixed(0)}${tile === t.best ? "*" : ""}`).join(", ")}`,
      );
    }
    const bars = await page.locator("#chart svg rect").count();
    check(bars >= 9, `bench: the chart has ${bars} bars`);
    check(errors.length === 0, `bench: no page errors ${JSON.stringify(errors)}`);
    await page.screenshot({ path: `${shots}/bench.png`, fullPage: true });
    await page.close();
  }
  // Draw-a-digit: strokes drawn with mouse events, each classified on WebGPU.
  if (want("digits")) {
    const { page, errors } = await open("/digits.html?backend=webgpu");
    const backend = await page.evaluate(() => document.body.dataset.backend);
    check(backend === "webgpu", `digits: backend is WebGPU (${backend})`);
    const box = await page.locator("#pad").boundingBox();
    const stroke = async (points) => {
      await page.mouse.move(box.x + points[0][0], box.y + points[0][1]);
      await page.mouse.down();
      for (const [x, y] of points.slice(1))
        await page.mouse.move(box.x + x, box.y + y, { steps: 4 });
      await page.mouse.up();
    };
    const ellipse = (cx, cy, rx, ry) =>
      Array.from({ length: 41 }, (_, i) => [
        cx + rx * Math.sin((i * Math.PI) / 20),
        cy - ry * Math.cos((i * Math.PI) / 20),
      ]);
    const digits = {
      0: [ellipse(140, 140, 65, 100)],
      1: [
        [
          [150, 35],
          [145, 140],
          [140, 245],
        ],
      ],
      // Written as the data's writers wrote 7s: with a bar across the stem.
      7: [
        [
          [70, 45],
          [140, 45],
          [215, 45],
          [170, 140],
          [125, 245],
        ],
        [
          [110, 140],
          [215, 140],
        ],
      ],
    };
    for (const [digit, strokes] of Object.entries(digits)) {
      await page.click("#clear");
      const before = await page.evaluate(() => Number(document.body.dataset.classified || 0));
      for (const s of strokes) await stroke(s);
      await page.waitForFunction(
        (n) => Number(document.body.dataset.classified || 0) >= n,
        before + strokes.length,
        { timeout: 60_000 },
      );
      const got = await page.evaluate(() => document.body.dataset.prediction);
      check(got === digit, `digits: a drawn ${digit} is classified as ${got}`);
      await page.screenshot({ path: `${shots}/digits-${digit}.png`, fullPage: true });
    }
    check(errors.length === 0, `digits: no page errors ${JSON.stringify(errors)}`);
    await page.close();
  }
  // Semantic search on WebGPU: the model checked against the f64 reference, typed queries
  // ranked, and a reload that takes the model from Cache Storage instead of the network.
  if (want("search")) {
    const root = fileURLToPath(new URL("..", import.meta.url));
    const texts = await readFile(`${root}/tests/data/embedding_texts.json`, "utf8");
    const reference = JSON.parse(
      execFileSync(
        "cargo",
        ["run", "--quiet", "--example", "bert_reference", "--", "target/models/all-minilm-l6-v2"],
        { cwd: root, input: texts, maxBuffer: 1 << 26 },
      ).toString(),
    );
    // Automatic selection, as a visitor gets it (on SwiftShader the measured policy picks
    // the CPU or a hybrid: the software adapter is slow).
    const { page, errors } = await open("/search.html", 600_000);
    const backend = await page.evaluate(() => document.body.dataset.backend);
    const ready = await page.evaluate(() => document.body.dataset.status);
    check(ready === "done", `search: the model loaded and the corpus was embedded on ${backend}`);
    if (ready === "done") {
      // The same model on the WebGPU adapter itself, against the f64 reference.
      const got = await page.evaluate(async (texts) => {
        const { Gpu, Embedder } = await import("/pkg/models/gpukit.js");
        const gpu = await Gpu.create({ backend: "webgpu" });
        const embedder = await Embedder.load(gpu, "models/all-minilm-l6-v2/", {
          cache: "gpukit-models",
        });
        const vectors = await embedder.embed(texts);
        // f16 linear weights, kept as f16 on the adapter (widened as the kernels read them).
        const half = await Embedder.load(gpu, "models/all-minilm-l6-v2/", {
          cache: "gpukit-models",
          weights: "f16",
        });
        const halfVectors = await half.embed(texts.slice(0, 4));
        return {
          backend: gpu.info.backend,
          vectors: vectors.map((v) => Array.from(v)),
          halfDtype: half.weightDtype,
          halfVectors: halfVectors.map((v) => Array.from(v)),
        };
      }, JSON.parse(texts));
      const lowest = (vectors) =>
        Math.min(...vectors.map((v, i) => v.reduce((s, x, j) => s + x * reference[i][j], 0)));
      const worst = lowest(got.vectors);
      check(
        got.backend === "webgpu" && worst >= 0.9999,
        `search: ${reference.length} texts match the f64 reference on ${got.backend} (lowest cosine ${worst.toFixed(9)})`,
      );
      const halfWorst = lowest(got.halfVectors);
      check(
        got.halfDtype === "f16" && halfWorst >= 0.9999,
        `search: f16 weights kept as ${got.halfDtype} on ${got.backend}, lowest cosine ${halfWorst.toFixed(9)}`,
      );
      const { corpusMs, loadMs } = await page.evaluate(() => window.gpukitSearch);
      console.log(
        `     model loaded in ${loadMs.toFixed(0)} ms; corpus embedded in ${corpusMs.toFixed(0)} ms`,
      );
      const queries = [
        ["how do I make bread at home", /dough|bread|sourdough/i],
        ["my login does not work", /password|locked|log ?in/i],
        ["planets and stars", /planet|star|galaxy|solar|telescope/i],
      ];
      for (const [query, want] of queries) {
        await page.fill("#query", "");
        await page.type("#query", query, { delay: 5 });
        await page.waitForFunction((q) => document.body.dataset.query === q, query, {
          timeout: 120_000,
        });
        const top = await page.evaluate(() => document.body.dataset.top);
        check(want.test(top), `search: "${query}" ranks first: ${top}`);
      }
      await page.screenshot({ path: `${shots}/search.png`, fullPage: true });
      await reloadsFromCache(page, "search", "/models/all-minilm");
    }
    check(errors.length === 0, `search: no page errors ${JSON.stringify(errors)}`);
    await page.close();
  }
  // Chat: SmolLM2 on the WebGPU adapter against the f64 reference (greedy ids where its margin
  // is clear, the logits after the prompt), then the page asks, streams, stops and reloads.
  if (want("chat")) {
    const root = fileURLToPath(new URL("..", import.meta.url));
    const gguf = "target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
    const [reference] = JSON.parse(
      execFileSync("cargo", ["run", "--quiet", "--example", "llama_reference", "--", gguf, "4"], {
        cwd: root,
        input: JSON.stringify(["What is the capital of France?"]),
        maxBuffer: 1 << 26,
      }).toString(),
    );
    const { page, errors } = await open("/chat.html", 600_000);
    const backend = await page.evaluate(() => window.gpukitChat?.backend);
    const ready = await page.evaluate(() => document.body.dataset.status);
    check(ready === "done", `chat: the model loaded on ${backend}`);
    if (ready === "done") {
      const got = await page.evaluate(async (ref) => {
        const { Gpu, Llm } = await import("/pkg/models/gpukit.js");
        const gpu = await Gpu.create({ backend: "webgpu" });
        const llm = await Llm.load(gpu, "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", {
          cache: "gpukit-models",
          context: 64,
        });
        const gen = llm.generate(ref.prompt, { maxTokens: ref.ids.length });
        for await (const _ of gen);
        const logits = await llm.logits(Array.from(gen.promptIds));
        const scale = ref.logits.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
        const err = ref.logits.reduce((m, v, i) => Math.max(m, Math.abs(v - logits[i])), 0);
        return { backend: gpu.info.backend, ids: Array.from(gen.ids), err, scale };
      }, reference);
      let same = true;
      reference.ids.forEach((id, i) => {
        if (same !== null && reference.margins[i] >= 0.05) same &&= got.ids[i] === id;
        else same = same && null;
      });
      check(
        got.backend === "webgpu" && same !== false && got.err <= 2e-4 * got.scale,
        `chat: greedy ids ${got.ids} match the f64 reference's ${reference.ids} on ${got.backend}; ` +
          `logits max error ${got.err.toExponential(2)} of ${got.scale.toFixed(1)}`,
      );
      let asked = 0;
      // Sends a question; resolves once the page has started answering it.
      const ask = async (prompt) => {
        asked += 1;
        await page.fill("#prompt", prompt);
        await page.click("#send");
        await page.waitForFunction((n) => document.body.dataset.asked === String(n), asked);
      };
      const answered = () =>
        page.waitForFunction((n) => document.body.dataset.answered === String(n), asked, {
          timeout: 300_000,
        });
      await ask("What is the capital of France?");
      await answered();
      const answer = await page.evaluate(() => document.body.dataset.answer);
      check(/Paris/.test(answer), `chat: the answer names Paris: ${JSON.stringify(answer)}`);
      console.log(
        `     ${await page.evaluate(() => document.getElementById("timing").textContent)}`,
      );
      await page.screenshot({ path: `${shots}/chat.png`, fullPage: true });
      // Stop mid-answer (pressed as the first piece shows): the answer ends and says so.
      asked += 1;
      await page.fill("#prompt", "Count from 1 to 200, one number per line.");
      await page.evaluate(
        () =>
          new Promise((resolve) => {
            const answer = document.getElementById("answer");
            const seen = new MutationObserver(() => {
              if (!answer.textContent) return;
              seen.disconnect();
              document.getElementById("stop").click();
              resolve();
            });
            seen.observe(answer, { childList: true, characterData: true, subtree: true });
            document.getElementById("send").click();
          }),
      );
      await answered();
      const finish = await page.evaluate(() => document.body.dataset.finish);
      check(finish === "aborted", `chat: the stop button aborts the answer (${finish})`);
      await reloadsFromCache(page, "chat", "/models/smollm2");
    }
    check(errors.length === 0, `chat: no page errors ${JSON.stringify(errors)}`);
    await page.close();
  }
} finally {
  await browser.close();
  server.close();
}
if (failures.length) {
  console.error(`e2e: ${failures.length} check(s) failed`);
  process.exit(1);
}
console.log(`e2e: all checks passed; screenshots in ${shots}`);
