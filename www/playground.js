// Every op of the JS API on random data against a JavaScript f64 reference.
import { openGpu, random, maxError, nav } from "./common.js";

document.getElementById("nav").innerHTML = nav();

const erf = (x) => {
  // Abramowitz-Stegun 7.1.26, |error| < 1.5e-7
  const t = 1 / (1 + 0.3275911 * Math.abs(x));
  const y =
    1 -
    t *
      (0.254829592 +
        t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) *
      Math.exp(-x * x);
  return x < 0 ? -y : y;
};
const map = (a, f) => Array.from(a, (v) => (Number.isNaN(v) ? NaN : f(v)));
const rows = (a, cols, f) => {
  const out = [];
  for (let r = 0; r < a.length / cols; r++)
    out.push(...f(Array.from(a.slice(r * cols, (r + 1) * cols))));
  return out;
};
const softmaxRow = (v) => {
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((p, q) => p + q, 0);
  return e.map((x) => x / s);
};
const matmul = (a, b, m, k, n) => {
  const o = new Float64Array(m * n);
  for (let i = 0; i < m; i++)
    for (let p = 0; p < k; p++) {
      const av = a[i * k + p];
      for (let j = 0; j < n; j++) o[i * n + j] += av * b[p * n + j];
    }
  return o;
};
const withEdges = (a) => {
  a[0] = NaN;
  a[1] = Infinity;
  a[2] = -Infinity;
  return a;
};

function cases(gpu) {
  const n = 65537;
  const x = withEdges(random(n, 1)),
    y = random(n, 2);
  const [M, K, N] = [65, 257, 33];
  const A = random(M * K, 3),
    B = random(K * N, 4),
    bias = random(N, 5);
  const S = random(37 * 129, 6);
  const q = random(1 * 2 * 9 * 16, 7),
    k = random(1 * 2 * 9 * 16, 8),
    v = random(1 * 2 * 9 * 16, 9);
  return [
    {
      op: "add",
      shape: [n],
      tol: 1e-6,
      run: () => gpu.tensor(x, [n]).add(gpu.tensor(y, [n])),
      ref: () => Array.from(x, (a, i) => a + y[i]),
    },
    {
      op: "mul",
      shape: [n],
      tol: 1e-6,
      run: () => gpu.tensor(x, [n]).mul(gpu.tensor(y, [n])),
      ref: () => Array.from(x, (a, i) => a * y[i]),
    },
    {
      op: "relu",
      shape: [n],
      tol: 0,
      run: () => gpu.tensor(x, [n]).relu(),
      ref: () => map(x, (a) => Math.max(a, 0)),
    },
    {
      op: "sigmoid",
      shape: [n],
      tol: 1e-5,
      run: () => gpu.tensor(x, [n]).sigmoid(),
      ref: () => map(x, (a) => 1 / (1 + Math.exp(-a))),
    },
    {
      op: "tanh",
      shape: [n],
      tol: 1e-5,
      run: () => gpu.tensor(x, [n]).tanh(),
      ref: () => map(x, Math.tanh),
    },
    {
      op: "gelu",
      shape: [n],
      tol: 1e-5,
      run: () => gpu.tensor(y, [n]).gelu(),
      ref: () => map(y, (a) => 0.5 * a * (1 + erf(a / Math.SQRT2))),
    },
    {
      op: "exp",
      shape: [n],
      tol: 1e-5,
      run: () => gpu.tensor(y, [n]).exp(),
      ref: () => map(y, Math.exp),
    },
    {
      op: "sum",
      shape: [n],
      tol: 1e-5,
      run: () => gpu.tensor(y, [n]).sum(),
      ref: () => [y.reduce((s, a) => s + a, 0)],
    },
    {
      op: "softmax",
      shape: [37, 129],
      tol: 1e-5,
      run: () => gpu.tensor(S, [37, 129]).softmax(),
      ref: () => rows(S, 129, softmaxRow),
    },
    {
      op: "layerNorm",
      shape: [37, 129],
      tol: 1e-4,
      run: () => gpu.tensor(S, [37, 129]).layerNorm(),
      ref: () =>
        rows(S, 129, (r) => {
          const m = r.reduce((s, a) => s + a, 0) / r.length;
          const va = r.reduce((s, a) => s + (a - m) ** 2, 0) / r.length;
          return r.map((a) => (a - m) / Math.sqrt(va + 1e-5));
        }),
    },
    {
      op: "matmul",
      shape: [M, K, N],
      tol: 1e-4,
      run: () => gpu.tensor(A, [M, K]).matmul(gpu.tensor(B, [K, N])),
      ref: () => matmul(A, B, M, K, N),
    },
    {
      op: "linear+gelu",
      shape: [M, K, N],
      tol: 1e-4,
      run: () =>
        gpu
          .tensor(A, [M, K])
          .matmul(gpu.tensor(B, [K, N]), { bias: gpu.tensor(bias, [N]), activation: "gelu" }),
      ref: () =>
        Array.from(matmul(A, B, M, K, N), (a, i) => {
          const z = a + bias[i % N];
          return 0.5 * z * (1 + erf(z / Math.SQRT2));
        }),
    },
    {
      op: "transpose",
      shape: [37, 129],
      tol: 0,
      run: () => gpu.tensor(S, [37, 129]).transpose(0, 1),
      ref: () => Array.from({ length: S.length }, (_, i) => S[(i % 37) * 129 + Math.floor(i / 37)]),
    },
    {
      op: "argmax",
      shape: [37, 129],
      tol: 0,
      run: () => gpu.tensor(S, [37, 129]).argmax(),
      ref: () => rows(S, 129, (r) => [r.indexOf(Math.max(...r))]),
    },
    {
      op: "attention (causal)",
      shape: [1, 2, 9, 16],
      tol: 1e-4,
      run: () =>
        gpu
          .tensor(q, [1, 2, 9, 16])
          .attention(gpu.tensor(k, [1, 2, 9, 16]), gpu.tensor(v, [1, 2, 9, 16]), { causal: true }),
      ref: () => {
        const out = [];
        for (let h = 0; h < 2; h++)
          for (let i = 0; i < 9; i++) {
            const s = [];
            for (let j = 0; j <= i; j++) {
              let d = 0;
              for (let c = 0; c < 16; c++) d += q[(h * 9 + i) * 16 + c] * k[(h * 9 + j) * 16 + c];
              s.push(d / 4);
            }
            const p = softmaxRow(s);
            for (let c = 0; c < 16; c++)
              out.push(p.reduce((acc, pj, j) => acc + pj * v[(h * 9 + j) * 16 + c], 0));
          }
        return out;
      },
    },
    {
      op: "batch: sigmoid(2·relu(x) + relu(x))",
      shape: [n],
      tol: 1e-5,
      batch: true,
      run: async () => {
        const b = gpu.batch();
        const bx = b.upload(y, [n]);
        const out = b.sigmoid(b.add(b.scale(b.relu(bx), 2), b.relu(bx)));
        b.output(out);
        return (await b.run()).get(out);
      },
      ref: () => map(y, (a) => 1 / (1 + Math.exp(-3 * Math.max(a, 0)))),
    },
  ];
}

