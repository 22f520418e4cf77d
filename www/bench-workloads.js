// The W and D workloads of PERFORMANCE.md for JavaScript on WebGPU: gpukit, raw WebGPU (the
// floor) and tfjs-webgpu, each result checked against a JavaScript reference before its time
// counts. No DOM: the benchmark page (bench.js) and the Dawn harness on a real GPU
// (scripts/dawn/bench.mjs) both run these.
import { random, maxError } from "./common.js";
import { matmulRef, transpose, softmaxRef, sig, convRef, attnRef } from "./bench-refs.js";

/** The sizes: the page's (`quick` for the end-to-end test), and those of a real GPU. */
export function benchSizes(kind) {
  if (kind === "quick")
    return {
      N: 1 << 16,
      MM: 128,
      D1: 1 << 18,
      D2: [128],
      SM: [64, 1024],
      G: 256,
      conv: [2, 16, 24],
      attn: [4, 128, 32],
      runs: 3,
    };
  if (kind === "gpu")
    return {
      N: 1 << 20,
      MM: 1024,
      D1: 1 << 24,
      D2: [1024, 2048, 4096],
      SM: [4096, 4096],
      G: 4096,
      conv: [8, 64, 56],
      attn: [16, 2048, 64],
      runs: 7,
    };
  return {
    N: 1 << 20,
    MM: 1024,
    D1: 1 << 22,
    D2: [512],
    SM: [1024, 4096],
    G: 1024,
    conv: [8, 64, 56],
    attn: [16, 1024, 64],
    runs: 7,
  };
}

const d3ops = (i) => i % 3; // relu, scale(1.01), sigmoid: 100 of them in turn

/** The workloads at `sizes` (from `benchSizes`); an implementation is null where it has no
 *  kernel (raw WebGPU has no softmax, conv2d or attention) or is absent (`raw`, `tf` null). */
export function workloads(gpu, raw, tf, sizes) {
  const { N, MM, D1, D2, SM, G } = sizes;
  const [CB, CC, CS] = sizes.conv;
  const [AH, AS, AD] = sizes.attn;
  const a = random(N, 1),
    b = random(N, 2),
    m1 = random(MM * MM, 3),
    m2 = random(MM * MM, 4);
  const small = random(1024, 5),
    small2 = random(1024, 6),
    d3 = random(4096, 7);
  const dA = random(D1, 8),
    dB = random(D1, 9),
    sm = random(SM[0] * SM[1], 17),
    gx = random(G, 18),
    gw = random(G * G, 19);
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
        const m = a.reduce((p, q) => Math.max(p, q), -Infinity);
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
      gpukit: onGpukit(
        gpu,
        [
          [dA, [D1]],
          [dB, [D1]],
        ],
        (x, y) => x.add(y),
      ),
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
      tfjs: onTfjs(
        tf,
        [
          [dA, [D1]],
          [dB, [D1]],
        ],
        (x, y) => tf.add(x, y),
      ),
    },
    ...D2.map((n) => matmulResident(gpu, raw, tf, n, D2.length > 1 ? `D2-${n}` : "D2")),
    {
      id: "S1",
      name: `softmax of ${SM[0]} rows of ${SM[1]} on the device`,
      bytes: SM[0] * SM[1] * 8,
      resident: true,
      ref: () => softmaxRef(sm, SM[1], 1024),
      gpukit: onGpukit(gpu, [[sm, SM]], (x) => x.softmax()),
      tfjs: onTfjs(tf, [[sm, SM]], (x) => tf.softmax(x)),
    },
    {
      id: "G1",
      name: `one token through a linear layer [${G}, ${G}] on the device`,
      flops: 2 * G * G,
      bytes: G * G * 4,
      resident: true,
      ref: () => Array.from(matmulRef(gx, transpose(gw, G), G, Math.min(G, 1024))),
      gpukit: onGpukit(
        gpu,
        [
          [gx, [1, G]],
          [gw, [G, G]],
        ],
        (x, w) => x.linear(w),
      ),
      tfjs: onTfjs(
        tf,
        [
          [gx, [1, G]],
          [gw, [G, G]],
        ],
        (x, w) => tf.matMul(x, w, false, true),
      ),
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
      ref: () => convRef(cx, cw, sizes.conv, 1024),
      gpukit: onGpukit(
        gpu,
        [
          [cx, [CB, CC, CS, CS]],
          [cw, [CC, CC, 3, 3]],
        ],
        (x, w) => x.conv2d(w, { padding: [1, 1] }),
      ),
    },
    {
      id: "A1",
      name: `causal attention, ${AH} heads x ${AS} x ${AD}, on the device`,
      flops: 2 * AH * AS * AS * AD,
      resident: true,
      ref: () => attnRef(aq, ak, av, sizes.attn, 1024),
      gpukit: onGpukit(
        gpu,
        [aq, ak, av].map((d) => [d, [1, AH, AS, AD]]),
        (q, k, v) => q.attention(k, v, { causal: true }),
      ),
      // tfjs has no attention op: matmul, scale, causal mask, softmax, matmul (the score
      // matrix goes through memory).
      tfjs: onTfjs(
        tf,
        [...[aq, ak, av].map((d) => [d, [AH, AS, AD]]), [causalBias(AS), [AS, AS]]],
        (q, k, v, mask) =>
          tf.tidy(() =>
            tf.matMul(
              tf.softmax(tf.add(tf.mul(tf.matMul(q, k, false, true), 1 / Math.sqrt(AD)), mask)),
              v,
            ),
          ),
      ),
    },
  ];
}

