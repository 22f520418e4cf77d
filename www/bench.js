// The benchmark page: the workloads of bench-workloads.js in this browser, as a table and a
// chart (gpukit, raw WebGPU and tfjs-webgpu), with the matmul tuner's choices.
import { openGpu, nav } from "./common.js";
import { RawWebGpu } from "./raw-webgpu.js";
import { benchSizes, runWorkloads, IMPLS } from "./bench-workloads.js";

document.getElementById("nav").innerHTML = nav();
const quick = new URLSearchParams(location.search).has("quick");
const sizes = benchSizes(quick ? "quick" : "page");

function chart(results) {
  const names = IMPLS;
  const colors = { gpukit: "#1d9b4a", raw: "#4a7bd0", tfjs: "#d08a1d" };
  const rowH = 16,
    groupH = rowH * 3 + 14,
    left = 70,
    width = 560;
  const h = results.length * groupH + 30;
  let svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${left + width + 120}" height="${h}" role="img" aria-label="throughput chart">`;
  svg += `<text x="${left}" y="14">relative throughput (longest bar = fastest of the three, per workload)</text>`;
  results.forEach((r, g) => {
    const fastest = Math.min(...names.map((n) => (r[n]?.ok ? r[n].ms : Infinity)));
    const y0 = 24 + g * groupH;
    svg += `<text x="0" y="${y0 + rowH * 1.7}">${r.id}</text>`;
    names.forEach((n, i) => {
      const res = r[n];
      const y = y0 + i * rowH;
      if (!res?.ok) {
        svg += `<text x="${left}" y="${y + 12}" fill="#888">${n}: ${res ? "failed" : "n/a"}</text>`;
        return;
      }
      const len = Math.max(2, (width * fastest) / res.ms);
      svg += `<rect x="${left}" y="${y}" width="${len.toFixed(1)}" height="${rowH - 3}" fill="${colors[n]}"><title>${n} ${res.ms.toFixed(2)} ms</title></rect>`;
      svg += `<text x="${left + len + 6}" y="${y + 12}">${n} ${res.ms.toFixed(2)} ms</text>`;
    });
  });
  document.getElementById("chart").innerHTML = svg + "</svg>";
}

async function runAll(gpu, raw, tf) {
  document.body.dataset.status = "running";
  const body = document.getElementById("rows");
  body.innerHTML = "";
  const shown = [];
  const cell = (r) =>
    !r ? "–" : r.ok ? r.ms.toFixed(2) : `<span class="bad">${r.error ? "error" : "wrong"}</span>`;
  const results = await runWorkloads(gpu, raw, tf, sizes, {
    onStart: (w) => (document.getElementById("progress").textContent = `running ${w.id}…`),
    onRow: (row) => {
      shown.push(row);
      const ratio =
        row.gpukit?.ok && row.raw?.ok ? (row.gpukit.ms / row.raw.ms).toFixed(2) + "×" : "–";
      const checks = IMPLS.filter((n) => row[n])
        .map((n) => `${n} ${row[n].ok ? "✓" : "✗ " + (row[n].error || row[n].err)}`)
        .join(", ");
      const tr = document.createElement("tr");
      tr.innerHTML = `<td>${row.id}</td><td>${row.name}</td><td class="num">${cell(row.gpukit)}</td><td class="num">${cell(row.raw)}</td><td class="num">${cell(row.tfjs)}</td><td class="num">${ratio}</td><td>${checks}</td>`;
      body.appendChild(tr);
      chart(shown);
    },
  });
  document.getElementById("progress").textContent =
    `done (${quick ? "quick sizes" : "full sizes"}, median of ${sizes.runs} runs)`;
  window.gpukitBench = results;
  // The autotuner's choice for each matmul size class this adapter ran (tuned at the waits).
  window.gpukitTuning = gpu.tuning();
  document.getElementById("tuning").textContent = window.gpukitTuning.length
    ? "matmul autotuner on this adapter (us per matmul; * = chosen):\n" +
      window.gpukitTuning
        .map(
          (r) =>
            `${r.class} [${r.shape.join(", ")}]: ` +
            r.timingsUs
              .map(([t, us]) => `${t} ${us.toFixed(0)}${t === r.best ? "*" : ""}`)
              .join(", "),
        )
        .join("\n")
    : "no matmul was tuned (the CPU backend has no tiles)";
  document.body.dataset.status = "done";
}

const gpu = await openGpu();
let raw = null;
try {
  raw = await RawWebGpu.create();
} catch (e) {
  console.warn(`raw WebGPU unavailable: ${e.message}`);
}
let tf = window.tf ?? null;
if (tf) {
  try {
    if (!(await tf.setBackend("webgpu"))) throw new Error("setBackend failed");
    await tf.ready();
  } catch (e) {
    console.warn(`tfjs-webgpu unavailable: ${e.message}`);
    tf = null;
  }
}
document.getElementById("run").onclick = () => runAll(gpu, raw, tf);
await runAll(gpu, raw, tf);
