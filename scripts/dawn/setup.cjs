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
