// The W and D workloads in the browser: gpukit, raw WebGPU (the floor) and tfjs-webgpu.
import { openGpu, random, maxError, nav } from "./common.js";
import { RawWebGpu } from "./raw-webgpu.js";

document.getElementById("nav").innerHTML = nav();
const quick = new URLSearchParams(location.search).has("quick");
const N = quick ? 1 << 16 : 1 << 20;
const MM = quick ? 128 : 1024;
const D1 = quick ? 1 << 18 : 1 << 22;
const D2 = quick ? 128 : 512;
const RUNS = quick ? 3 : 7;
// C1: conv2d 3x3, padding 1, [batch, channels, side, side] -> channels; A1: causal attention.
const [CB, CC, CS] = quick ? [2, 16, 24] : [8, 64, 56];
const [AH, AS, AD] = quick ? [4, 128, 32] : [16, 1024, 64];

const matmulRef = (a, b, n) => {
  const o = new Float64Array(n * n);
  for (let i = 0; i < n; i++)
    for (let p = 0; p < n; p++) {
      const v = a[i * n + p];
      for (let j = 0; j < n; j++) o[i * n + j] += v * b[p * n + j];
    }
  return o;
};
const sig = (v) => 1 / (1 + Math.exp(-v));
// The first `count` outputs of conv2d (3x3, padding 1, stride 1) and of causal attention.
const convRef = (x, w, count) =>
  Array.from({ length: count }, (_, i) => {
    const [o, y, xx] = [Math.floor(i / (CS * CS)) % CC, Math.floor(i / CS) % CS, i % CS],
      n = Math.floor(i / (CC * CS * CS));
    let acc = 0;
    for (let c = 0; c < CC; c++)
      for (let ky = 0; ky < 3; ky++)
        for (let kx = 0; kx < 3; kx++) {
          const [iy, ix] = [y + ky - 1, xx + kx - 1];
          if (iy >= 0 && iy < CS && ix >= 0 && ix < CS)
            acc += x[((n * CC + c) * CS + iy) * CS + ix] * w[((o * CC + c) * 3 + ky) * 3 + kx];
        }
    return acc;
  });
const attnRef = (q, k, v, count) =>
  Array.from({ length: count }, (_, i) => {
    const [row, d] = [Math.floor(i / AD), i % AD],
      h = Math.floor(row / AS),
      qi = row % AS,
      base = h * AS * AD;
    const s = Array.from({ length: qi + 1 }, (_, j) => {
      let dot = 0;
      for (let e = 0; e < AD; e++) dot += q[base + qi * AD + e] * k[base + j * AD + e];
      return dot / Math.sqrt(AD);
    });
    const m = Math.max(...s),
      p = s.map((x) => Math.exp(x - m)),
      sum = p.reduce((x, y) => x + y, 0);
    return p.reduce((acc, pj, j) => acc + pj * v[base + j * AD + d], 0) / sum;
  });
const d3ops = (i) => i % 3; // relu, scale(1.01), sigmoid: 100 of them in turn

