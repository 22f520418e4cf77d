// Chat: SmolLM2-135M-Instruct through the package's `gpukit/models` entry (copied to
// ./pkg/models by `make www`). The GGUF downloads once with a progress bar and is kept in
// Cache Storage ("gpukit-models"); each answer streams token by token, with the backend and
// tokens per second shown, and the stop button aborts it (an AbortSignal).
import init, { Gpu, Llm } from "./pkg/models/gpukit.js";
import { openGpu, nav } from "./common.js";

document.getElementById("nav").innerHTML = nav();
const $ = (id) => document.getElementById(id);
const mb = (n) => (n / 1e6).toFixed(1);
const MODEL = "models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

try {
  const gpu = await openGpu({ init, Gpu });
  const started = performance.now();
  const llm = await Llm.load(gpu, MODEL, {
    cache: "gpukit-models",
    context: 1024,
    onProgress: ({ loaded, total }) => {
      if (total) $("progress").value = loaded / total;
      $("progress-label").textContent =
        `Downloading the model: ${mb(loaded)}${total ? ` of ${mb(total)}` : ""} MB`;
    },
  });
  const loadMs = performance.now() - started;
  $("loading").hidden = true;
  const backend = gpu.info.backend === "cpu" ? "the CPU backend" : `WebGPU (${gpu.info.adapter})`;
  $("timing").textContent = `Model ready in ${(loadMs / 1000).toFixed(1)} s on ${backend}.`;

  let current = null;
  let asked = 0;
  async function ask(prompt) {
    const n = ++asked;
    $("send").disabled = true;
    $("stop").disabled = false;
    $("answer").textContent = "";
    document.body.dataset.answering = "yes";
    document.body.dataset.asked = String(n);
    // The stop button aborts: a token being computed is dropped rather than waited for.
    const controller = new AbortController();
    const gen = llm.generate(prompt, { maxTokens: 256, signal: controller.signal });
    current = controller;
    let text = "";
    try {
      for await (const piece of gen) {
        text += piece;
        $("answer").textContent = text;
        $("timing").textContent =
          `${gen.ids.length} tokens on ${backend}: prompt ${gen.prefillTokensPerSecond.toFixed(0)} ` +
          `tokens/s, answer ${gen.decodeTokensPerSecond.toFixed(1)} tokens/s.`;
      }
    } catch (e) {
      if (e?.name !== "AbortError") throw e;
    }
    const ended = {
      stop: "",
      length: " (the token limit was reached)",
      context: " (the context is full)",
      aborted: " (stopped)",
    }[gen.finish];
    $("timing").textContent += ended ?? "";
    current = null;
    $("send").disabled = false;
    $("stop").disabled = true;
    // For the end-to-end test: the answer, its ids and why it ended.
    document.body.dataset.answer = text;
    document.body.dataset.finish = gen.finish;
    document.body.dataset.ids = Array.from(gen.ids).join(",");
    document.body.dataset.answering = "no";
    document.body.dataset.answered = String(n);
  }
  $("ask").addEventListener("submit", (e) => {
    e.preventDefault();
    const prompt = $("prompt").value.trim();
    if (prompt && !current) ask(prompt).catch(fail);
  });
  $("stop").addEventListener("click", () => current?.abort());
  $("prompt").disabled = false;
  $("send").disabled = false;
  $("prompt").focus();
  window.gpukitChat = { llm, loadMs, backend: gpu.info.backend };
  document.body.dataset.status = "done";
} catch (e) {
  fail(e);
}

function fail(e) {
  $("banner").classList.add("error");
  $("banner").textContent = `The chat could not run: ${e.message}`;
  document.body.dataset.status = "error";
  document.body.dataset.answering = "no";
  console.error(e);
}
