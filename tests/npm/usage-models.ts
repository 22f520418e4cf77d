// Type-checked by tsc (scripts/test-npm.sh): the `gpukit/models` entry as a TypeScript user
// sees it, with wrong uses marked as errors.
import {
  Gpu,
  Embedder,
  Llm,
  type EmbedderFiles,
  type GenerateOptions,
  type Generation,
  type LoadProgress,
} from "gpukit/models";

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
  const half: Embedder = await Embedder.load(gpu, files, { weights: "f16" });
  const kept: string = half.weightDtype;
  // @ts-expect-error: weights are "f32", "f16" or "bf16"
  await Embedder.load(gpu, files, { weights: "f8" });
  fromBytes.free();
  return vectors.length + dim + ids.length + seen.length + kept.length;
}

export async function usageLlm(gguf: Uint8Array) {
  const gpu: Gpu = await Gpu.create({ backend: "auto" });
  const llm: Llm = await Llm.load(gpu, "/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", {
    onProgress: (p: LoadProgress) => p.loaded,
    cache: "gpukit-models",
    context: 1024,
  });
  const fromBytes: Llm = await Llm.load(gpu, gguf);
  const options: GenerateOptions = {
    maxTokens: 64,
    temperature: 0.7,
    topK: 40,
    topP: 0.9,
    seed: 1,
  };
  const gen: Generation = llm.generate("What is the capital of France?", options);
  let text = "";
  for await (const piece of gen) text += piece;
  const finish: string | null = gen.finish;
  const rate: number = gen.decodeTokensPerSecond + gen.prefillTokensPerSecond;
  const ids: Uint32Array = gen.ids;
  const logits: Float32Array = await llm.logits(Array.from(gen.promptIds));
  // @ts-expect-error: maxTokens is a number
  llm.generate("Hi", { maxTokens: "many" });
  // @ts-expect-error: the source is a URL or bytes
  await Llm.load(gpu, 42);
  fromBytes.free();
  return text.length + rate + ids.length + logits.length + llm.context + (finish ?? "").length;
}
