# The two commands of a fresh machine: `make demo` runs the main job, `make test` passes every test.
# Both install what is missing first (scripts/deps.sh, idempotent).

export XDG_RUNTIME_DIR ?= /tmp
CARGO ?= cargo

.PHONY: deps demo test lint test-native test-wasm test-node test-browser pkg test-npm www test-e2e bench bench-peer bench-cpu bench-node bench-chat bench-wllama bench-tjs gpu-web gpu-llama

deps:
	@bash scripts/deps.sh

## Build the npm package and the www demos, run the native example (discover backends, run ops
## on the best device, check them against the CPU backend), then serve www/ on
## http://127.0.0.1:8080/ until stopped.
demo: deps www
	$(CARGO) run --release --example demo
	node scripts/serve.mjs 8080

## Formatting, lints (native and wasm32), every native test, doc tests, the op suite in Node
## (wasm32, SIMD128, CPU backend), and the demo's checks.
test: deps lint www test-native test-wasm test-node test-browser test-npm test-e2e
	$(CARGO) run --example demo

# The JavaScript of the pages, scripts and npm tests is formatted by prettier (.prettierrc.json).
JS_FILES := "www/**/*.js" "scripts/**/*.mjs" "tests/npm/**/*.{mjs,cjs,ts}"
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings
	node_modules/.bin/prettier --check $(JS_FILES)

# Tests start from an empty matmul-tuning cache, as on a fresh machine, so first-use tuning
# runs inside them every time instead of depending on what an earlier run left in ~/.cache.
TEST_CACHE := $(CURDIR)/target/test-tuning-cache
test-native:
	rm -rf $(TEST_CACHE)
	GPUKIT_CACHE_DIR=$(TEST_CACHE) $(CARGO) test --all-targets
	GPUKIT_CACHE_DIR=$(TEST_CACHE) $(CARGO) test --doc

# The library must build for the browser, where the blocking twins do not exist.
test-wasm:
	$(CARGO) clippy --lib --tests --target wasm32-unknown-unknown -- -D warnings

# The op suite compiled to wasm32 with SIMD128 and run in Node by wasm-bindgen-test-runner
# (.cargo/config.toml sets both): the CPU backend as Node and WebGPU-less browsers run it.
test-node:
	$(CARGO) test --target wasm32-unknown-unknown --test node

# The op suite in headless Chromium on its WebGPU adapter (SwiftShader), plus the same suite
# on a WebGPU+CPU hybrid and automatic selection there; webdriver.json adds the WebGPU flag.
# SwiftShader is slow: the runner's default per-run timeout is too short for the tuner.
test-browser:
	WASM_BINDGEN_TEST_TIMEOUT=1200 CHROMEDRIVER=$${CHROMEDRIVER:-/usr/bin/chromedriver} \
		$(CARGO) test --target wasm32-unknown-unknown --test browser

## The npm package in pkg/ (wasm-pack: an ES-module build for browsers and a CommonJS one for
## Node, both wasm32 with SIMD128), checked against the 350 KB gzipped size budget.
pkg: deps
	bash scripts/build-pkg.sh

# `npm pack`, install into an empty folder, run the JS API checks in Node, type-check with tsc.
test-npm: pkg
	bash scripts/test-npm.sh

## What www/ loads, beside its pages (git-ignored): the package's web build, tfjs from
## node_modules, and the digit model trained from the fetched scikit-learn digits.
www: pkg
	bash scripts/build-www.sh

# Each www page in headless Chromium (WebGPU on SwiftShader) through playwright-core:
# verified results, the chart, digits drawn with the mouse; screenshots in target/e2e/.
test-e2e: www
	node scripts/e2e.mjs

## The benchmark table on the device automatic selection picks.
bench:
	$(CARGO) run --release --bin gpukit -- bench

## The CPU backend beside a plain Rust loop and the gemm crate, in one run.
bench-cpu:
	$(CARGO) run --release --bin gpukit -- bench-cpu

## The CPU backend in Node: the same workloads built for wasm32 with and without SIMD128.
WASM_OUT := target/wasm32-unknown-unknown/release/gpukit.wasm
bench-node: deps
	$(CARGO) build --release --lib --target wasm32-unknown-unknown --features js-bench
	wasm-bindgen --target nodejs --out-dir target/node/simd $(WASM_OUT)
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=-simd128" \
		$(CARGO) build --release --lib --target wasm32-unknown-unknown --features js-bench --target-dir target/wasm-scalar
	wasm-bindgen --target nodejs --out-dir target/node/scalar target/wasm-scalar/$(WASM_OUT:target/%=%)
	node scripts/bench-node.mjs $(ARGS)

## W1-W6 beside trueno 0.17.5 in the same process (builds the optional peer; minutes).
bench-peer:
	$(CARGO) run --release --features peer-trueno --bin gpukit -- bench --peer trueno

## The LLM's decode and prefill speed (gpukit bench-chat) beside llama.cpp on the same text and
## backend (BACKEND=cpu|vulkan|cuda; node-llama-cpp 3.22.1 with its prebuilt binaries, installed
## into target/peers/llama on first use; the CPU binary by default).
BACKEND ?= cpu
THREADS ?= 2
bench-chat: deps
	[ -d target/peers/llama/node_modules/node-llama-cpp ] || (mkdir -p target/peers/llama && \
		cd target/peers/llama && echo '{"private":true}' > package.json && \
		npm install --no-audit --no-fund node-llama-cpp@3.22.1 @node-llama-cpp/linux-x64@3.22.1)
	$(CARGO) run --release --bin gpukit -- bench-chat --backend $(BACKEND)
	node scripts/peers/llama_cpp.mjs target/models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf $(BACKEND) $(THREADS)

## The LLM in headless Chromium beside wllama (llama.cpp in wasm, installed into target/peers on
## first use): decode and prefill on one thread, the CPU backend against wllama's CPU build.
bench-wllama: www
	node scripts/peers/wllama.mjs

## The embeddings model in headless Chromium beside transformers.js (its npm package and the
## ONNX graph built from the same weights go into target/peers on first use): latency and
## throughput on the CPU and on WebGPU, one thread each.
bench-tjs: www
	node scripts/peers/transformers_js.mjs

## The browser path on a real GPU: stages into .gpu/ what an NVIDIA Linux machine without Node
## or Rust needs to run the op suite on WebGPU through Dawn (Chrome's WebGPU, the npm package
## `webgpu` in Node) and the benchmark workloads beside raw WebGPU and tfjs-webgpu there, with
## native Vulkan alongside. Run it there: `bash .gpu/on-gpu.sh bash .gpu/web/run.sh`.
gpu-web: www
	bash scripts/dawn/stage.sh

## Stage llama.cpp's sources (the release node-llama-cpp bundles) into .gpu/llama-src, for
## `bash scripts/peers/llama_bench_cuda.sh run MODEL` on an NVIDIA host: the CUDA peer of
## `gpukit bench-chat --backend cuda`, built there with its own nvcc.
gpu-llama:
	bash scripts/peers/llama_bench_cuda.sh stage
