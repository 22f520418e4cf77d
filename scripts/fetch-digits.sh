#!/usr/bin/env bash
# The handwritten digits the draw-a-digit demo is trained on: scikit-learn's copy of the UCI
# optdigits test set (1797 real 8x8 digits, values 0-16, BSD-3), taken from the scikit-learn
# wheel on PyPI at setup time and never committed. Writes target/data/digits.csv.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/data/digits.csv
[ -s "$out" ] && exit 0
mkdir -p target/data/wheel
# Any wheel holds the same data file; pinning the platform makes the download the same on
# every machine whatever its Python.
python3 -m pip download --quiet scikit-learn==1.9.1 --no-deps --only-binary=:all: \
  --python-version 3.11 --platform manylinux_2_28_x86_64 -d target/data/wheel
wheel=$(ls target/data/wheel/scikit_learn-1.9.1-*.whl | head -n 1)
python3 - "$wheel" "$out" <<'PY'
import gzip, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    data = gzip.decompress(z.read("sklearn/datasets/data/digits.csv.gz"))
open(sys.argv[2], "wb").write(data)
PY
echo "fetch-digits: $(wc -l < "$out") digits in $out"
