// Hostile calls against the JS API: every method of Gpu, Tensor, QuantTensor, Batch and
// BatchResult with seeded random arguments from a pool of wrong types, wrong numbers
// (negative, fractional, NaN, infinite, past 2^32 and 2^53), overflowing shapes and look-alike
// tensors. Every call must return, throw an Error or reject with one: never a
// WebAssembly.RuntimeError, never a Promise that does not settle, and the module must still
// compute correctly afterwards. Runs in Node (scripts/test-npm.sh) and in Chromium
// (scripts/e2e.mjs), so it uses no Node module.

export async function hostile(gpukit, gpu, label, calls = 4000) {
  const fail = (msg) => {
    throw new Error(`${label}: ${msg}`);
  };
  let seed = 2026;
  const next = () => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed / 2147483648;
  };
  const pick = (xs) => xs[Math.floor(next() * xs.length)];

  const real = gpu.tensor(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
  const square = gpu.tensor(new Float32Array([1, 2, 3, 4]), [2, 2]);
  const qbytes = new Uint8Array(34);
  const numbers = [
    -1,
    -0.5,
    0,
    1,
    1.5,
    2,
    3,
    7,
    2 ** 31,
    2 ** 32,
    2 ** 32 + 1,
    2 ** 53,
    2 ** 53 + 2,
    1e300,
    NaN,
    Infinity,
    -Infinity,
    Number.MAX_VALUE,
    -(2 ** 31),
  ];
  const shapes = [
    [65536, 65536],
    [2 ** 32, 2],
    [2 ** 31, 2 ** 31, 0],
    [4294967295, 4294967295],
    [-1],
    [1.5],
    ["2"],
    [NaN],
    [2, 3],
    [6],
    [],
    [0],
    [2 ** 53],
    [1, 1, 1, 1, 1, 1, 1, 1, 1],
  ];
  const lookAlike = { _share: () => real, __wbg_ptr: 8 };
  const pool = () =>
    pick([
      pick(numbers),
      pick(numbers),
      pick(shapes),
      pick(shapes),
      "relu",
      "q8_0",
      "interleaved",
      "",
      null,
      undefined,
      {},
      [],
      lookAlike,
      real,
      square,
      new Float32Array(6),
      new Float32Array(4),
      new Uint8Array(6),
      qbytes,
      [1, 2, 3],
      "abc",
      { eps: NaN },
      { scale: NaN },
      { scale: 2 },
      { padding: [2 ** 31, 0] },
      { kernel: [2, 2], stride: [1, 1] },
      { bias: lookAlike },
      { keyLengths: [4000000000] },
      { causal: true },
      { transposeB: true },
      { groups: 0 },
      { backend: 5 },
      true,
      false,
      () => 1,
      Symbol.iterator === undefined ? 0 : 1n,
    ]);

  const batch = gpu.batch();
  const bx = batch.upload(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3]);
  const by = batch.relu(bx);
  batch.output(by);
  const result = await batch.run();
  const quant = gpu.quantized(qbytes, "q8_0", 1, 32);
  const targets = [
    ["Gpu", gpu],
    ["Tensor", real],
    ["Tensor", square],
    ["QuantTensor", quant],
    ["Batch", batch],
    ["BatchResult", result],
  ];
  const methods = targets.flatMap(([cls, obj]) => {
    const proto = Object.getPrototypeOf(obj);
    return Object.getOwnPropertyNames(proto)
      .filter(
        (m) =>
          m !== "constructor" &&
          m !== "free" &&
          m !== "dispose" &&
          m !== "__destroy_into_raw" &&
          typeof Object.getOwnPropertyDescriptor(proto, m).value === "function",
      )
      .map((m) => [cls, obj, m]);
  });
  if (methods.length < 60) fail(`only ${methods.length} methods found`);

  const isBad = (e) => e instanceof WebAssembly.RuntimeError || !(e instanceof Error);
  const pending = [];
  let thrown = 0;
  for (let i = 0; i < calls; i++) {
    const [cls, obj, m] = pick(methods);
    const args = Array.from({ length: Math.floor(next() * 5) }, pool);
    const what = `${cls}.${m}(${args.map((a) => (typeof a === "bigint" ? `${a}n` : (JSON.stringify(a) ?? String(a)))).join(", ")})`;
    let out;
    try {
      out = obj[m](...args);
    } catch (e) {
      if (isBad(e)) fail(`${what} threw ${e?.constructor?.name}: ${e?.message ?? e}`);
      thrown++;
      continue;
    }
    if (out instanceof Promise) {
      const timeout = new Promise((r) => setTimeout(() => r("timeout"), 20000));
      pending.push(
        Promise.race([
          out.then(
            () => "ok",
            (e) => (isBad(e) ? e : "rejected"),
          ),
          timeout,
        ]).then((r) => {
          if (r === "timeout") fail(`${what}: the Promise did not settle`);
          if (r !== "ok" && r !== "rejected")
            fail(`${what} rejected with ${r?.constructor?.name}: ${r?.message ?? r}`);
        }),
      );
      if (pending.length >= 32) await Promise.all(pending.splice(0));
    }
    // Tensors the calls made are dropped at once: memory stays flat over thousands of calls.
    if (out && typeof out.dispose === "function" && out !== real && out !== square) out.dispose();
  }
  await Promise.all(pending);
  // The module is intact: the fixed tensors and a new computation give the right numbers.
  const sum = await real.sum().readScalar();
  if (sum !== 21) fail(`after the hostile calls, sum is ${sum}`);
  const mm = await square.matmul(square).read();
  if (Array.from(mm).join() !== "7,10,15,22") fail(`after the hostile calls, matmul gives ${mm}`);
  const fresh = await gpu
    .tensor(new Float32Array([3, -1]), [2])
    .relu()
    .read();
  if (Array.from(fresh).join() !== "3,0") fail(`after the hostile calls, relu gives ${fresh}`);
  return { calls, thrown, methods: methods.length };
}
