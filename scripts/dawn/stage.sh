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
cp scripts/dawn/setup.cjs scripts/dawn/bench.mjs scripts/dawn/run.sh "$out/"
cp www/common.js www/bench-workloads.js www/bench-refs.js www/raw-webgpu.js "$out/www/"
cp www/pkg/gpukit.js www/pkg/gpukit_bg.wasm "$out/www/pkg/"
cp www/vendor/tf-core.min.js www/vendor/tf-backend-webgpu.min.js "$out/www/vendor/"
echo '{"type":"module"}' > "$out/www/package.json"
du -shL .gpu/web .gpu/bin .gpu/debs | awk '{print "staged " $2 ": " $1}'
