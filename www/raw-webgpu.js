// The floor: the benchmark workloads written directly against WebGPU, with pipelines made once
// and no library in between.
const WG = 256;
const UNARY = `
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<uniform> p: vec4<f32>; // op, n, scale
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
  let i = g.x + g.y * n.x * ${WG}u;
  if (i >= u32(p.y)) { return; }
  let v = x[i];
  switch u32(p.x) {
    case 0u: { y[i] = max(v, 0.0); }
    case 1u: { y[i] = v * p.z; }
    case 2u: { y[i] = v + v; }
    default: { y[i] = 1.0 / (1.0 + exp(-v)); }
  }
}`;
const ADD = `
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@compute @workgroup_size(${WG}) fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) n: vec3<u32>) {
  let i = g.x + g.y * n.x * ${WG}u;
  if (i >= arrayLength(&c)) { return; }
  c[i] = a[i] + b[i];
}`;
// A plain 16x16 tiled matmul (workgroup memory, one output per invocation).
const MATMUL = `
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<f32>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>; // m, k, n
var<workgroup> ta: array<array<f32, 16>, 16>;
var<workgroup> tb: array<array<f32, 16>, 16>;
@compute @workgroup_size(16, 16) fn main(@builtin(global_invocation_id) g: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>) {
  let row = g.y; let col = g.x; let m = dims.x; let k = dims.y; let n = dims.z;
  var acc = 0.0;
  for (var t = 0u; t < k; t = t + 16u) {
    let ak = t + l.x; let bk = t + l.y;
    ta[l.y][l.x] = select(0.0, a[row * k + ak], row < m && ak < k);
    tb[l.y][l.x] = select(0.0, b[bk * n + col], bk < k && col < n);
    workgroupBarrier();
    for (var i = 0u; i < 16u; i = i + 1u) { acc = acc + ta[l.y][i] * tb[i][l.x]; }
    workgroupBarrier();
  }
  if (row < m && col < n) { c[row * n + col] = acc; }
}`;

export class RawWebGpu {
  static async create() {
    const adapter = await navigator.gpu?.requestAdapter();
    if (!adapter) throw new Error("no WebGPU adapter");
    const device = await adapter.requestDevice();
    return new RawWebGpu(device);
  }

  constructor(device) {
    this.device = device;
    const make = (code) =>
      device.createComputePipeline({
        layout: "auto",
        compute: { module: device.createShaderModule({ code }), entryPoint: "main" },
      });
    this.unary = make(UNARY);
    this.add = make(ADD);
    this.matmul = make(MATMUL);
    this.uniforms = new Map();
  }

  /** A uniform buffer holding `values`, made once per distinct content (not per dispatch). */
  uniform(values) {
    const key = `${values.constructor.name}:${values.join(",")}`;
    let b = this.uniforms.get(key);
    if (!b) {
      b = this.buffer(values, GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST);
      this.uniforms.set(key, b);
    }
    return b;
  }

  buffer(data, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST) {
    const size = typeof data === "number" ? data * 4 : data.byteLength;
    const b = this.device.createBuffer({ size: Math.max(16, size), usage });
    if (typeof data !== "number") this.device.queue.writeBuffer(b, 0, data);
    return b;
  }

  groups(n) {
    const g = Math.ceil(n / WG);
    return g <= 65535 ? [g, 1] : [65535, Math.ceil(g / 65535)];
  }

  encode(enc, pipeline, buffers, groups) {
    const bind = this.device.createBindGroup({
      layout: pipeline.getBindGroupLayout(0),
      entries: buffers.map((buffer, binding) => ({ binding, resource: { buffer } })),
    });
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(...groups);
    pass.end();
  }

  unaryOp(enc, x, y, n, op, scale = 1) {
    const p = this.uniform(new Float32Array([op, n, scale, 0]));
    this.encode(enc, this.unary, [x, y, p], this.groups(n));
  }

  addOp(enc, a, b, c, n) {
    this.encode(enc, this.add, [a, b, c], this.groups(n));
  }

  matmulOp(enc, a, b, c, m, k, n) {
    const d = this.uniform(new Uint32Array([m, k, n, 0]));
    this.encode(enc, this.matmul, [a, b, c, d], [Math.ceil(n / 16), Math.ceil(m / 16)]);
  }

  /** Submits `enc` with a copy of `src` into a mappable buffer and returns the data. */
  async finishAndRead(enc, src, n) {
    const read = this.device.createBuffer({
      size: Math.max(16, n * 4),
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    enc.copyBufferToBuffer(src, 0, read, 0, n * 4);
    this.device.queue.submit([enc.finish()]);
    await read.mapAsync(GPUMapMode.READ);
    const out = new Float32Array(read.getMappedRange().slice(0));
    read.destroy();
    return out;
  }

  async sync(enc) {
    this.device.queue.submit([enc.finish()]);
    await this.device.queue.onSubmittedWorkDone();
  }
}