async function runAll(gpu) {
  document.body.dataset.status = "running";
  const body = document.getElementById("rows");
  body.innerHTML = "";
  const results = [];
  for (const c of cases(gpu)) {
    const t0 = performance.now();
    let got, error;
    try {
      if (c.batch) {
        got = await c.run();
      } else {
        const t = c.run();
        got = await t.read();
        t.dispose();
      }
    } catch (e) {
      error = e.message;
    }
    const ms = performance.now() - t0;
    const err = got ? maxError(got, c.ref()) : Infinity;
    const verified = !error && err <= c.tol;
    results.push({ op: c.op, ms, err, verified, error });
    const tr = document.createElement("tr");
    tr.innerHTML =
      `<td>${c.op}</td><td>[${c.shape.join(", ")}]</td><td class="num">${ms.toFixed(2)}</td>` +
      `<td class="num">${error ? "-" : err.toExponential(2)}</td><td class="num">${c.tol.toExponential(0)}</td>` +
      `<td class="${verified ? "ok" : "bad"}">${verified ? "✓ verified" : "✗ " + (error || "mismatch")}</td>`;
    body.appendChild(tr);
  }
  const good = results.filter((r) => r.verified).length;
  document.getElementById("summary").textContent = `${good} of ${results.length} ops verified.`;
  window.gpukitResults = results;
  document.body.dataset.status = "done";
}

const gpu = await openGpu();
document.getElementById("rerun").onclick = () => runAll(gpu);
await runAll(gpu);
