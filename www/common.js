// Shared by the pages: loads the gpukit package (wasm-pack --target web, copied to ./pkg by
// `make www`), opens a device and shows which backend and adapter run.
import init, { Gpu } from "./pkg/gpukit.js";

/** The backend the page asks for: `?backend=webgpu|cpu|auto` (default auto). */
export function requestedBackend() {
  return new URLSearchParams(location.search).get("backend") || "auto";
}

/** Opens a device and fills `#banner` with what runs; a software adapter gets a warning.
 *  `pkg` is the package entry to start (the core by default; the search page passes the
 *  models entry, whose `Gpu` its `Embedder` takes). */
export async function openGpu(pkg = { init, Gpu }) {
  const banner = document.getElementById("banner");
  try {
    await pkg.init();
    const gpu = await pkg.Gpu.create({ backend: requestedBackend() });
    const info = gpu.info;
    document.body.dataset.backend = info.backend;
    document.body.dataset.adapter = info.adapter;
    const kind =
      info.backend === "cpu" ? "CPU backend (WebAssembly SIMD128)" : `WebGPU on ${info.adapter}`;
    banner.textContent = `gpukit runs on the ${kind}. ${info.selection}.`;
    if (info.software) {
      banner.classList.add("warn");
      banner.textContent +=
        info.backend === "cpu"
          ? " No GPU is in use: expect CPU speeds."
          : " This is a software adapter (no GPU hardware): expect it to be slow.";
    }
    return gpu;
  } catch (e) {
    banner.classList.add("error");
    banner.textContent = `gpukit could not start: ${e.message}`;
    document.body.dataset.status = "error";
    throw e;
  }
}

/** Seeded uniform values in [-2, 2): never all zeros, the same on every run. */
export function random(n, seed = 1) {
  let s = seed >>> 0 || 1;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    out[i] = (s / 4294967296) * 4 - 2;
  }
  return out;
}

/** Largest error relative to 1 + |want|; NaN where one side is NaN and the other not. */
export function maxError(got, want) {
  if (got.length !== want.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < want.length; i++) {
    if (Number.isNaN(want[i]) || Number.isNaN(got[i])) {
      if (Number.isNaN(want[i]) !== Number.isNaN(got[i])) return Infinity;
      continue;
    }
    if (got[i] === want[i]) continue;
    worst = Math.max(worst, Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i])));
  }
  return worst;
}

export function nav() {
  return (
    `<nav><a href="index.html">gpukit</a><a href="playground.html">Playground</a>` +
    `<a href="bench.html">Benchmarks</a><a href="digits.html">Draw a digit</a>` +
    `<a href="search.html">Semantic search</a><a href="chat.html">Chat</a></nav>`
  );
}
