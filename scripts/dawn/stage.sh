#!/usr/bin/env bash
# Stages the real-GPU browser harness into .gpu/ (git-ignored) for an x86-64 NVIDIA Linux host
# that has neither Node nor Rust (`make gpu-web`; run there with
# `bash .gpu/on-gpu.sh bash .gpu/web/run.sh`, carrying .gpu/web, .gpu/debs and .gpu/on-gpu.sh):
#   - Node (this machine's, stripped) and Dawn's Node addon from the npm package `webgpu`;
#   - the op suite built for wasm32 (tests/dawn.rs) and wasm-bindgen's test runner;
#   - the benchmark page's workloads, the package's web build and tfjs from www/ (`make www`);
#   - the native gpukit CLI, whose Vulkan figures on the same GPU sit beside the web build's.
# The Vulkan loader and the launcher come from the GPU machine's staging script (GPU_PREPARE,
# default ../shared/gpu/prepare.sh). Big files travel xz-compressed (a run carries <= 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/../.."
DAWN_VERSION=0.6.2
dawn=target/peers/dawn/package/dist/linux-x64/dawn.node
if [ ! -f "$dawn" ]; then
  mkdir -p target/peers/dawn
  (cd target/peers/dawn && npm pack --silent "webgpu@$DAWN_VERSION" >/dev/null && tar xzf "webgpu-$DAWN_VERSION.tgz")
fi
[ -f www/pkg/gpukit.js ] || { echo "gpu-web: no www/pkg: run make www first" >&2; exit 1; }
prepare=${GPU_PREPARE:-../shared/gpu/prepare.sh}
[ -x "$prepare" ] || [ -f "$prepare" ] || { echo "gpu-web: no GPU staging script at $prepare (set GPU_PREPARE)" >&2; exit 1; }

cargo build --release --bin gpukit
suite=$(cargo test --release --target wasm32-unknown-unknown --test dawn --no-run 2>&1 |
  sed -n 's/.*Executable tests\/dawn.rs (\(.*\.wasm\)).*/\1/p')
[ -f "$suite" ] || { echo "gpu-web: the wasm32 op suite did not build" >&2; exit 1; }
bash "$prepare" target/release/gpukit

out=.gpu/web
rm -rf "$out"
mkdir -p "$out/www/pkg" "$out/www/vendor"
pack() { # pack SOURCE NAME: a stripped, xz-compressed copy
  cp "$1" "$out/$2"
  strip "$out/$2" 2>/dev/null || true
  xz -T2 -1 -f "$out/$2"
}
pack "$(command -v node)" node
pack "$dawn" dawn.node
pack "$(command -v wasm-bindgen-test-runner)" wasm-bindgen-test-runner
xz -T2 -1 -f .gpu/bin/gpukit
cp "$suite" "$out/dawn-suite.wasm"
cp scripts/dawn/setup.cjs scripts/dawn/env.mjs scripts/dawn/bench.mjs scripts/dawn/models.mjs \
  scripts/dawn/transformers.mjs scripts/dawn/run.sh \
  scripts/peers/bench_text.txt "$out/"
cp www/common.js www/bench-workloads.js www/bench-refs.js www/raw-webgpu.js "$out/www/"
cp www/pkg/gpukit.js www/pkg/gpukit_bg.wasm "$out/www/pkg/"
mkdir -p "$out/www/pkg/models"
cp www/pkg/models/gpukit.js www/pkg/models/gpukit_bg.wasm "$out/www/pkg/models/"
cp www/vendor/tf-core.min.js www/vendor/tf-backend-webgpu.min.js "$out/www/vendor/"
echo '{"type":"module"}' > "$out/www/package.json"
# The model files (GPU_WEB_MODELS=1): too big for one call together, so in folders of under
# 50 MB, .gpu/models/1 .. 4 (and 5, 6 for transformers.js), each carried by its own call and copied to
# /root/gpukit-models there (files outside the copy outlive a call while the machine stays
# warm); `run.sh models` puts them together.
if [ "${GPU_WEB_MODELS:-0}" = 1 ]; then
  rm -rf .gpu/models
  mkdir -p .gpu/models/1 .gpu/models/2 .gpu/models/3 .gpu/models/4
  m=target/models/all-minilm-l6-v2
  cp "$m/config.json" "$m/tokenizer.json" .gpu/models/1/
  split -n 2 -d "$m/model.safetensors" /tmp/gpukit-minilm.part
  mv /tmp/gpukit-minilm.part00 .gpu/models/1/minilm.part00
  mv /tmp/gpukit-minilm.part01 .gpu/models/2/minilm.part01
  split -n 2 -d target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/gpukit-smollm.part
  mv /tmp/gpukit-smollm.part00 .gpu/models/3/smollm.part00
  mv /tmp/gpukit-smollm.part01 .gpu/models/4/smollm.part01
  # transformers.js, the embedder's peer in the same process (models.mjs --tjs), from what
  # `make bench-tjs` installed into target/peers: the files its web build and onnxruntime-web's
  # WebGPU provider load, and the ONNX graph of the same weights in two folders, 5 and 6.
  peers=target/peers
  onnx=$peers/tjs-models/all-MiniLM-L6-v2
  if [ -f "$onnx/onnx/model.onnx" ] && [ -d "$peers/tjs/node_modules/onnxruntime-web/dist" ]; then
    mkdir -p .gpu/models/5 .gpu/models/6
    # Named apart from the embedder's files, which share the folder there.
    cp "$onnx/tokenizer.json" .gpu/models/5/tjs.tokenizer.json
    cp "$onnx/tokenizer_config.json" .gpu/models/5/tjs.tokenizer_config.json
    split -n 2 -d "$onnx/onnx/model.onnx" /tmp/gpukit-onnx.part
    mv /tmp/gpukit-onnx.part00 .gpu/models/5/onnx.part00
    mv /tmp/gpukit-onnx.part01 .gpu/models/6/onnx.part01
    ort=node_modules/onnxruntime-web
    tar cf - -C "$peers/tjs" node_modules/@huggingface/transformers/package.json \
      node_modules/@huggingface/transformers/dist/transformers.web.js node_modules/onnxruntime-common \
      $ort/package.json $ort/dist/ort.webgpu.bundle.min.mjs $ort/dist/ort-wasm-simd-threaded.asyncify.mjs \
      $ort/dist/ort-wasm-simd-threaded.asyncify.wasm | xz -T2 -6 >"$out/tjs.tar.xz"
  else
    echo "gpu-web: no transformers.js peer in $peers (run make bench-tjs once): not staged" >&2
  fi
fi
# (The model folders exist only with GPU_WEB_MODELS=1; du fails on a missing path.)
du -shL .gpu/web .gpu/bin .gpu/debs $(ls -d .gpu/models/* 2>/dev/null) |
  awk '{print "staged " $2 ": " $1}'