function workloads(gpu, raw, tf) {
  const a = random(N, 1),
    b = random(N, 2),
    m1 = random(MM * MM, 3),
    m2 = random(MM * MM, 4);
  const small = random(1024, 5),
    small2 = random(1024, 6),
    d3 = random(4096, 7);
  const dA = random(D1, 8),
    dB = random(D1, 9),
    q1 = random(D2 * D2, 10),
    q2 = random(D2 * D2, 11);
  const cx = random(CB * CC * CS * CS, 12),
    cw = random(CC * CC * 9, 13);
  const [aq, ak, av] = [14, 15, 16].map((seed) => random(AH * AS * AD, seed));
  const gk = (f) => async () => {
    const t = f();
    const r = await t.read();
    t.dispose();
    return r;
  };
  const rawRun = (make) => async () => {
    const enc = raw.device.createCommandEncoder();
    const [out, n, bufs] = make(enc);
    const r = await raw.finishAndRead(enc, out, n);
    bufs.forEach((x) => x.destroy());
    return r;
  };
  const tfRun = (f) =>
    tf &&
    (async () => {
      const r = tf.tidy(f);
      const d = await r.data();
      r.dispose();
      return d;
    });
  const rawD3 = (enc) => {
    const x = raw.buffer(d3),
      y = raw.buffer(4096);
    let [s, t] = [x, y];
    for (let i = 0; i < 100; i++) {
      raw.unaryOp(enc, s, t, 4096, [0, 1, 3][d3ops(i)], 1.01);
      [s, t] = [t, s];
    }
    return [s, 4096, [x, y]];
  };
  const d3ref = () => {
    let v = Array.from(d3);
    for (let i = 0; i < 100; i++) v = v.map((x) => [Math.max(x, 0), x * 1.01, sig(x)][d3ops(i)]);
    return v;
  };
  return [
    {
      id: "W1",
      name: `add ${N} + ${N}, round trip`,
      bytes: N * 12,
      ref: () => Array.from(a, (v, i) => v + b[i]),
      gpukit: gk(() => gpu.tensor(a, [N]).add(gpu.tensor(b, [N]))),
      raw: rawRun((enc) => {
        const x = raw.buffer(a),
          y = raw.buffer(b),
          z = raw.buffer(N);
        raw.addOp(enc, x, y, z, N);
        return [z, N, [x, y, z]];
      }),
      tfjs: tfRun(() => tf.add(tf.tensor1d(a), tf.tensor1d(b))),
    },
    {
      id: "W2",
      name: `relu of ${N}, round trip`,
      bytes: N * 8,
      ref: () => Array.from(a, (v) => Math.max(v, 0)),
      gpukit: gk(() => gpu.tensor(a, [N]).relu()),
      raw: rawRun((enc) => {
        const x = raw.buffer(a),
          z = raw.buffer(N);
        raw.unaryOp(enc, x, z, N, 0);
        return [z, N, [x, z]];
      }),
      tfjs: tfRun(() => tf.relu(tf.tensor1d(a))),
    },
    {
      id: "W3",
      name: `softmax of one ${N} row, round trip`,
      bytes: N * 8,
      ref: () => {
        const m = Math.max(...a);
        const e = Array.from(a, (v) => Math.exp(v - m));
        const s = e.reduce((p, q) => p + q, 0);
        return e.map((v) => v / s);
      },
      gpukit: gk(() => gpu.tensor(a, [1, N]).softmax()),
      raw: null,
      tfjs: tfRun(() => tf.softmax(tf.tensor2d(a, [1, N]))),
    },
    {
      id: "W4",
      name: `matmul ${MM}x${MM}x${MM}, round trip`,
      flops: 2 * MM ** 3,
      ref: () => matmulRef(m1, m2, MM),
      gpukit: gk(() => gpu.tensor(m1, [MM, MM]).matmul(gpu.tensor(m2, [MM, MM]))),
      raw: rawRun((enc) => {
        const x = raw.buffer(m1),
          y = raw.buffer(m2),
          z = raw.buffer(MM * MM);
        raw.matmulOp(enc, x, y, z, MM, MM, MM);
        return [z, MM * MM, [x, y, z]];
      }),
      tfjs: tfRun(() => tf.matMul(tf.tensor2d(m1, [MM, MM]), tf.tensor2d(m2, [MM, MM]))),
    },
    {
      id: "W5",
      name: `sigmoid(2·relu(x) + 2·relu(x)) of ${N}, round trip`,
      bytes: N * 8,
      ref: () => Array.from(a, (v) => sig(4 * Math.max(v, 0))),
      gpukit: async () => {
        const bt = gpu.batch();
        const x = bt.upload(a, [N]);
        const s = bt.scale(bt.relu(x), 2);
        const y = bt.sigmoid(bt.add(s, s));
        bt.output(y);
        return (await bt.run()).get(y);
      },
      raw: rawRun((enc) => {
        const x = raw.buffer(a),
          y = raw.buffer(N);
        raw.unaryOp(enc, x, y, N, 0);
        raw.unaryOp(enc, y, x, N, 1, 2);
        raw.unaryOp(enc, x, y, N, 2);
        raw.unaryOp(enc, y, x, N, 3);
        return [x, N, [x, y]];
      }),
      tfjs: tfRun(() => {
        const s = tf.mul(tf.relu(tf.tensor1d(a)), 2);
        return tf.sigmoid(tf.add(s, s));
      }),
    },
    {
      id: "W6",
      name: "add 1024 + 1024, round trip (latency)",
      bytes: 1024 * 12,
      ref: () => Array.from(small, (v, i) => v + small2[i]),
      gpukit: gk(() => gpu.tensor(small, [1024]).add(gpu.tensor(small2, [1024]))),
      raw: rawRun((enc) => {
        const x = raw.buffer(small),
          y = raw.buffer(small2),
          z = raw.buffer(1024);
        raw.addOp(enc, x, y, z, 1024);
        return [z, 1024, [x, y, z]];
      }),
      tfjs: tfRun(() => tf.add(tf.tensor1d(small), tf.tensor1d(small2))),
    },
    {
      id: "D1",
      name: `add ${D1} + ${D1} on the device`,
      bytes: D1 * 12,
      resident: true,
      ref: () => Array.from(dA.subarray(0, 1024), (v, i) => v + dB[i]),
      gpukit: resident(() => {
        const x = gpu.tensor(dA, [D1]),
          y = gpu.tensor(dB, [D1]);
        return {
          step: () => x.add(y),
          sync: () => gpu.synchronize(),
          free: () => {
            x.dispose();
            y.dispose();
          },
        };
      }),
      raw: resident(() => {
        const x = raw.buffer(dA),
          y = raw.buffer(dB),
          z = raw.buffer(D1);
        return {
          step: () => {
            const enc = raw.device.createCommandEncoder();
            raw.addOp(enc, x, y, z, D1);
            raw.device.queue.submit([enc.finish()]);
            return { raw: z };
          },
          sync: () => raw.device.queue.onSubmittedWorkDone(),
          free: () => [x, y, z].forEach((v) => v.destroy()),
        };
      }),
      tfjs:
        tf &&
        resident(() => {
          const x = tf.tensor1d(dA),
            y = tf.tensor1d(dB);
          return {
            step: () => tf.add(x, y),
            sync: null,
            free: () => {
              x.dispose();
              y.dispose();
            },
          };
        }),
    },
    {
      id: "D2",
      name: `matmul ${D2}x${D2}x${D2} on the device`,
      flops: 2 * D2 ** 3,
      resident: true,
      ref: () => Array.from(matmulRef(q1, q2, D2).subarray(0, 1024)),
      gpukit: resident(() => {
        const x = gpu.tensor(q1, [D2, D2]),
          y = gpu.tensor(q2, [D2, D2]);
        return {
          step: () => x.matmul(y),
          sync: () => gpu.synchronize(),
          free: () => {
            x.dispose();
            y.dispose();
          },
        };
      }),
      raw: resident(() => {
        const x = raw.buffer(q1),
          y = raw.buffer(q2),
          z = raw.buffer(D2 * D2);
        return {
          step: () => {
            const enc = raw.device.createCommandEncoder();
            raw.matmulOp(enc, x, y, z, D2, D2, D2);
            raw.device.queue.submit([enc.finish()]);
            return { raw: z };
          },
          sync: () => raw.device.queue.onSubmittedWorkDone(),
          free: () => [x, y, z].forEach((v) => v.destroy()),
        };
      }),
      tfjs:
        tf &&
        resident(() => {
          const x = tf.tensor2d(q1, [D2, D2]),
            y = tf.tensor2d(q2, [D2, D2]);
          return {
            step: () => tf.matMul(x, y),
            sync: null,
            free: () => {
              x.dispose();
              y.dispose();
            },
          };
        }),
    },
    {
      id: "D3",
      name: "100 chained ops on 4096, one read",
      bytes: 4096 * 8 * 100,
      ref: d3ref,
      gpukit: async () => {
        let t = gpu.tensor(d3, [4096]);
        const first = t;
        for (let i = 0; i < 100; i++) {
          const n = [() => t.relu(), () => t.scale(1.01), () => t.sigmoid()][d3ops(i)]();
          if (t !== first) t.dispose();
          t = n;
        }
        const r = await t.read();
        t.dispose();
        first.dispose();
        return r;
      },
      raw: rawRun(rawD3),
      tfjs: tfRun(() => {
        let t = tf.tensor1d(d3);
        for (let i = 0; i < 100; i++)
          t = [() => tf.relu(t), () => tf.mul(t, 1.01), () => tf.sigmoid(t)][d3ops(i)]();
        return t;
      }),
    },
    {
      id: "C1",
      name: `conv2d 3x3, [${CB}, ${CC}, ${CS}, ${CS}] -> ${CC} channels, on the device`,
      flops: 2 * CB * CC * CS * CS * CC * 9,
      resident: true,
      ref: () => convRef(cx, cw, 1024),
      gpukit: resident(() => {
        const x = gpu.tensor(cx, [CB, CC, CS, CS]),
          w = gpu.tensor(cw, [CC, CC, 3, 3]);
        return {
          step: () => x.conv2d(w, { padding: [1, 1] }),
          sync: () => gpu.synchronize(),
          free: () => {
            x.dispose();
            w.dispose();
          },
        };
      }),
    },
    {
      id: "A1",
      name: `causal attention, ${AH} heads x ${AS} x ${AD}, on the device`,
      flops: 2 * AH * AS * AS * AD,
      resident: true,
      ref: () => attnRef(aq, ak, av, 1024),
      gpukit: resident(() => {
        const [q, k, v] = [aq, ak, av].map((d) => gpu.tensor(d, [1, AH, AS, AD]));
        return {
          step: () => q.attention(k, v, { causal: true }),
          sync: () => gpu.synchronize(),
          free: () => [q, k, v].forEach((t) => t.dispose()),
        };
      }),
    },
  ];
}

