// Draw-a-digit: a 64-64-10 MLP trained by examples/train_digits.rs on scikit-learn's
// handwritten digits, run by gpukit: linear + relu, linear, softmax.
import { openGpu, nav } from "./common.js";
import { toDigitInput } from "./digits/app.js";

document.getElementById("nav").innerHTML = nav();
const pad = document.getElementById("pad");
const ctx = pad.getContext("2d");
const clear = () => {
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, pad.width, pad.height);
};
clear();

const gpu = await openGpu();
const model = await (await fetch("digits/model.json")).json();
const [inputs, hidden, classes] = model.layers;
const w1 = gpu.tensor(new Float32Array(model.w1), [hidden, inputs]);
const b1 = gpu.tensor(new Float32Array(model.b1), [hidden]);
const w2 = gpu.tensor(new Float32Array(model.w2), [classes, hidden]);
const b2 = gpu.tensor(new Float32Array(model.b2), [classes]);
document.getElementById("about").textContent =
  `A ${model.layers.join("-")} network trained on ${model.train} real handwritten digits ` +
  `(${model.source}); ${(model.testAccuracy * 100).toFixed(1)}% right on ${model.test} digits it never saw.`;

const bars = document.getElementById("bars");
function show(probs) {
  const best = probs.indexOf(Math.max(...probs));
  document.getElementById("prediction").textContent = String(best);
  bars.innerHTML = Array.from(
    probs,
    (p, i) =>
      `<span>${i}</span><div class="bar${i === best ? " top" : ""}" style="width:${Math.max(1, p * 100)}%"></div><span>${(p * 100).toFixed(1)}%</span>`,
  ).join("");
  document.body.dataset.prediction = String(best);
}

async function classify() {
  const input = toDigitInput(pad);
  const seen = document.getElementById("seen").getContext("2d");
  seen.fillStyle = "#fff";
  seen.fillRect(0, 0, 64, 64);
  if (!input) {
    document.getElementById("prediction").textContent = "–";
    bars.innerHTML = "";
    delete document.body.dataset.prediction;
    return;
  }
  input.forEach((v, i) => {
    const c = Math.round(255 * (1 - v));
    seen.fillStyle = `rgb(${c},${c},${c})`;
    seen.fillRect((i % 8) * 8, Math.floor(i / 8) * 8, 8, 8);
  });
  const t0 = performance.now();
  const x = gpu.tensor(input, [1, inputs]);
  const p = x.linear(w1, b1, "relu").linear(w2, b2).softmax();
  const probs = await p.read();
  x.dispose();
  p.dispose();
  document.getElementById("timing").textContent =
    `${(performance.now() - t0).toFixed(2)} ms on ${gpu.info.backend}`;
  show(Array.from(probs));
  document.body.dataset.classified = String(Number(document.body.dataset.classified || 0) + 1);
}

let drawing = false;
let last = null;
const at = (e) => {
  const r = pad.getBoundingClientRect();
  return [e.clientX - r.left, e.clientY - r.top];
};
pad.addEventListener("pointerdown", (e) => {
  drawing = true;
  last = at(e);
  pad.setPointerCapture(e.pointerId);
});
pad.addEventListener("pointermove", (e) => {
  if (!drawing) return;
  const p = at(e);
  ctx.strokeStyle = "#000";
  ctx.lineWidth = 30;
  ctx.lineCap = "round";
  ctx.beginPath();
  ctx.moveTo(...last);
  ctx.lineTo(...p);
  ctx.stroke();
  last = p;
});
const end = () => {
  if (drawing) {
    drawing = false;
    classify();
  }
};
pad.addEventListener("pointerup", end);
pad.addEventListener("pointercancel", end);
document.getElementById("clear").onclick = () => {
  clear();
  classify();
};
document.body.dataset.status = "done";
