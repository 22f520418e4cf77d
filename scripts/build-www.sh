#!/usr/bin/env bash
# Puts what www/ loads beside its pages (all git-ignored): the web build of the npm package
# (pkg/web, from scripts/build-pkg.sh) in www/pkg and its models entry in www/pkg/models, the
# model files (scripts/fetch-models.sh: all-MiniLM-L6-v2, SmolLM2) linked into www/models, TensorFlow.js and its WebGPU backend from
# node_modules in www/vendor, and the digit model trained from the fetched data.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f pkg/web/gpukit.js ] || { echo "build-www: no pkg/web: run scripts/build-pkg.sh first" >&2; exit 1; }
rm -rf www/pkg www/vendor www/models
mkdir -p www/pkg/models www/vendor www/models
cp pkg/web/gpukit.js pkg/web/gpukit_bg.wasm www/pkg/
cp pkg/models/web/gpukit.js pkg/models/web/gpukit_bg.wasm www/pkg/models/
bash scripts/fetch-models.sh
ln -s ../../target/models/all-minilm-l6-v2 www/models/all-minilm-l6-v2
ln -s ../../target/models/smollm2 www/models/smollm2
cp node_modules/@tensorflow/tfjs-core/dist/tf-core.min.js www/vendor/
cp node_modules/@tensorflow/tfjs-backend-webgpu/dist/tf-backend-webgpu.min.js www/vendor/
bash scripts/fetch-digits.sh
cargo run --quiet --release --example train_digits -- www/digits/model.json