// A device-resident workload: `setup()` makes the inputs once; each timed run enqueues one
// step and waits for it (tfjs has no wait without a read, so it reads one element).
function resident(setup) {
  return { resident: true, setup };
}

async function readResident(impl, out, raw) {
  if (out.raw) {
    const enc = raw.device.createCommandEncoder();
    return raw.finishAndRead(enc, out.raw, 1024);
  }
  if (out.read) {
    const r = (await out.read()).subarray(0, 1024);
    out.dispose();
    return r;
  }
  const r = (await out.data()).subarray(0, 1024);
  out.dispose();
  return r;
}

async function time(impl, w, raw) {
  const times = [];
  let check;
  if (impl.resident) {
    const s = impl.setup();
    const first = s.step();
    check = await readResident(impl, first, raw);
    for (let i = 0; i < RUNS; i++) {
      const t0 = performance.now();
      const out = s.step();
      if (s.sync) await s.sync();
      else {
        const one = tf.tidy(() => tf.slice(tf.reshape(out, [-1]), [0], [1]));
        await one.data();
        one.dispose();
      }
      times.push(performance.now() - t0);
      if (out.dispose) out.dispose();
    }
    s.free();
    return { ms: median(times), check };
  }
  check = await impl(); // warm-up, and the result checked
  for (let i = 0; i < RUNS; i++) {
    const t0 = performance.now();
    await impl();
    times.push(performance.now() - t0);
  }
  return { ms: median(times), check };
}

