#!/usr/bin/env bash
# Installs what `make test` and `make demo` need, when it is missing. Safe to run again.
set -euo pipefail

sudo=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then sudo="sudo"; fi

apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@"
}

# Mesa's lavapipe: a real Vulkan driver on the CPU, so the GPU test suite always has an adapter.
if ! ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || ! ldconfig -p | grep -q 'libvulkan.so.1'; then
  echo "deps: installing Mesa lavapipe (mesa-vulkan-drivers) and the Vulkan loader"
  apt_install mesa-vulkan-drivers libvulkan1
fi

# Rust components and targets.
installed=$(rustup component list --installed 2>/dev/null || true)
for c in clippy rustfmt; do
  grep -q "^$c" <<<"$installed" || rustup component add "$c"
done
rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

# Node runs the wasm op suite and the Node benchmark.
if ! command -v node >/dev/null; then
  echo "deps: installing Node.js"
  apt_install nodejs
fi

# Headless Chromium and its WebDriver for the browser tests (WebGPU on SwiftShader).
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  echo "deps: installing chromium and chromium-driver"
  apt_install chromium chromium-driver
fi

# wasm-bindgen's CLI (the test runner and the JS glue generator), exactly the version of the
# wasm-bindgen crate in Cargo.lock, or the two refuse to work together.
WASM_BINDGEN_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/[^0-9.]/, ""); print }' "$(dirname "$0")/../Cargo.lock")
if [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$WASM_BINDGEN_VERSION" ]; then
  echo "deps: installing wasm-bindgen-cli $WASM_BINDGEN_VERSION (a few minutes)"
  cargo install wasm-bindgen-cli --version "$WASM_BINDGEN_VERSION"
fi

# pip fetches the scikit-learn wheel that holds the digit demo's training data.
if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "deps: installing python3-pip"
  apt_install python3 python3-pip
fi

# The model weights (all-minilm-l6-v2) the embedder's tests and the demo run.
bash "$(dirname "$0")/fetch-models.sh"

# wasm-pack builds the npm package.
if ! command -v wasm-pack >/dev/null; then
  echo "deps: installing wasm-pack (a few minutes)"
  cargo install wasm-pack
fi

# The JS tools of the build and tests (binaryen's wasm-opt, tsc, playwright-core, tfjs for the
# benchmark page), at the versions in package-lock.json; reinstalled when the lock changes.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [ ! -f "$root/node_modules/.package-lock.json" ] || [ "$root/package-lock.json" -nt "$root/node_modules/.package-lock.json" ]; then
  echo "deps: npm ci"
  (cd "$root" && npm ci --no-audit --no-fund)
fi
