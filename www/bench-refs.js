// The JavaScript references the benchmark workloads are checked against (first outputs only,
// so the largest sizes stay quick).
// The first `count` outputs of an n x n x n matmul (all of them by default).
export const matmulRef = (a, b, n, count = n * n) => {
  const o = new Float64Array(count);
  for (let i = 0; i * n < count; i++)
    for (let p = 0; p < n; p++) {
      const v = a[i * n + p];
      for (let j = 0; j < n && i * n + j < count; j++) o[i * n + j] += v * b[p * n + j];
    }
  return o;
};
// `m` (n x n) transposed.
export const transpose = (m, n) => {
  const t = new Float32Array(n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) t[j * n + i] = m[i * n + j];
  return t;
};
// The first `count` outputs of a softmax over rows of `cols`.
export const softmaxRef = (x, cols, count) => {
  const out = [];
  for (let r = 0; out.length < count; r++) {
    const row = Array.from(x.subarray(r * cols, (r + 1) * cols));
    const m = Math.max(...row);
    const e = row.map((v) => Math.exp(v - m));
    const s = e.reduce((p, q) => p + q, 0);
    out.push(...e.map((v) => v / s).slice(0, count - out.length));
  }
  return out;
};
export const sig = (v) => 1 / (1 + Math.exp(-v));
// The first `count` outputs of conv2d (3x3, padding 1, stride 1) and of causal attention.
export const convRef = (x, w, [CB, CC, CS], count) =>
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
export const attnRef = (q, k, v, [AH, AS, AD], count) =>
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