const median = (v) => v.slice().sort((x, y) => x - y)[Math.floor(v.length / 2)];

function chart(results) {
  const names = ["gpukit", "raw", "tfjs"];
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
  const results = [];
  for (const w of workloads(gpu, raw, tf)) {
    document.getElementById("progress").textContent = `running ${w.id}…`;
    const want = w.ref();
    const row = { id: w.id, name: w.name };
    for (const n of ["gpukit", "raw", "tfjs"]) {
      if (!w[n] || (n === "raw" && !raw)) continue;
      try {
        const { ms, check } = await time(w[n], w, raw);
        const err = maxError(Array.from(check).slice(0, want.length), want.slice(0, check.length));
        const tol = w.flops ? 1e-3 : 1e-4;
        row[n] = { ms, ok: err <= tol, err };
      } catch (e) {
        row[n] = { ok: false, error: e.message };
      }
    }
    results.push(row);
    const cell = (r) =>
      !r ? "–" : r.ok ? r.ms.toFixed(2) : `<span class="bad">${r.error ? "error" : "wrong"}</span>`;
    const ratio =
      row.gpukit?.ok && row.raw?.ok ? (row.gpukit.ms / row.raw.ms).toFixed(2) + "×" : "–";
    const checks = ["gpukit", "raw", "tfjs"]
      .filter((n) => row[n])
      .map((n) => `${n} ${row[n].ok ? "✓" : "✗ " + (row[n].error || row[n].err)}`)
      .join(", ");
    const tr = document.createElement("tr");
    tr.innerHTML = `<td>${w.id}</td><td>${w.name}</td><td class="num">${cell(row.gpukit)}</td><td class="num">${cell(row.raw)}</td><td class="num">${cell(row.tfjs)}</td><td class="num">${ratio}</td><td>${checks}</td>`;
    body.appendChild(tr);
    chart(results);
  }
  document.getElementById("progress").textContent =
    `done (${quick ? "quick sizes" : "full sizes"}, median of ${RUNS} runs)`;
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
