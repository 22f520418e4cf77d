#!/usr/bin/env bash
# llama.cpp's CUDA build as the peer of `gpukit bench-chat --backend cuda`, where node-llama-cpp's
# prebuilt CUDA binary cannot run: its kernels are PTX from a newer CUDA than the driver of the
# H100 machines ("the provided PTX was compiled with an unsupported toolchain"), and its fallback
# build needs CUDA 12's libraries, which those machines lack. So the same llama.cpp release that
# node-llama-cpp 3.22.1 bundles is built on the GPU machine with its own nvcc, for its own GPU.
#
#   bash scripts/peers/llama_bench_cuda.sh stage      # here: .gpu/llama-src (about 10 MB)
#   bash scripts/peers/llama_bench_cuda.sh run MODEL  # on the NVIDIA host, from the project root
#   bash scripts/peers/llama_bench_cuda.sh long MODEL # there: decode after LLAMA_DEPTH tokens
#
# `run` needs nvcc, cmake (3.24 or later), ninja or make and a C++ compiler there, builds
# llama-bench into $LLAMA_BUILD (default /root/llama-build; about 4 minutes on 16 cores, kept
# between runs on one machine) and runs it on MODEL: a 512-token prompt (prefill) and 128 new
# tokens (decode), each from an empty context and after 128 tokens (the depth of gpukit's decode
# figure), 5 repetitions. Prints one JSON object in the shape of llama_cpp.mjs's, beside the
# llama-bench rows: {"peer", "backend", "decode_tokens_per_s", "prefill_tokens_per_s", "rows"}.
set -euo pipefail
cd "$(dirname "$0")/../.."
case ${1:-} in
  stage)
    bundle=target/peers/llama/node_modules/node-llama-cpp/llama/gitRelease.bundle
    if [ ! -f "$bundle" ]; then
      mkdir -p target/peers/llama
      (cd target/peers/llama && { [ -f package.json ] || echo '{"private":true}' >package.json; } &&
        npm install --no-audit --no-fund node-llama-cpp@3.22.1 >/dev/null)
    fi
    src=$(mktemp -d)
    git clone -q "$bundle" "$src/llama.cpp" 2>/dev/null
    mkdir -p .gpu/llama-src
    # The sources llama-bench needs: no history, model vocabularies, docs or apps.
    tar cf - -C "$src/llama.cpp" --exclude=./.git --exclude=./models --exclude=./docs \
      --exclude=./media --exclude=./gguf-py --exclude=./app --exclude=./examples/llama.android . |
      xz -T0 -3 >.gpu/llama-src/llama-src.tar.xz
    rm -rf "$src"
    du -h .gpu/llama-src/llama-src.tar.xz
    ;;
  run | long)
    model=${2:?usage: llama_bench_cuda.sh run|long MODEL.gguf}
    build=${LLAMA_BUILD:-/root/llama-build}
    if [ ! -x "$build/bin/llama-bench" ]; then
      mkdir -p "$build/src"
      tar xJf .gpu/llama-src/llama-src.tar.xz -C "$build/src"
      export PATH=/usr/local/cuda/bin:$PATH
      cmake -S "$build/src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=native -DGGML_NATIVE=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_CURL=OFF \
        -DLLAMA_OPENSSL=OFF >"$build/cmake.log" 2>&1 || { tail -20 "$build/cmake.log" >&2; exit 1; }
      cmake --build "$build" --target llama-bench -j "$(nproc)" >"$build/build.log" 2>&1 ||
        { tail -20 "$build/build.log" >&2; exit 1; }
    fi
    if [ "$1" = long ]; then
      # Decode at a long context: 256 new tokens after $LLAMA_DEPTH (default 1964) tokens.
      depth=${LLAMA_DEPTH:-1964}
      rows=$("$build/bin/llama-bench" -m "$model" -ngl 99 -p 0 -n 256 -d "$depth" -r 3 -o json)
      ROWS="$rows" python3 -c 'import json, os; r = json.loads(os.environ["ROWS"])[0]; print(json.dumps({"peer": "llama.cpp (llama-bench, CUDA, built here)", "n_depth": r["n_depth"], "n_gen": r["n_gen"], "decode_tokens_per_s": r["avg_ts"], "stddev_ts": r["stddev_ts"]}))'
      exit 0
    fi
    rows=$("$build/bin/llama-bench" -m "$model" -ngl 99 -p 512 -n 128 -d 0,128 -r 5 -o json)
    ROWS="$rows" python3 - <<'EOF'
import json, os
rows = json.loads(os.environ["ROWS"])
pick = lambda p, g: next(r["avg_ts"] for r in rows if r["n_prompt"] == p and r["n_gen"] == g and r["n_depth"] == (128 if g else 0))
print(json.dumps({
    "peer": "llama.cpp (llama-bench, CUDA, built here)",
    "backend": "cuda",
    "decode_tokens_per_s": pick(0, 128),
    "prefill_tokens_per_s": pick(512, 0),
    "rows": [{k: r[k] for k in ("n_prompt", "n_gen", "n_depth", "avg_ts", "stddev_ts")} for r in rows],
}))
EOF
    ;;
  *)
    echo "usage: $0 stage | run MODEL.gguf | long MODEL.gguf" >&2
    exit 2
    ;;
esac
