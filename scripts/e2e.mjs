// End-to-end: serves www/ on 127.0.0.1, drives Debian's /usr/bin/chromium (headless, WebGPU on
// SwiftShader) through playwright-core, and checks each page: the backend is WebGPU, the
// playground verifies every op, the benchmark page draws its chart from verified results, and
// the digit page classifies digits drawn with mouse events. Screenshots go to target/e2e/.
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
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failures.push(what);
};

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
  {
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
    check(
      errors.length === 0,
      `index: no page errors after the hostile calls ${JSON.stringify(errors)}`,
    );
    await page.close();
  }
  // The playground on WebGPU: every op verified against the JS reference.
  {
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
  {
    const { page, errors } = await open("/bench.html?quick=1&backend=webgpu", 600_000);
    const backend = await page.evaluate(() => document.body.dataset.backend);
    check(backend === "webgpu", `bench: backend is WebGPU (${backend})`);
    const rows = await page.evaluate(() => window.gpukitBench || []);
    check(rows.length === 11, `bench: ${rows.length} workloads ran`);
    for (const r of rows) {
      const fmt = (x) =>
        x ? (x.ok ? `${x.ms.toFixed(2)} ms` : `failed: ${x.error || x.err}`) : "n/a";
      console.log(`     ${r.id}: gpukit ${fmt(r.gpukit)}, raw ${fmt(r.raw)}, tfjs ${fmt(r.tfjs)}`);
      check(r.gpukit?.ok, `bench: ${r.id} gpukit result verified`);
      // Raw WebGPU has no softmax, conv2d or attention kernel.
      if (!["W3", "C1", "A1"].includes(r.id))
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
  {
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
} finally {
  await browser.close();
  server.close();
}
if (failures.length) {
  console.error(`e2e: ${failures.length} check(s) failed`);
  process.exit(1);
}
console.log(`e2e: all checks passed; screenshots in ${shots}`);
