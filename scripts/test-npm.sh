#!/usr/bin/env bash
# The npm package as a user gets it: `npm pack` of pkg/ (scripts/build-pkg.sh), installed into an
# empty folder, then (1) the JS API checks run through `import` and `require` in Node, and
# (2) the `gpukit/models` entry embeds texts against the f64 reference of
# examples/bert_reference.rs (same weights) and answers with SmolLM2 against the f64 reference of
# examples/llama_reference.rs (same GGUF), and (3) tsc type-checks TypeScript usage files
# against the installed declarations.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
[ -f pkg/package.json ] || { echo "test-npm: no pkg/: run scripts/build-pkg.sh first" >&2; exit 1; }

mkdir -p target/npm
tarball=$(cd target/npm && npm pack --silent "$root/pkg" | tail -n 1)
echo "test-npm: packed target/npm/$tarball ($(du -k "target/npm/$tarball" | cut -f1) KiB)"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cp tests/npm/api.mjs tests/npm/hostile.mjs tests/npm/smoke.mjs tests/npm/smoke.cjs tests/npm/usage.ts tests/npm/usage-web.ts \
  tests/npm/models.mjs tests/npm/llm.mjs tests/npm/expect.mjs tests/npm/usage-models.ts \
  tests/npm/tsconfig.json "$dir/"
cd "$dir"
npm init -y >/dev/null
npm install --no-audit --no-fund --silent "$root/target/npm/$tarball"
node smoke.mjs
node smoke.cjs
models=$root/target/models/all-minilm-l6-v2
(cd "$root" && cargo run --quiet --example bert_reference -- "$models" \
  < tests/data/embedding_texts.json) > reference.json
GPUKIT_REFERENCE=$PWD/reference.json node models.mjs "$models" "$root"
gguf=$root/target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
(cd "$root" && echo '["What is the capital of France?"]' |
  cargo run --quiet --example llama_reference -- "$gguf" 6) > llm-reference.json
GPUKIT_LLM_REFERENCE=$PWD/llm-reference.json node llm.mjs "$gguf" "$root"
"$root/node_modules/.bin/tsc" -p tsconfig.json
echo "test-npm: the tarball installs, runs in Node (import and require) and type-checks"
