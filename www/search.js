// Semantic search: all-MiniLM-L6-v2 through the package's `gpukit/models` entry (copied to
// ./pkg/models by `make www`). The model downloads once with a progress bar and is kept in
// Cache Storage ("gpukit-models"), so a reload reads it from there; the corpus is embedded at
// start, and each query is embedded as it is typed and ranked by cosine similarity.
import init, { Gpu, Embedder } from "./pkg/models/gpukit.js";
import { openGpu, nav } from "./common.js";

document.getElementById("nav").innerHTML = nav();
const $ = (id) => document.getElementById(id);
const mb = (n) => (n / 1e6).toFixed(1);

try {
  const gpu = await openGpu({ init, Gpu });
  const started = performance.now();
  const embedder = await Embedder.load(gpu, "models/all-minilm-l6-v2/", {
    cache: "gpukit-models",
    onProgress: ({ loaded, total }) => {
      if (total) $("progress").value = loaded / total;
      $("progress-label").textContent =
        `Downloading the model: ${mb(loaded)}${total ? ` of ${mb(total)}` : ""} MB`;
    },
  });
  const loadMs = performance.now() - started;
  $("progress-label").textContent = "Embedding the sentences…";
  const corpus = await (await fetch("search/corpus.json")).json();
  const t0 = performance.now();
  const vectors = await embedder.embed(corpus);
  const corpusMs = performance.now() - t0;
  $("loading").hidden = true;
  const backend = gpu.info.backend === "cpu" ? "the CPU backend" : `WebGPU (${gpu.info.adapter})`;
  const summary =
    `Model ready in ${(loadMs / 1000).toFixed(1)} s; ${corpus.length} sentences embedded on ` +
    `${backend} in ${corpusMs.toFixed(0)} ms.`;
  $("timing").textContent = summary;

  let pending = null;
  let running = false;
  async function search() {
    if (running) return;
    running = true;
    while (pending !== null) {
      const query = pending;
      pending = null;
      if (!query.trim()) {
        $("results").innerHTML = "";
        $("timing").textContent = summary;
        continue;
      }
      const t = performance.now();
      const [q] = await embedder.embed([query]);
      const ms = performance.now() - t;
      const ranked = vectors
        .map((v, i) => ({ i, score: v.reduce((s, x, j) => s + x * q[j], 0) }))
        .sort((a, b) => b.score - a.score)
        .slice(0, 10);
      $("results").innerHTML = "";
      for (const { i, score } of ranked) {
        const li = document.createElement("li");
        const s = document.createElement("span");
        s.className = "score";
        s.textContent = score.toFixed(3);
        li.append(s, ` ${corpus[i]}`);
        $("results").append(li);
      }
      $("timing").textContent = `${summary} Query embedded in ${ms.toFixed(1)} ms.`;
      document.body.dataset.query = query;
      document.body.dataset.top = corpus[ranked[0].i];
    }
    running = false;
  }
  $("query").addEventListener("input", () => {
    pending = $("query").value;
    search().catch(fail);
  });
  $("query").disabled = false;
  $("query").focus();
  // For the end-to-end test: the embedder and the page's figures.
  window.gpukitSearch = { embedder, corpusMs, loadMs, backend: gpu.info.backend };
  document.body.dataset.status = "done";
} catch (e) {
  fail(e);
}

function fail(e) {
  $("banner").classList.add("error");
  $("banner").textContent = `The search could not run: ${e.message}`;
  document.body.dataset.status = "error";
  console.error(e);
}
