// Type-checked by tsc (scripts/test-npm.sh): the `gpukit/models` entry as a TypeScript user
// sees it, with wrong uses marked as errors.
import { Gpu, Embedder, type EmbedderFiles, type LoadProgress } from "gpukit/models";

export async function usageModels(weights: Uint8Array, config: string, tokenizer: string) {
  const gpu: Gpu = await Gpu.create({ backend: "auto" });
  const files: EmbedderFiles = { config, tokenizer, weights };
  const fromBytes: Embedder = await Embedder.load(gpu, files);
  const seen: LoadProgress[] = [];
  const fromUrl: Embedder = await Embedder.load(gpu, "/models/all-minilm-l6-v2/", {
    onProgress: (p: LoadProgress) => seen.push(p),
    cache: "gpukit-models",
  });
  const vectors: Float32Array[] = await fromUrl.embed(["a query", "a document"]);
  const dim: number = fromBytes.dim;
  const ids: Uint32Array = fromBytes.tokenize("hello");
  // @ts-expect-error: texts are an array
  await fromBytes.embed("one string");
  // @ts-expect-error: the source is a URL or the files
  await Embedder.load(gpu, 42);
  fromBytes.free();
  return vectors.length + dim + ids.length + seen.length;
}