// D2 at one size: an n x n x n matmul of inputs kept on the device.
function matmulResident(gpu, raw, tf, n, id) {
  const q1 = random(n * n, 10),
    q2 = random(n * n, 11);
  return {
    id,
    name: `matmul ${n}x${n}x${n} on the device`,
    flops: 2 * n ** 3,
    resident: true,
    ref: () => Array.from(matmulRef(q1, q2, n, 1024)),
    gpukit: onGpukit(
      gpu,
      [
        [q1, [n, n]],
        [q2, [n, n]],
      ],
      (x, y) => x.matmul(y),
    ),
    raw: resident(() => {
      const x = raw.buffer(q1),
        y = raw.buffer(q2),
        z = raw.buffer(n * n);
      return {
        step: () => {
          const enc = raw.device.createCommandEncoder();
          raw.matmulOp(enc, x, y, z, n, n, n);
          raw.device.queue.submit([enc.finish()]);
          return { raw: z };
        },
        sync: () => raw.device.queue.onSubmittedWorkDone(),
        free: () => [x, y, z].forEach((v) => v.destroy()),
      };
    }),
    tfjs: onTfjs(
      tf,
      [
        [q1, [n, n]],
        [q2, [n, n]],
      ],
      (x, y) => tf.matMul(x, y),
    ),
  };
}

// A device-resident workload: `setup()` makes the inputs once; each step enqueues the work.
function resident(setup) {
  return { resident: true, setup };
}

// A device-resident gpukit workload: `inputs` ([data, shape] pairs) uploaded once, `op` on them
// each step.
function onGpukit(gpu, inputs, op) {
  return resident(() => {
    const ts = inputs.map(([d, shape]) => gpu.tensor(d, shape));
    return {
      step: () => op(...ts),
      sync: () => gpu.synchronize(),
      free: () => ts.forEach((t) => t.dispose()),
    };
  });
}

// The same on tfjs, which has no wait without a read (`sync` null), or null without tfjs.
function onTfjs(tf, inputs, op) {
  return (
    tf &&
    resident(() => {
      const ts = inputs.map(([d, shape]) => tf.tensor(d, shape));
      return { step: () => op(...ts), sync: null, free: () => ts.forEach((t) => t.dispose()) };
    })
  );
}

// Attention's causal mask as an additive bias: 0 on and below the diagonal, -1e30 above.
function causalBias(n) {
  const bias = new Float32Array(n * n);
  for (let i = 0; i < n; i++) bias.fill(-1e30, i * n + i + 1, (i + 1) * n);
  return bias;
}

