// The browser build's declarations: `init()` first, then the same API.
import init, { Gpu } from "gpukit/web";

export async function usageWeb(): Promise<string> {
  await init();
  const gpu = await Gpu.create({ backend: "webgpu" });
  const y = gpu.tensor(new Float32Array([1, 2]), [2]).relu();
  await y.read();
  return gpu.info.adapter;
}
