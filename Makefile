# The two commands of a fresh machine: `make demo` runs the main job, `make test` passes every test.
# Both install what is missing first (scripts/deps.sh, idempotent).

export XDG_RUNTIME_DIR ?= /tmp
CARGO ?= cargo

.PHONY: deps demo test lint test-native test-wasm bench bench-peer gpu-stage

deps:
	@bash scripts/deps.sh

## Discover backends, run a few ops on the best device, check them against the CPU backend.
demo: deps
	$(CARGO) run --release --example demo

## Formatting, lints (native and wasm32), every native test, doc tests, and the demo's checks.
test: deps lint test-native test-wasm
	$(CARGO) run --example demo

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

# Tests start from an empty matmul-tuning cache, as on a fresh machine, so first-use tuning
# runs inside them every time instead of depending on what an earlier run left in ~/.cache.
TEST_CACHE := $(CURDIR)/target/test-tuning-cache
test-native:
	rm -rf $(TEST_CACHE)
	GPUKIT_CACHE_DIR=$(TEST_CACHE) $(CARGO) test --all-targets
	GPUKIT_CACHE_DIR=$(TEST_CACHE) $(CARGO) test --doc

# The library must build for the browser, where the blocking twins do not exist.
test-wasm:
	$(CARGO) clippy --lib --target wasm32-unknown-unknown -- -D warnings

## The benchmark table on the device automatic selection picks.
bench:
	$(CARGO) run --release --bin gpukit -- bench

## W1-W6 beside trueno 0.17.5 in the same process (builds the optional peer; minutes).
bench-peer:
	$(CARGO) run --release --features peer-trueno --bin gpukit -- bench --peer trueno
