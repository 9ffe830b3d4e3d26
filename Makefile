# FreeToken front door. `make deps`, `make`, `make test`, `make test-gpu`, `make serve`, `make bench`.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
APT_PKGS = g++ cmake ninja-build ccache pkg-config curl \
           libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev \
           libpcre2-dev libutf8proc-dev libxxhash-dev libgtest-dev libgmock-dev \
           libbenchmark-dev libopenblas-dev clang libclang-rt-14-dev

.PHONY: all deps configure build test test-cpu test-asan test-gpu gpu-check serve bench fuzz clean

all: build

# Installs every build/test dependency from Debian packages. Idempotent: apt is only
# called when a package is missing. Node.js (with npm) is installed only when absent,
# because some machines carry a nodesource build that conflicts with Debian's npm.
deps:
	@missing=$$(for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if ! command -v npm >/dev/null 2>&1; then missing="$$missing nodejs npm"; fi; \
	if [ -n "$$(echo $$missing | tr -d ' ')" ]; then \
	  echo "deps: installing $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$missing; \
	else echo "deps: all installed"; fi
	@if [ ! -f tests/e2e/node_modules/.package-lock.json ] || \
	   [ tests/e2e/package-lock.json -nt tests/e2e/node_modules/.package-lock.json ]; then \
	  echo "deps: npm ci in tests/e2e (the openai and @anthropic-ai/sdk clients for the server's end-to-end tests)"; \
	  cd tests/e2e && npm ci --no-audit --no-fund; \
	else echo "deps: tests/e2e node_modules up to date"; fi

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

configure: $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Every CPU test plus the ASan+UBSan build of the parser tests. GPU tests skip without a device.
test: deps build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900
	$(MAKE) test-asan
	$(MAKE) fuzz FUZZ_RUNS=30000

test-asan:
	cmake -S . -B $(BUILD_ASAN) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFT_SANITIZE=ON -DFT_CUDA=OFF
	cmake --build $(BUILD_ASAN) -j $(JOBS) --target test_formats
	cd $(BUILD_ASAN) && FT_FUZZ_VARIANTS=10000 ./test_formats

# libFuzzer harnesses (fuzz/*_fuzz.cpp, Debian's clang with ASan + UBSan), each run for FUZZ_S seconds
# from its seed corpus (fuzz/corpus/NAME; new inputs go to $(FUZZ_DIR)/corpus-NAME); fails on any crash,
# leak, undefined behaviour or broken invariant, leaving the input that did it in the working directory.
# FUZZ_RUNS=N instead runs N inputs from the seeds alone with a fixed seed: the same inputs on every
# machine (what `make test` runs).
FUZZ_S   ?= 60
FUZZ_RUNS ?=
FUZZ_DIR ?= build-fuzz
FUZZ_CXX  = clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc
FUZZ_REQUEST_SRC = src/server/request_parse.cpp src/server/anthropic_request.cpp src/server/json_fields.cpp \
                   src/server/errors.cpp src/server/json_body.cpp src/server/responses_request.cpp \
                   src/server/response_store.cpp
FUZZ_SCHEMA_SRC = src/server/json_schema_grammar.cpp src/server/json_grammar_rules.cpp src/server/errors.cpp \
                  src/engine/grammar/grammar.cpp src/engine/grammar/matcher.cpp src/engine/grammar/token_trie.cpp \
                  src/engine/grammar/grammar_constraint.cpp src/tokenizer/utf8.cpp src/util/error.cpp
fuzz:
	mkdir -p $(FUZZ_DIR)
	$(FUZZ_CXX) fuzz/request_parse_fuzz.cpp $(FUZZ_REQUEST_SRC) -lfmt -o $(FUZZ_DIR)/request_parse_fuzz
	$(FUZZ_CXX) fuzz/stop_matcher_fuzz.cpp src/tokenizer/stop_matcher.cpp -o $(FUZZ_DIR)/stop_matcher_fuzz
	$(FUZZ_CXX) fuzz/json_schema_fuzz.cpp $(FUZZ_SCHEMA_SRC) -lfmt -lutf8proc -o $(FUZZ_DIR)/json_schema_fuzz
	for h in request_parse stop_matcher json_schema; do \
	  if [ -n "$(FUZZ_RUNS)" ]; then dir=$(FUZZ_DIR)/fixed-$$h; rm -rf $$dir; len="-runs=$(FUZZ_RUNS) -seed=1"; \
	  else dir=$(FUZZ_DIR)/corpus-$$h; len="-max_total_time=$(FUZZ_S)"; fi; \
	  mkdir -p $$dir && \
	  $(FUZZ_DIR)/$${h}_fuzz $$len -max_len=8192 $$dir fuzz/corpus/$$h > $(FUZZ_DIR)/$$h.log 2>&1; rc=$$?; \
	  echo "fuzz $$h: $$(grep -E '^Done' $(FUZZ_DIR)/$$h.log)"; \
	  if [ $$rc -ne 0 ]; then tail -40 $(FUZZ_DIR)/$$h.log; exit 1; fi; \
	done

# GPU tests only (every suite named Cuda*: tests/gpu and the expert-cache tests in tests/moe); they
# fail (rather than skip) when no device is present.
test-gpu: gpu-check build
	cd $(BUILD) && FT_REQUIRE_GPU=1 ctest --output-on-failure -R Cuda

# Before the build, so a machine without a GPU hears it at once.
gpu-check:
	@nvidia-smi -L >/dev/null 2>&1 || { echo "test-gpu: no NVIDIA GPU is visible (nvidia-smi -L fails); these tests need one (make test runs the rest)"; exit 1; }

serve: build
	./$(BUILD)/ft serve $(ARGS)

# Without ARGS: a 4-layer model of qwen3-30b-a3b's shapes in q4_k (synthetic weights, ~13 s on 2 CPU
# cores); pass ARGS="--model PATH" or ARGS="--model-preset NAME --dummy-weights ..." for others.
BENCH_DEFAULT_ARGS = --model-preset qwen3-30b-a3b --dummy-weights --weight-type q4_k --dummy-layers 4
bench: build
	./$(BUILD)/ft bench $(if $(strip $(ARGS)),$(ARGS),$(BENCH_DEFAULT_ARGS))

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
