#!/usr/bin/env bash
# Builds the npm package into pkg/: wasm-pack makes two builds of the wasm32 (SIMD128) crate,
# `web` (ES module, for browsers with or without a bundler) and `nodejs` (CommonJS), and this
# script puts them beside pkg-template/'s package.json and README. `npm pack pkg` then makes the
# tarball. The wasm is built with the `wasm-release` profile (fat LTO; dependencies optimised
# for size, gpukit and gemm for speed: see Cargo.toml) and then shrunk by wasm-opt -Os, run
# here rather than by wasm-pack so that its flags are ours. wasm-opt comes from npm's binaryen
# (node_modules/.bin): Debian's older binaryen breaks the module. The core package is built
# without default features: the models layer (tokenizer, loaders) stays out of it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$PATH"

version=$(awk -F'"' '/^version = / { print $2; exit }' Cargo.toml)
out=pkg
rm -rf "$out" target/pkg-build
# Two entries, each in two builds: the core (`gpukit`, no default features) and the models
# entry (`gpukit/models`: the core plus feature `models`, whose tokenizer, loaders and
# `Embedder` only pages that run a model pay for).
# LLVM's inliner runs at a lower threshold than opt-level 2's (225): at 100, 14.5 KB less
# gzipped wasm, with no change in Node beyond noise on matmul, the small-row linear, attention,
# softmax and elementwise kernels (their hot loops are `#[inline(always)]` or in gemm, which the
# threshold does not touch); at 50, 5.6 KB less again (the fused RoPE of the quantized product
# had taken the core past its budget at 100). BENCHMARKS.md has the figures.
# The source paths that panic locations carry are remapped to short fixed names, so the
# package is the same size wherever the project and the cargo registry lie (a longer clone path
# cost about 50 bytes gzipped a character).
cargo_home=${CARGO_HOME:-$HOME/.cargo}
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128 -C llvm-args=-inline-threshold=50 --remap-path-prefix=$PWD=gpukit --remap-path-prefix=$cargo_home=cargo"
build() { # entry features
  for target in web nodejs; do
    dir=target/pkg-build/$1/$target
    wasm-pack --quiet build --profile wasm-release --no-opt --target "$target" --out-dir "$dir" \
      --out-name gpukit --no-pack . -- --no-default-features $2
    wasm-opt -Os --enable-simd --enable-bulk-memory --enable-nontrapping-float-to-int \
      --enable-sign-ext --enable-mutable-globals --enable-reference-types --enable-multivalue \
      -o "$dir/gpukit_bg.wasm" "$dir/gpukit_bg.wasm"
  done
}
build core ""
build models "--features models"

for entry in core models; do
  base=$out
  [ "$entry" = models ] && base=$out/models
  mkdir -p "$base/web" "$base/node"
  for f in gpukit.js gpukit.d.ts gpukit_bg.wasm gpukit_bg.wasm.d.ts; do
    cp "target/pkg-build/$entry/web/$f" "$base/web/$f"
    cp "target/pkg-build/$entry/nodejs/$f" "$base/node/$f"
  done
  # Each build says which module system it uses, whatever the importing project's default.
  echo '{ "type": "module" }' > "$base/web/package.json"
  echo '{ "type": "commonjs" }' > "$base/node/package.json"
done
sed "s/\"version\": \"0.0.0\"/\"version\": \"$version\"/" pkg-template/package.json > "$out/package.json"
cp pkg-template/README.md "$out/README.md"

models_gz=$(gzip -9 -c "$out/models/web/gpukit_bg.wasm" | wc -c)
echo "build-pkg: the gpukit/models entry's wasm: $models_gz bytes gzipped (gzip -9)"
raw=$(wc -c < "$out/web/gpukit_bg.wasm")
gz=$(gzip -9 -c "$out/web/gpukit_bg.wasm" | wc -c)
echo "build-pkg: gpukit $version in $out/: gpukit_bg.wasm $raw bytes, $gz bytes gzipped (gzip -9)"
# The package's size budget: 350 KB gzipped (300 KB until NumPy broadcasting, axis
# reductions and the dtypes; BENCHMARKS.md has the figures).
if [ "$gz" -gt 350000 ]; then
  echo "build-pkg: the gzipped wasm is over the 350 KB budget" >&2
  exit 1
fi
