// Type-checked by tsc against the installed package's generated declarations
// (scripts/test-npm.sh): the API a TypeScript user sees, with wrong uses marked as errors.
import {
  Gpu,
  Tensor,
  QuantTensor,
  type GpuInfo,
  type MatmulOptions,
  type QuantMatmulOptions,
} from "gpukit";

export async function usage(): Promise<number> {
  const gpu: Gpu = await Gpu.create({ backend: "auto" });
  const info: GpuInfo = gpu.info;
  const software: boolean = info.isFallbackAdapter || info.software;
  const limit: number = info.limits.invocationsPerWorkgroup;
  const f16: boolean = info.features.shaderF16;

  const x: Tensor = gpu.tensor(new Float32Array([1, 2, 3, 4]), [2, 2]);
  const options: MatmulOptions = { transposeB: true, bias: gpu.scalar(1), activation: "gelu" };
  const y = x.matmul(x, options).softmax().layerNorm({ eps: 1e-6 });
  const [values, indices]: [Tensor, Tensor] = y.topk(1);
  const data: Float32Array = await values.read();
  const total: number = await indices.sum().readScalar();
  const shape: number[] = y.shape;
  y.dispose();

  const batch = gpu.batch();
  const a: number = batch.upload(new Float32Array(4), [4]);
  batch.output(batch.relu(a));
  const out: Float32Array = (await batch.run()).get(a);

  // @ts-expect-error: backends are a closed set
  await Gpu.create({ backend: "cuda" });
  // @ts-expect-error: read() is a Promise, not the data
  const wrong: Float32Array = values.read();
  // @ts-expect-error: activation names are checked
  x.matmul(x, { activation: "swish" });
  const q: QuantTensor = gpu.quantized(new Uint8Array(34), "q8_0", 1, 32);
  const fused: QuantMatmulOptions = {
    rmsNorm: { weight: x, eps: 1e-5 },
    residual: x,
    rope: { cos: x, sin: x, layout: "halfSplit" },
    precision: "f16",
  };
  x.matmulQuant(q, fused).dispose();
  // @ts-expect-error: rope layouts are checked
  x.matmulQuant(q, { rope: { cos: x, sin: x, layout: "spiral" } });

  return (
    data.length +
    total +
    shape.length +
    out.length +
    limit +
    Number(software) +
    Number(f16) +
    wrong.length
  );
}
