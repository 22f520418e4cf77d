// The CPU backend in Node: the same Rust workloads (gpukit::bench_cpu) built for wasm32 twice,
// with SIMD128 and without, run side by side. `make bench-node` builds both packages first.
//
//   node scripts/bench-node.mjs [--quick] [--json]
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

const require = createRequire(import.meta.url);
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const quick = process.argv.includes("--quick");
const json = process.argv.includes("--json");

async function measure(flavour) {
  const pkg = require(path.join(root, "target", "node", flavour, "gpukit.js"));
  return JSON.parse(await pkg.benchCpu(quick));
}

// The two builds take turns, never at once, for several rounds; each row is the median
// over rounds, so load from elsewhere on the machine falls on both alike.
const rounds = quick ? 1 : 3;
const runs = { simd: [], scalar: [] };
for (let r = 0; r < rounds; r++) {
  runs.simd.push(await measure("simd"));
  runs.scalar.push(await measure("scalar"));
}
const [simd, scalar] = [runs.simd[0], runs.scalar[0]];
if (!simd.simd128 || scalar.simd128) {
  throw new Error("the simd and scalar builds are mixed up (check the build flags)");
}
const median = (v) => v.slice().sort((a, b) => a - b)[v.length >> 1];
const value = (flavour, i) => median(runs[flavour].map((m) => m.rows[i].gpukit));

const rows = simd.rows.map((r, i) => ({
  id: r.id,
  workload: r.workload,
  simd128: value("simd", i),
  scalar: value("scalar", i),
  speedup: value("simd", i) / value("scalar", i),
  unit: r.unit,
  runs: r.runs,
  rounds,
}));

if (json) {
  console.log(JSON.stringify({ node: process.version, device: simd.device, quick, rows }, null, 2));
} else {
  console.log(`Node ${process.version}, ${simd.device.adapter}, gpukit CPU backend in wasm32`);
  console.log(`simd128 build: ${simd.device.driver}`);
  console.log(`scalar build:  ${scalar.device.driver}\n`);
  const head = ["id", "workload", "simd128", "scalar", "simd/scalar", "unit"];
  const body = rows.map((r) => [
    r.id,
    r.workload,
    r.simd128.toFixed(3),
    r.scalar.toFixed(3),
    `${r.speedup.toFixed(2)}x`,
    r.unit,
  ]);
  const widths = head.map((h, c) => Math.max(h.length, ...body.map((b) => b[c].length)));
  const line = (cells) =>
    cells
      .map((x, c) => x.padEnd(widths[c]))
      .join("  ")
      .trimEnd();
  console.log(line(head));
  console.log(line(widths.map((w) => "-".repeat(w))));
  body.forEach((b) => console.log(line(b)));
}
