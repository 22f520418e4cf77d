// The benchmark page's workloads (www/bench-workloads.js) on WebGPU through Dawn in Node, at a
// real GPU's sizes: gpukit's web build, raw WebGPU (the floor) and tfjs-webgpu 4.22 in one
// process on one adapter, each result checked before its time counts.
//   node scripts/dawn/bench.mjs [--www DIR] [--json FILE] [--quick] [--only ID,ID..]
// DIR holds common.js, bench-workloads.js, raw-webgpu.js, pkg/ (the web build) and vendor/
// (tfjs), as `make www` leaves www/ and `make gpu-web` stages it. setup.cjs (beside this file)
// installs Dawn first; DAWN_NODE names its addon.
import fs from "node:fs";
import path from "node:path";
import vm from "node:vm";
import { require, args, opt, www, load, loadPackage } from "./env.mjs";

const adapter = await navigator.gpu.requestAdapter();
if (!adapter) throw new Error("Dawn found no WebGPU adapter");
const pkg = await loadPackage("pkg");
const gpu = await pkg.Gpu.create({ backend: "webgpu" });
const { RawWebGpu } = await load("raw-webgpu.js");
const raw = await RawWebGpu.create();
globalThis.require = require; // tf-core's UMD bundle asks for Node's util
for (const f of ["tf-core.min.js", "tf-backend-webgpu.min.js"])
  vm.runInThisContext(fs.readFileSync(path.join(www, "vendor", f), "utf8"), { filename: f });
const tf = globalThis.tf;
if (!(await tf.setBackend("webgpu"))) throw new Error("tfjs-webgpu did not start");
await tf.ready();

// Half a second of raw matmuls first: an idle GPU's clocks would otherwise slow the first
// workloads and the matmul tuner's first measurements (seen: 1024 and 2048 at a fifth of
// their speed when they came first). At --quick sizes (a software adapter such as SwiftShader)
// a 2048 matmul takes minutes, so the warm-up there is small.
{
  const n = args.includes("--quick") ? 256 : 2048;
  const [x, y, z] = [
    raw.buffer(new Float32Array(n * n).fill(1)),
    raw.buffer(new Float32Array(n * n).fill(1)),
    raw.buffer(n * n),
  ];
  for (const t0 = performance.now(); performance.now() - t0 < 500;) {
    const enc = raw.device.createCommandEncoder();
    for (let i = 0; i < 4; i++) raw.matmulOp(enc, x, y, z, n, n, n);
    raw.device.queue.submit([enc.finish()]);
    await raw.device.queue.onSubmittedWorkDone();
  }
  [x, y, z].forEach((b) => b.destroy());
}
const { benchSizes, runWorkloads, IMPLS } = await load("bench-workloads.js");
const sizes = benchSizes(args.includes("--quick") ? "quick" : "gpu");
const info = adapter.info;
const adapterName = [info.vendor, info.architecture, info.device, info.description]
  .filter(Boolean)
  .join(" ");
console.log(`adapter: ${adapterName}; gpukit: ${gpu.info.adapter} (${gpu.info.driver})`);
console.log(`gpukit features: ${JSON.stringify(gpu.info.features)}`);
console.log(`adapter features: ${[...adapter.features].sort().join(" ")}`);

const rate = (row, r) =>
  !r?.ok
    ? ""
    : row.flops
      ? `${(row.flops / r.ms / 1e9).toFixed(2)} TFLOP/s`
      : row.bytes
        ? `${(row.bytes / r.ms / 1e6).toFixed(0)} GB/s`
        : "";
const cell = (row, r) =>
  !r ? "-" : r.ok ? `${r.ms.toFixed(3)} ms ${rate(row, r)}` : `FAILED ${r.error ?? r.err}`;
console.log("| id | workload | gpukit | raw WebGPU | tfjs-webgpu | tfjs / gpukit |");
console.log("| --- | --- | --- | --- | --- | --- |");
const rows = await runWorkloads(gpu, raw, tf, sizes, {
  only: opt("--only")?.split(","),
  residentFirst: true,
  onRow: (row) => {
    const ratio =
      row.gpukit?.ok && row.tfjs?.ok ? `${(row.tfjs.ms / row.gpukit.ms).toFixed(2)}x` : "-";
    const cells = IMPLS.map((n) => cell(row, row[n])).join(" | ");
    console.log(`| ${row.id} | ${row.name} | ${cells} | ${ratio} |`);
  },
});
const failed = rows.flatMap((r) =>
  IMPLS.filter((n) => r[n] && !r[n].ok).map((n) => `${r.id} ${n}`),
);
const out = opt("--json");
if (out) {
  const report = {
    date: new Date().toISOString(),
    adapter: adapterName,
    gpukit: gpu.info,
    adapterFeatures: [...adapter.features].sort(),
    wgslLanguageFeatures: [...navigator.gpu.wgslLanguageFeatures].sort(),
    tuning: gpu.tuning(),
    rows,
  };
  fs.writeFileSync(out, JSON.stringify(report, null, 1));
}
if (failed.length) {
  console.error(`failed or wrong: ${failed.join(", ")}`);
  process.exit(1);
}
process.exit(0);
