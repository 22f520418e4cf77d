// The JS API against plain-JS references, in Node, from the installed npm tarball
// (scripts/test-npm.sh). Every Tensor method and option parser is called at least once; the
// op suite itself (every op at every edge) runs through wasm-bindgen-test in Node and Chromium.
// Exits non-zero on the first failure.
import assert from "node:assert/strict";
import { hostile } from "./hostile.mjs";

export async function run(gpukit, label) {
  const { Gpu } = gpukit;
  let seed = 12345;
  const rand = (n) =>
    Float32Array.from({ length: n }, () => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return (seed / 2147483648) * 4 - 2; // never all zeros
    });
  const close = (got, want, tol, what) => {
    assert.equal(got.length, want.length, `${what}: length`);
    for (let i = 0; i < want.length; i++) {
      const ok =
        got[i] === want[i] || Number.isNaN(want[i])
          ? Number.isNaN(got[i]) || got[i] === want[i]
          : Math.abs(got[i] - want[i]) <= tol * (1 + Math.abs(want[i]));
      assert.ok(ok, `${what}[${i}]: got ${got[i]}, want ${want[i]}`);
    }
  };
  const matmulRef = (a, b, m, k, n) => {
    const out = new Float64Array(m * n);
    for (let i = 0; i < m; i++)
      for (let j = 0; j < n; j++) {
        let s = 0;
        for (let p = 0; p < k; p++) s += a[i * k + p] * b[p * n + j];
        out[i * n + j] = s;
      }
    return out;
  };

  const warnings = [];
  const warn = console.warn;
  console.warn = (...args) => warnings.push(args.join(" "));
  const gpu = await Gpu.create();
  const again = await Gpu.create({ backend: "auto" });
  console.warn = warn;
  const info = gpu.info;
  assert.equal(info.backend, "cpu", "Node has no WebGPU: the CPU backend");
  assert.equal(info.software, true);
  assert.equal(info.isFallbackAdapter, true);
  assert.equal(info.simd128, true, "the package is the SIMD128 build");
  assert.match(info.selection, /WebGPU is not available/);
  assert.equal(warnings.length, 1, `one console warning, got ${JSON.stringify(warnings)}`);
  assert.equal(again.info.backend, "cpu");
  assert.equal((await Gpu.create({ backend: "cpu" })).info.backend, "cpu");
  await assert.rejects(
    Gpu.create({ backend: "webgpu" }),
    (e) => e instanceof Error && /WebGPU is not available/.test(e.message),
  );
  await assert.rejects(Gpu.create({ backend: "cuda" }), /unknown backend/);
  await assert.rejects(Gpu.create({ backnd: "cpu" }), /unknown field `backnd`/);

  // Elementwise, odd size, NaN and Inf at the ends.
  const n = 1001;
  const xs = rand(n);
  xs[0] = NaN;
  xs[1] = Infinity;
  xs[2] = -Infinity;
  const ys = rand(n);
  const x = gpu.tensor(xs, [n]);
  const y = gpu.tensor(ys, [n]);
  assert.deepEqual(x.shape, [n]);
  assert.equal(x.length, n);
  const un = {
    relu: (v) => Math.max(v, 0),
    sigmoid: (v) => 1 / (1 + Math.exp(-v)),
    tanh: Math.tanh,
    silu: (v) => v / (1 + Math.exp(-v)),
    exp: Math.exp,
    neg: (v) => -v,
    abs: Math.abs,
  };
  for (const [name, f] of Object.entries(un)) {
    close(
      await x[name]().read(),
      Array.from(xs, (v) => (Number.isNaN(v) ? NaN : f(v))),
      1e-5,
      name,
    );
  }
  close(
    await x.scale(3).read(),
    Array.from(xs, (v) => v * 3),
    1e-6,
    "scale",
  );
  close(
    await x.clip(-1, 1).read(),
    Array.from(xs, (v) => (Number.isNaN(v) ? NaN : Math.min(Math.max(v, -1), 1))),
    0,
    "clip",
  );
  close(
    await x.leakyRelu(0.1).read(),
    Array.from(xs, (v) => (v < 0 ? 0.1 * v : v)),
    1e-6,
    "leakyRelu",
  );
  for (const [name, f] of Object.entries({
    add: (a, b) => a + b,
    sub: (a, b) => a - b,
    mul: (a, b) => a * b,
    div: (a, b) => a / b,
  })) {
    close(
      await x[name](y).read(),
      Array.from(xs, (v, i) => f(v, ys[i])),
      1e-5,
      name,
    );
  }
  // Broadcasting a row over a matrix.
  const m = gpu.tensor(rand(6), [2, 3]);
  const row = gpu.tensor(new Float32Array([1, 2, 3]), [3]);
  const md = await m.read();
  close(
    await m.add(row).read(),
    Array.from(md, (v, i) => v + [1, 2, 3][i % 3]),
    1e-6,
    "broadcast add",
  );

  // NumPy broadcasting: a column against a matrix, and broadcastTo.
  const col = gpu.tensor(new Float32Array([10, 20]), [2, 1]);
  close(
    await m.div(col).read(),
    Array.from(md, (v, i) => v / [10, 20][Math.floor(i / 3)]),
    1e-6,
    "broadcast div by a column",
  );
  close(await col.broadcastTo([2, 3]).read(), [10, 10, 10, 20, 20, 20], 0, "broadcastTo");
  assert.throws(() => m.add(gpu.tensor(new Float32Array([1, 2]), [2])), /broadcast/);
  // Reductions over one axis, argmax over one axis, mean pooling with lengths.
  close(
    await m.reduceAxis("sum", 0).read(),
    [0, 1, 2].map((c) => md[c] + md[3 + c]),
    1e-6,
    "reduceAxis sum 0",
  );
  const keptMax = m.reduceAxis("max", 1, true);
  assert.deepEqual(keptMax.shape, [2, 1]);
  close(
    await keptMax.read(),
    [0, 1].map((r) => Math.max(...md.slice(r * 3, r * 3 + 3))),
    0,
    "reduceAxis max 1 keepdim",
  );
  close(
    await m.argmaxAxis(0).read(),
    [0, 1, 2].map((c) => (md[3 + c] > md[c] ? 1 : 0)),
    0,
    "argmaxAxis 0",
  );
  assert.throws(() => m.reduceAxis("median", 0), /reduceAxis: op/);
  assert.throws(() => m.reduceAxis("sum", 0, "yes"), /keepdim must be a boolean/);
  const seq = gpu.tensor(new Float32Array([1, 2, 3, 4, 5, 6, NaN, NaN]), [2, 2, 2]);
  close(await seq.maskedMean([2, 1]).read(), [2, 3, 5, 6], 1e-6, "maskedMean");
  const deviceLengths = gpu.tensorFromBytes(
    new Uint8Array(new Uint32Array([2, 1]).buffer),
    "u32",
    [2],
  );
  close(await seq.maskedMean(deviceLengths).read(), [2, 3, 5, 6], 1e-6, "maskedMean on device");
  assert.throws(() => seq.maskedMean(seq), /u32/);
  assert.throws(() => seq.maskedMean(null), /maskedMean/);

  // where: a column condition over m ([2, 3]), NaN counting as true.
  const cond = gpu.tensor(new Float32Array([0, NaN]), [2, 1]);
  close(await cond.where(m, gpu.scalar(-1)).read(), [-1, -1, -1, md[3], md[4], md[5]], 0, "where");

  // split and chunk along the columns of m ([2, 3]).
  const [left, right] = m.split(1, [1, 2]);
  close(await left.read(), [md[0], md[3]], 0, "split left");
  close(await right.read(), [md[1], md[2], md[4], md[5]], 0, "split right");
  assert.equal(m.chunk(2, 1).length, 2);
  assert.throws(() => m.split(1, [1, 1]), /add up to/);

  // Loading from bytes: f16 bits and i32 values, from an unaligned view.
  const raw = new Uint8Array(1 + 8);
  new DataView(raw.buffer).setUint16(1, 0x3c00, true); // 1.0
  new DataView(raw.buffer).setUint16(3, 0xc000, true); // -2.0
  new DataView(raw.buffer).setUint16(5, 0x7c00, true); // inf
  new DataView(raw.buffer).setUint16(7, 0x0001, true); // the smallest subnormal
  close(
    await gpu.tensorFromBytes(raw.subarray(1), "f16", [4]).read(),
    [1, -2, Infinity, 2 ** -24],
    0,
    "tensorFromBytes f16",
  );
  const ids = new Uint8Array(new Int32Array([7, -3, 16777216]).buffer);
  close(await gpu.tensorFromBytes(ids, "i32", [3]).read(), [7, -3, 16777216], 0, "i32");
  assert.throws(() => gpu.tensorFromBytes(ids, "f64", [3]), /unknown dtype/);
  assert.throws(() => gpu.tensorFromBytes(ids, "i32", [4]), /bytes/);

  // Dtypes: each stays as stored; typed reads; casts; comparisons; device ids and lengths.
  const f16t = gpu.tensorFromBytes(raw.subarray(1), "f16", [4]);
  assert.equal(f16t.dtype, "f16");
  // f16 reads as a Float16Array where the runtime has one, else as a Uint16Array of bits.
  const f16Read = await f16t.readTyped();
  if (globalThis.Float16Array) {
    assert.ok(f16Read instanceof globalThis.Float16Array);
    assert.deepEqual(Array.from(f16Read), [1, -2, Infinity, 2 ** -24]);
  } else {
    assert.ok(f16Read instanceof Uint16Array);
    assert.deepEqual(Array.from(f16Read), [0x3c00, 0xc000, 0x7c00, 0x0001]);
  }
  const big = gpu.tensorFromBytes(
    new Uint8Array(new Int32Array([16777217, -1]).buffer),
    "i32",
    [2],
  );
  assert.deepEqual(Array.from(await big.readTyped()), [16777217, -1]);
  assert.ok((await big.readTyped()) instanceof Int32Array);
  assert.deepEqual(Array.from(await big.cast("u32").readTyped()), [16777217, 4294967295]);
  const asHalf = gpu
    .tensor(new Float32Array([1.5, 70000, -0.1]), [3])
    .cast("bf16")
    .cast("f16");
  close(await asHalf.read(), [1.5, Infinity, -0.10009765625], 0, "f32 -> bf16 -> f16");
  const mask = gpu
    .tensor(new Float32Array([1, NaN, 3]), [3])
    .compare("less", gpu.tensor(new Float32Array([2, 2, 2]), [3]));
  assert.equal(mask.dtype, "u32");
  assert.deepEqual(Array.from(await mask.readTyped()), [1, 0, 0]);
  assert.throws(() => mask.compare("below", mask), /unknown op/);
  const idTable = gpu.tensor(new Float32Array([0, 1, 10, 11, 20, 21]), [3, 2]);
  const tokenIds = gpu.arange(3, "u32").reshape([1, 3]);
  close(await idTable.embeddingIds(tokenIds).read(), [0, 1, 10, 11, 20, 21], 0, "embeddingIds");
  assert.throws(() => idTable.embeddingIds(idTable), /u32/);
  const argmax = gpu.tensor(new Float32Array([3, 9, 1]), [1, 3]).argmax();
  assert.equal(argmax.dtype, "u32");
  assert.throws(() => big.relu(), /float/);

  // Attention on a packed QKV projection and on sequence-first tensors, read in place.
  const qkv = new Float32Array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.1, 0.9, 0.2, -0.3, 0.8, 0.7]);
  const packed = gpu.tensor(qkv, [1, 2, 6]).attentionPacked(1, 1, { causal: true });
  const pick = (o) => new Float32Array([qkv[o], qkv[o + 1], qkv[o + 6], qkv[o + 7]]);
  const [aq, ak, av] = [0, 2, 4].map((o) => gpu.tensor(pick(o), [1, 2, 1, 2]));
  const seqFirst = aq.attention(ak, av, { causal: true, layout: "bshd" });
  close(await packed.read(), Array.from(await seqFirst.read()), 1e-6, "attentionPacked");
  assert.throws(() => aq.attention(ak, av, { layout: "sbhd" }), /layout/);

  // Reductions and softmax.
  const zs = rand(777);
  const z = gpu.tensor(zs, [777]);
  const sum = zs.reduce((a, b) => a + b, 0);
  close([await z.sum().readScalar()], [sum], 1e-4, "sum");
  close([await z.mean().readScalar()], [sum / 777], 1e-4, "mean");
  close([await z.max().readScalar()], [Math.max(...zs)], 0, "max");
  close([await z.min().readScalar()], [Math.min(...zs)], 0, "min");
  close([await z.dot(z).readScalar()], [zs.reduce((a, v) => a + v * v, 0)], 1e-4, "dot");
  const mx = Math.max(...zs);
  const es = Array.from(zs, (v) => Math.exp(v - mx));
  const se = es.reduce((a, b) => a + b, 0);
  close(
    await z.softmax().read(),
    es.map((e) => e / se),
    1e-5,
    "softmax",
  );
  close(
    await z.logSoftmax().read(),
    Array.from(zs, (v) => v - mx - Math.log(se)),
    1e-4,
    "logSoftmax",
  );
  const z2 = z.slice(0, 0, 770).reshape([7, 110]);
  close(
    await z2.sumLast().read(),
    Array.from({ length: 7 }, (_, r) =>
      zs.slice(r * 110, r * 110 + 110).reduce((a, b) => a + b, 0),
    ),
    1e-4,
    "sumLast",
  );
  close(
    await z2.maxLast().read(),
    Array.from({ length: 7 }, (_, r) => Math.max(...zs.slice(r * 110, r * 110 + 110))),
    0,
    "maxLast",
  );
  close(
    await z2.argmax().read(),
    Array.from({ length: 7 }, (_, r) => {
      const s = zs.slice(r * 110, r * 110 + 110);
      return s.indexOf(Math.max(...s));
    }),
    0,
    "argmax",
  );
  const [tv, ti] = z2.topk(3);
  assert.deepEqual(tv.shape, [7, 3]);
  const firstRow = Array.from(zs.slice(0, 110))
    .sort((a, b) => b - a)
    .slice(0, 3);
  close((await tv.read()).slice(0, 3), firstRow, 0, "topk values");
  close(
    (await ti.read()).slice(0, 3),
    firstRow.map((v) => zs.indexOf(v)),
    0,
    "topk indices",
  );

  // matmul with odd sizes, transposes, bias and activation; linear.
  const [M, K, N] = [7, 65, 9];
  const as = rand(M * K),
    bs = rand(K * N),
    bias = rand(N);
  const a = gpu.tensor(as, [M, K]),
    b = gpu.tensor(bs, [K, N]),
    bt = b.transpose(0, 1);
  const ref = matmulRef(as, bs, M, K, N);
  close(await a.matmul(b).read(), ref, 1e-4, "matmul");
  close(await a.matmul(bt, { transposeB: true }).read(), ref, 1e-4, "matmul transposeB");
  close(
    await a.transpose(0, 1).matmul(b, { transposeA: true }).read(),
    ref,
    1e-4,
    "matmul transposeA",
  );
  const fused = Array.from(ref, (v, i) => Math.max(v + bias[i % N], 0));
  const bT = gpu.tensor(bias, [N]);
  close(
    await a.matmul(b, { bias: bT, activation: "relu" }).read(),
    fused,
    1e-4,
    "matmul bias relu",
  );
  close(await a.linear(bt, bT, "relu").read(), fused, 1e-4, "linear");
  close(await a.linear(bt).read(), ref, 1e-4, "linear without bias");
  assert.throws(() => a.matmul(b, { activation: "swish" }), /unknown variant `swish`/);
  assert.throws(() => a.linear(bt, null, "swish"), /unknown activation/);

  // Norms with weight and bias.
  const w = rand(K),
    nb = rand(K);
  const ln = await a
    .layerNorm({ weight: gpu.tensor(w, [K]), bias: gpu.tensor(nb, [K]), eps: 1e-5 })
    .read();
  const rms = await a.rmsNorm({ weight: gpu.tensor(w, [K]) }).read();
  for (let r = 0; r < M; r++) {
    const v = as.slice(r * K, r * K + K);
    const mean = v.reduce((s, t) => s + t, 0) / K;
    const vr = v.reduce((s, t) => s + (t - mean) ** 2, 0) / K;
    const ms = v.reduce((s, t) => s + t * t, 0) / K;
    close(
      ln.slice(r * K, r * K + K),
      Array.from(v, (t, i) => ((t - mean) / Math.sqrt(vr + 1e-5)) * w[i] + nb[i]),
      1e-4,
      "layerNorm",
    );
    close(
      rms.slice(r * K, r * K + K),
      Array.from(v, (t, i) => (t / Math.sqrt(ms + 1e-5)) * w[i]),
      1e-4,
      "rmsNorm",
    );
  }

  // Layout ops, embedding, rope, attention, conv and pooling, quantized weights.
  const t3 = gpu.tensor(
    Float32Array.from({ length: 24 }, (_, i) => i + 1),
    [2, 3, 4],
  );
  close(
    await t3.permute([2, 0, 1]).read(),
    Array.from({ length: 24 }, (_, i) => {
      const k = Math.floor(i / 6),
        r = i % 6;
      return r * 4 + k + 1;
    }),
    0,
    "permute",
  );
  close(
    await gpu.concat([t3, t3], 0).slice(0, 2, 4).read(),
    Array.from({ length: 24 }, (_, i) => i + 1),
    0,
    "concat+slice",
  );
  const table = gpu.tensor(
    Float32Array.from({ length: 12 }, (_, i) => i),
    [4, 3],
  );
  close(await table.embedding([3, 0, 3]).read(), [9, 10, 11, 0, 1, 2, 9, 10, 11], 0, "embedding");
  assert.throws(() => table.embedding([4]), /4/);
  const [cos, sin] = gpu.ropeTables(3, 4);
  const q = gpu.tensor(rand(12), [3, 4]);
  const qr = await q.rope(cos, sin, "halfSplit").read();
  assert.equal(qr.length, 12);
  close(qr.slice(0, 4), (await q.read()).slice(0, 4), 1e-6, "rope at position 0 is the identity");
  assert.throws(() => q.rope(cos, sin, "sideways"), /unknown RoPE layout/);
  const qa = gpu.tensor(rand(2 * 5 * 8), [1, 2, 5, 8]);
  const att = qa.attention(qa, qa, { causal: true });
  assert.deepEqual(att.shape, [1, 2, 5, 8]);
  close(
    (await att.read()).slice(0, 8),
    (await qa.read()).slice(0, 8),
    1e-5,
    "causal attention, first query sees only itself",
  );
  const img = gpu.tensor(rand(1 * 2 * 5 * 5), [1, 2, 5, 5]);
  const kern = gpu.tensor(rand(3 * 2 * 3 * 3), [3, 2, 3, 3]);
  assert.deepEqual(
    img.conv2d(kern, { padding: [1, 1], bias: gpu.tensor(rand(3), [3]) }).shape,
    [1, 3, 5, 5],
  );
  assert.deepEqual(img.maxPool2d({ kernel: [2, 2] }).shape, [1, 2, 2, 2]);
  assert.deepEqual(
    img.avgPool2d({ kernel: [3, 3], stride: [1, 1], padding: [1, 1] }).shape,
    [1, 2, 5, 5],
  );
  assert.throws(() => img.maxPool2d({}), /kernel/);
  // Q8_0: one block of 32 values per row: f16 scale 1.0 (0x3c00) then the int8 quants.
  const qbytes = new Uint8Array(2 * 34);
  for (let r = 0; r < 2; r++) {
    qbytes[r * 34] = 0x00;
    qbytes[r * 34 + 1] = 0x3c;
    for (let i = 0; i < 32; i++) qbytes[r * 34 + 2 + i] = (i - 16 + r) & 0xff;
  }
  const qw = gpu.quantized(qbytes, "q8_0", 2, 32);
  close(
    await qw.dequantize().read(),
    Array.from({ length: 64 }, (_, i) => (i % 32) - 16 + Math.floor(i / 32)),
    0,
    "dequantize",
  );
  const ones = gpu.tensor(new Float32Array(32).fill(1), [1, 32]);
  close(await ones.matmulQuant(qw).read(), [-16, 16], 1e-5, "matmulQuant");
  // What matmulQuant fuses, against the same arithmetic in JS on random inputs.
  {
    const wRow = (r) => Array.from({ length: 32 }, (_, i) => i - 16 + r);
    const dot = (v) => [0, 1].map((r) => wRow(r).reduce((acc, w, i) => acc + w * v[i], 0));
    const xq = rand(32);
    const x = gpu.tensor(xq, [1, 32]);
    const res = rand(2);
    const want = dot(xq).map((v, i) => v + res[i]);
    close(
      await x.matmulQuant(qw, { residual: gpu.tensor(res, [1, 2]) }).read(),
      want,
      1e-4,
      "matmulQuant residual",
    );
    const g = rand(32);
    const ms = xq.reduce((acc, v) => acc + v * v, 0) / 32;
    const normed = xq.map((v, i) => (v / Math.sqrt(ms + 1e-3)) * g[i]);
    close(
      await x
        .matmulQuant(qw, { rmsNorm: { weight: gpu.tensor(g, [32]), eps: 1e-3 }, precision: "f16" })
        .read(),
      dot(normed),
      1e-3,
      "matmulQuant rmsNorm",
    );
    const gu = rand(64);
    const silu = (v) => v / (1 + Math.exp(-v));
    const gated = Array.from({ length: 32 }, (_, i) => silu(gu[i]) * gu[32 + i]);
    close(
      await gpu.tensor(gu, [1, 64]).matmulQuant(qw, { swiglu: true }).read(),
      dot(gated),
      1e-4,
      "matmulQuant swiglu",
    );
    const [o0, o1] = dot(xq);
    const [c, sn] = [Math.cos(0.7), Math.sin(0.7)];
    close(
      await x
        .matmulQuant(qw, {
          rope: {
            cos: gpu.tensor(new Float32Array([c]), [1, 1]),
            sin: gpu.tensor(new Float32Array([sn]), [1, 1]),
          },
        })
        .read(),
      [o0 * c - o1 * sn, o0 * sn + o1 * c],
      1e-4,
      "matmulQuant rope",
    );
    assert.throws(() => x.matmulQuant(qw, { bias: 1 }), /bias/);
    assert.throws(() => x.matmulQuant(qw, { rmsNorm: { eps: 1e-5 } }), /weight/);
    assert.throws(
      () => x.matmulQuant(qw, { rope: { cos: x, sin: x, layout: "spiral" } }),
      /spiral|layout/,
    );
    assert.throws(
      () =>
        gpu
          .tensor(gu, [1, 64])
          .matmulQuant(qw, { swiglu: true, rmsNorm: { weight: gpu.tensor(g, [32]) } }),
      /swiglu|rms/i,
    );
  }
  // Rows by device ids, dequantised there: row 1, then row 0.
  const qrows = qw.embeddingIds(gpu.tensor(new Float32Array([1, 0]), [2]).cast("u32"));
  assert.deepEqual(qrows.shape, [2, 32]);
  close(
    await qrows.read(),
    Array.from({ length: 64 }, (_, i) => (i % 32) - 16 + 1 - Math.floor(i / 32)),
    0,
    "embeddingIds of quantized rows",
  );
  assert.throws(() => qw.embeddingIds(ones), /u32|i32/);

  // The batch API and a compiled graph.
  const batch = gpu.batch();
  const bx = batch.upload(xs.slice(1, 1001), [1000]);
  const by = batch.sigmoid(batch.add(batch.scale(batch.relu(bx), 2), batch.relu(bx)));
  batch.output(by);
  assert.deepEqual(batch.shape(by), [1000]);
  const want = Array.from(xs.slice(1, 1001), (v) => 1 / (1 + Math.exp(-3 * Math.max(v, 0))));
  const result = await batch.run();
  close(result.get(by), want, 1e-5, "batch");
  assert.ok(result.kernels >= 1);
  const graph = batch.compile();
  const newData = rand(1000);
  close(
    (await graph.run([[bx, newData]])).get(by),
    Array.from(newData, (v) => 1 / (1 + Math.exp(-3 * Math.max(v, 0)))),
    1e-5,
    "graph",
  );
  assert.throws(() => batch.relu(999), /not one of this batch/);
  assert.throws(() => result.get(bx), /not marked as an output/);

  // A graph that takes new token ids each run (u32 uploads, embedding on the device).
  const idBatch = gpu.batch();
  const idTableV = idBatch.tensor(
    gpu.tensor(new Float32Array([0, 1, 10, 11, 20, 21, 30, 31]), [4, 2]),
  );
  const tokens = idBatch.uploadBytes(new Uint8Array(new Uint32Array([3, 0]).buffer), "u32", [2]);
  const idRows = idBatch.embeddingIds(idTableV, tokens);
  idBatch.output(idRows);
  const idGraph = idBatch.compile();
  close((await idGraph.run()).get(idRows), [30, 31, 0, 1], 0, "graph ids");
  idGraph.setInput(tokens, new Uint8Array(new Uint32Array([1, 2]).buffer));
  close((await idGraph.run()).get(idRows), [10, 11, 20, 21], 0, "graph new ids");
  assert.throws(() => idGraph.setInput(tokens, new Uint8Array(4)), /bytes/);
  // Outputs in their own dtype: u32 ids past 2^24 exactly, argmax indices as a Uint32Array.
  const typedBatch = gpu.batch();
  const wide = typedBatch.uploadBytes(
    new Uint8Array(new Uint32Array([16777217, 4294967295]).buffer),
    "u32",
    [2],
  );
  const best = typedBatch.argmax(typedBatch.upload(new Float32Array([1, 5, 2, 9, 0, 3]), [2, 3]));
  typedBatch.output(wide);
  typedBatch.output(best);
  const typed = await typedBatch.compile().run();
  const wideOut = typed.getTyped(wide);
  assert.ok(wideOut instanceof Uint32Array);
  assert.deepEqual(Array.from(wideOut), [16777217, 4294967295]);
  assert.deepEqual(Array.from(typed.get(wide)), [16777216, 4294967296]);
  assert.deepEqual(Array.from(typed.getTyped(best)), [1, 0]);
  assert.throws(() => typed.getTyped(99), /not marked as an output/);
  assert.throws(() => idBatch.relu(tokens), /u32/);
  const asF32 = idBatch.cast(tokens, "f32");
  assert.deepEqual(idBatch.shape(asF32), [2]);

  // Bad input: Errors with the Rust message, never a trap.
  const errors = [
    [() => gpu.tensor(new Float32Array(5), [2, 3]), /shape mismatch in tensor/],
    [() => gpu.tensor(new Float32Array(6), [2, -3]), /non-negative integer/],
    [() => gpu.tensor(new Float32Array(6), "2x3"), /must be an array/],
    [() => a.matmul(a), /shape mismatch in matmul/],
    [() => a.matmul(b, { transposeX: true }), /unknown field `transposeX`/],
    [() => a.matmul(b, { bias: 3 }), /must be a gpukit Tensor/],
    [() => a.matmul(b, 7), /must be an object/],
    [() => x.reshape([3, 3]), /reshape/],
    [() => z2.topk(1000), /topk|k/],
    [() => x.add(gpu.tensor(rand(3), [3])), /shape mismatch/],
    [() => x.add(again.tensor(rand(n), [n])), /device/],
    [() => gpu.quantized(new Uint8Array(3), "q8_0", 1, 32), /needs 34 bytes/],
    [() => gpu.quantized(qbytes, "q9", 2, 32), /unknown quantization format/],
  ];
  for (const [f, re] of errors) {
    assert.throws(
      f,
      (e) => e instanceof Error && !(e instanceof WebAssembly.RuntimeError) && re.test(e.message),
      String(f),
    );
  }
  // dispose: later use is an Error; disposing twice is fine.
  const d = gpu.tensor(rand(4), [4]);
  const kept = d.relu();
  d.dispose();
  d.dispose();
  assert.equal(d.disposed, true);
  assert.throws(() => d.relu(), /disposed/);
  assert.throws(() => kept.add(d), /disposed/);
  await assert.doesNotReject(kept.read());
  await gpu.synchronize();
  assert.ok(gpu.memoryStats().liveBytes >= 0);
  // Verification mode: ops checked against the CPU backend at the read, listed in the report.
  const vgpu = await Gpu.create({ backend: "cpu", verify: true });
  const vx = vgpu.tensor(rand(40), [5, 8]);
  await vx.relu().softmax().sumLast().read();
  const vreport = vgpu.verificationReport();
  assert.deepEqual(
    vreport.ops.map((o) => o.op),
    ["relu", "softmax", "sum"],
  );
  assert.ok(vreport.ops.every((o) => o.checked === 1 && o.maxError <= 1));
  assert.equal(gpu.verificationReport(), null);
  await assert.rejects(Gpu.create({ verify: "yes" }), /expected a boolean/);
  const h = await hostile(gpukit, gpu, label);
  console.log(
    `${label}: ${h.calls} hostile calls over ${h.methods} methods, ${h.thrown} refused with an Error, none trapped`,
  );
  console.log(`${label}: JS API checks passed on ${info.backend} (${info.adapter})`);
}
