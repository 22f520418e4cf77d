#!/usr/bin/env bash
# On the NVIDIA host, from the project root, after scripts/dawn/stage.sh:
#   bash .gpu/on-gpu.sh bash .gpu/web/run.sh [suite|bench|native|models]...
# (default: suite bench native)
# BENCH_ARGS adds options to the bench step (for example `--only D2-2048,A1`).
# suite: the op suite on WebGPU through Dawn; bench: the page's workloads beside raw WebGPU and
# tfjs-webgpu; native: `gpukit bench --backend vulkan` on the same GPU. Output goes to $OUT
# (or .gpu/web/out): dawn-suite.txt, dawn-bench.{txt,json}, vulkan-bench.json.
# models: puts together the model chunks (stage.sh with GPU_WEB_MODELS=1 makes .gpu/models/1
# .. 4; one call each carries a folder and copies it to $MODELS, default /root/gpukit-models:
# `mkdir -p /root/gpukit-models && cp .gpu/models/N/* /root/gpukit-models/`) and runs
# all-MiniLM-L6-v2 and SmolLM2 in the web build through Dawn (dawn-models.{txt,json}) and
# natively on Vulkan (vulkan-embed.json, vulkan-chat.json). Where folders 5 and 6 came too
# (transformers.js's ONNX graph) and tjs.tar.xz was staged, transformers.js on WebGPU embeds
# the same texts in the same process.
set -uo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$dir/out}
mkdir -p "$out"
for f in "$dir"/*.xz "$dir"/../bin/*.xz; do
  case $f in *.tar.xz) continue ;; esac # archives are unpacked where they are used
  [ -f "$f" ] && xz -d -f "$f" && chmod +x "${f%.xz}"
done
export PATH="$dir:$PATH" DAWN_NODE="$dir/dawn.node"
status=0
steps=${*:-suite bench native}
for step in $steps; do
  case $step in
    suite)
      echo "== the op suite on WebGPU through Dawn"
      NODE_ARGS="--require=$dir/setup.cjs" WASM_BINDGEN_TEST_TIMEOUT=1200 \
        wasm-bindgen-test-runner "$dir/dawn-suite.wasm" >"$out/dawn-suite.txt" 2>&1 || status=1
      grep -E "^test result|FAIL|panicked" "$out/dawn-suite.txt" | head -40
      ;;
    bench)
      echo "== the benchmark workloads through Dawn"
      node "$dir/bench.mjs" --www "$dir/www" --json "$out/dawn-bench.json" ${BENCH_ARGS:-} 2>&1 |
        tee "$out/dawn-bench.txt" || status=1
      ;;
    native)
      echo "== gpukit bench on native Vulkan, same GPU"
      "$dir/../bin/gpukit" bench --backend vulkan --json >"$out/vulkan-bench.json" 2>"$out/vulkan-bench.err" || status=1
      tail -3 "$out/vulkan-bench.err"
      ;;
    models)
      m=${MODELS:-/root/gpukit-models}
      mkdir -p "$m/minilm"
      [ -f "$m/minilm/model.safetensors" ] || cat "$m"/minilm.part* >"$m/minilm/model.safetensors"
      cp "$m/config.json" "$m/tokenizer.json" "$m/minilm/"
      [ -f "$m/smollm.gguf" ] || cat "$m"/smollm.part* >"$m/smollm.gguf"
      # transformers.js beside the embedder where stage.sh packed it and folders 5, 6 came.
      peer=()
      if [ -f "$dir/tjs.tar.xz" ] && [ -f "$m/onnx.part01" ]; then
        mkdir -p "$m/tjs/all-MiniLM-L6-v2/onnx"
        [ -d "$m/tjs/node_modules" ] || tar xJf "$dir/tjs.tar.xz" -C "$m/tjs"
        [ -f "$m/tjs/all-MiniLM-L6-v2/onnx/model.onnx" ] ||
          cat "$m"/onnx.part* >"$m/tjs/all-MiniLM-L6-v2/onnx/model.onnx"
        cp "$m/config.json" "$m/tjs/all-MiniLM-L6-v2/"
        cp "$m/tjs.tokenizer.json" "$m/tjs/all-MiniLM-L6-v2/tokenizer.json"
        cp "$m/tjs.tokenizer_config.json" "$m/tjs/all-MiniLM-L6-v2/tokenizer_config.json"
        peer=(--tjs "$m/tjs" --tjs-model "$m/tjs/all-MiniLM-L6-v2")
      fi
      echo "== the models in the web build through Dawn"
      node "$dir/models.mjs" --www "$dir/www" --minilm "$m/minilm" --smollm "$m/smollm.gguf" \
        --text "$dir/bench_text.txt" --json "$out/dawn-models.json" "${peer[@]}" 2>&1 |
        tee "$out/dawn-models.txt" || status=1
      echo "== the same natively on Vulkan"
      "$dir/../bin/gpukit" bench-embed --backend vulkan --model "$m/minilm" --json \
        >"$out/vulkan-embed.json" 2>&1 || status=1
      "$dir/../bin/gpukit" bench-chat --backend vulkan --model "$m/smollm.gguf" --json \
        >"$out/vulkan-chat.json" 2>&1 || status=1
      ;;
    *) echo "unknown step $step" >&2; status=1 ;;
  esac
done
exit $status
