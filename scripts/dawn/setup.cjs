// Makes Node look like a browser with WebGPU, through Dawn (Chrome's WebGPU implementation,
// the npm package `webgpu`): its classes become globals, `navigator.gpu` is Dawn, and a
// `Window` global exists because wgpu's web backend looks for one before `navigator.gpu`.
// Loaded with `node --require` (NODE_ARGS for wasm-bindgen-test-runner) or required by a script.
// DAWN_NODE names the addon (default: dawn.node beside this file); DAWN_ARGS passes Dawn
// options, comma-separated (for example `backend=vulkan`).
const path = require("node:path");

const addon = process.env.DAWN_NODE || path.join(__dirname, "dawn.node");
const { create, globals } = require(addon);
Object.assign(globalThis, globals);
const args = (process.env.DAWN_ARGS || "").split(",").filter(Boolean);
const gpu = create(args);
Object.defineProperty(globalThis, "navigator", {
  value: { gpu, userAgent: `Node ${process.version}, Dawn (${path.basename(addon)})` },
  configurable: true,
});
globalThis.Window ??= function Window() {};

// Dawn's addon refuses a view of a SharedArrayBuffer in `queue.writeBuffer` ("Invalid
// argument"), which browsers take: onnxruntime-web's wasm memory is shared, so its uploads
// (transformers.js, models.mjs's peer) go through a copy. Other callers are unaffected.
const writeBuffer = GPUQueue.prototype.writeBuffer;
GPUQueue.prototype.writeBuffer = function (buffer, offset, data, dataOffset, size) {
  if (!(data?.buffer instanceof SharedArrayBuffer))
    return writeBuffer.call(this, buffer, offset, data, dataOffset, size);
  const unit = data.BYTES_PER_ELEMENT ?? 1;
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength).slice();
  const start = (dataOffset ?? 0) * unit;
  const length = size === undefined ? bytes.byteLength - start : size * unit;
  return writeBuffer.call(this, buffer, offset, bytes, start, length);
};
