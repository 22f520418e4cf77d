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
