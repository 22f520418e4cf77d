#!/usr/bin/env bash
# On the NVIDIA host, from the project root, after scripts/dawn/stage.sh:
#   bash .gpu/on-gpu.sh bash .gpu/web/run.sh [suite|bench|native]...   (default: all three)
# BENCH_ARGS adds options to the bench step (for example `--only D2-2048,A1`).
# suite: the op suite on WebGPU through Dawn; bench: the page's workloads beside raw WebGPU and
# tfjs-webgpu; native: `gpukit bench --backend vulkan` on the same GPU. Output goes to $OUT
# (or .gpu/web/out): dawn-suite.txt, dawn-bench.{txt,json}, vulkan-bench.json.
set -uo pipefail
dir=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$dir/out}
mkdir -p "$out"
for f in "$dir"/*.xz "$dir"/../bin/*.xz; do
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
    *) echo "unknown step $step" >&2; status=1 ;;
  esac
done
exit $status