// The first 1024 outputs of a resident step's result (gpukit tensor, tfjs tensor or raw buffer).
async function readResident(out, raw) {
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

// Waits until `out`, the last step enqueued, is done (tfjs has no wait without a read, so it
// reads one element), then frees it.
async function finish(s, out, tf) {
  if (s.sync) await s.sync();
  else {
    const one = tf.tidy(() => tf.slice(tf.reshape(out, [-1]), [0], [1]));
    await one.data();
    one.dispose();
  }
  if (out.dispose) out.dispose();
}

// A resident workload's time a step: `reps` steps enqueued back to back, one wait, so the wait's
// own latency (a round trip) is shared by enough steps to fill about 20 ms.
async function timeResident(impl, raw, tf, runs) {
  const s = impl.setup();
  const check = await readResident(s.step(), raw);
  let t0 = performance.now();
  await finish(s, s.step(), tf);
  const once = performance.now() - t0;
  const reps = Math.max(1, Math.min(200, Math.ceil(20 / Math.max(once, 0.01))));
  const times = [];
  for (let i = 0; i < runs; i++) {
    t0 = performance.now();
    let out;
    for (let r = 0; r < reps; r++) {
      if (out?.dispose) out.dispose();
      out = s.step();
    }
    await finish(s, out, tf);
    times.push((performance.now() - t0) / reps);
  }
  s.free();
  return { ms: median(times), check, reps };
}

/** Times one implementation of workload `w`: the median of `runs` timed runs after a warm-up
 *  whose result is returned as `check`. */
export async function time(impl, raw, tf, runs) {
  if (impl.resident) return timeResident(impl, raw, tf, runs);
  const times = [];
  const check = await impl(); // warm-up, and the result checked
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await impl();
    times.push(performance.now() - t0);
  }
  return { ms: median(times), check, reps: 1 };
}

export const median = (v) => v.slice().sort((x, y) => x - y)[Math.floor(v.length / 2)];

/** The three implementations' names, in table order. */
export const IMPLS = ["gpukit", "raw", "tfjs"];

/** Runs every workload at `sizes` on each implementation present, checks each result, and
 *  calls `onRow(row)` as each finishes (`only`: a list of ids to run instead, in its order; `residentFirst`: see below): `{ id, name, flops?, bytes?, gpukit: { ms, ok, err } |
 *  { ok: false, error }, raw, tfjs }`. Returns the rows. */
export async function runWorkloads(
  gpu,
  raw,
  tf,
  sizes,
  { onStart, onRow, only, residentFirst } = {},
) {
  const results = [];
  let all = workloads(gpu, raw, tf, sizes);
  // `residentFirst`: the device-resident workloads before the round trips, whose uploads and
  // reads leave a GPU idle long enough to drop its clocks (on an H100 through Dawn, matmul
  // 1024 ran five times slower for gpukit, raw WebGPU and tfjs alike right after W4).
  if (residentFirst)
    all = [...all.filter((w) => w.gpukit?.resident), ...all.filter((w) => !w.gpukit?.resident)];
  // `only`: ids to run, in that order (an id may repeat).
  const chosen = only ? only.map((id) => all.find((w) => w.id === id)).filter(Boolean) : all;
  for (const w of chosen) {
    onStart?.(w);
    const want = w.ref();
    const row = { id: w.id, name: w.name, flops: w.flops, bytes: w.bytes };
    for (const n of IMPLS) {
      if (!w[n] || (n === "raw" && !raw)) continue;
      try {
        const { ms, check, reps } = await time(w[n], raw, tf, sizes.runs);
        const err = maxError(Array.from(check).slice(0, want.length), want.slice(0, check.length));
        const tol = w.flops ? 1e-3 : 1e-4;
        row[n] = { ms, ok: err <= tol, err, reps };
      } catch (e) {
        row[n] = { ok: false, error: e.message };
      }
    }
    results.push(row);
    onRow?.(row);
  }
  return results;
}
