# FreeToken front door. `make deps`, `make`, `make test`, `make test-gpu`, `make serve`, `make bench`.
BUILD      ?= build
BUILD_ASAN ?= build-asan
JOBS       ?= $(shell nproc)
CMAKE_ARGS ?=
APT_PKGS = g++ cmake ninja-build ccache pkg-config curl \
           libboost-dev libcpp-httplib-dev nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev \
           libpcre2-dev libutf8proc-dev libxxhash-dev libgtest-dev libgmock-dev \
           libbenchmark-dev libopenblas-dev clang libclang-rt-14-dev chromium

.PHONY: all deps configure build test test-cpu test-asan test-gpu gpu-check serve bench fuzz fuzz-build soak clean

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
# Objects are compiled once into $(FUZZ_DIR)/obj (header changes tracked), JOBS at a time.
FUZZ_S   ?= 60
FUZZ_RUNS ?=
FUZZ_DIR ?= build-fuzz
FUZZ_CXX  = clang++ -std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Isrc
FUZZ_NAMES = request_parse stop_matcher json_schema gguf safetensors_config tokenizer chat_template reply_stream \
             quant_config
FUZZ_LIBS = -lfmt -lutf8proc -lpcre2-8
FUZZ_UTIL_SRC = src/util/error.cpp src/util/read_file.cpp src/util/mmap_file.cpp src/tensor/dtype.cpp
FUZZ_request_parse_SRC = src/server/request_parse.cpp src/server/anthropic_request.cpp src/server/json_fields.cpp \
                   src/server/errors.cpp src/server/json_body.cpp src/server/responses_request.cpp \
                   src/server/response_store.cpp
FUZZ_stop_matcher_SRC = src/tokenizer/stop_matcher.cpp
FUZZ_json_schema_SRC = src/server/json_schema_grammar.cpp src/server/json_grammar_rules.cpp src/server/errors.cpp \
                  src/engine/grammar/grammar.cpp src/engine/grammar/matcher.cpp src/engine/grammar/token_trie.cpp \
                  src/engine/grammar/grammar_constraint.cpp src/tokenizer/utf8.cpp src/util/error.cpp
FUZZ_gguf_SRC = src/formats/gguf_reader.cpp src/formats/gguf_value.cpp src/formats/gguf_writer.cpp \
                src/model/config.cpp $(FUZZ_UTIL_SRC)
FUZZ_safetensors_config_SRC = src/formats/safetensors.cpp src/formats/hf_config.cpp src/model/config.cpp $(FUZZ_UTIL_SRC)
FUZZ_quant_config_SRC = src/formats/quant_config.cpp src/util/error.cpp
FUZZ_tokenizer_SRC = $(filter-out src/tokenizer/chat_template.cpp src/tokenizer/model_template.cpp \
                       src/tokenizer/stop_matcher.cpp,$(wildcard src/tokenizer/*.cpp)) src/formats/hf_config.cpp $(FUZZ_UTIL_SRC)
FUZZ_chat_template_SRC = src/tokenizer/chat_template.cpp $(wildcard src/tokenizer/jinja/*.cpp) src/tokenizer/utf8.cpp \
                         src/formats/hf_config.cpp $(FUZZ_UTIL_SRC)
FUZZ_reply_stream_SRC = src/server/reasoning.cpp $(wildcard src/server/tool_calls*.cpp) \
                        src/server/errors.cpp src/tokenizer/utf8.cpp src/util/error.cpp
# Per harness: fuzz/<name>.dict, when present, is its libFuzzer dictionary; FUZZ_PCT_<name> scales FUZZ_RUNS for harnesses slower per input (percent), FUZZ_MAXLEN_<name>
# raises the input size limit (default 8192) where the seeds are larger.
FUZZ_PCT_tokenizer = 20
FUZZ_PCT_chat_template = 30
FUZZ_PCT_reply_stream = 50
FUZZ_PCT_safetensors_config = 60
FUZZ_PCT_quant_config = 30
FUZZ_MAXLEN_tokenizer = 16384
FUZZ_PLAN = $(foreach h,$(FUZZ_NAMES),$(h):$(or $(FUZZ_PCT_$(h)),100):$(or $(FUZZ_MAXLEN_$(h)),8192))

$(FUZZ_DIR)/obj/%.o: %.cpp
	@mkdir -p $(dir $@)
	$(FUZZ_CXX) -MMD -MP -c $< -o $@

define FUZZ_BIN
$(FUZZ_DIR)/$(1)_fuzz: $$(patsubst %.cpp,$(FUZZ_DIR)/obj/%.o,fuzz/$(1)_fuzz.cpp $$(sort $$(FUZZ_$(1)_SRC)))
	$$(FUZZ_CXX) $$^ $(FUZZ_LIBS) -o $$@
endef
$(foreach h,$(FUZZ_NAMES),$(eval $(call FUZZ_BIN,$(h))))
-include $(shell find $(FUZZ_DIR)/obj -name '*.d' 2>/dev/null)

fuzz-build: $(foreach h,$(FUZZ_NAMES),$(FUZZ_DIR)/$(h)_fuzz)

# The GGUF harness's seeds are the heads (first 8 KiB, the inputs' length limit) of the shared GGUF
# fixtures, taken at run time: model files stay in FT_SHARED_DIR, never in the repository.
fuzz:
	$(MAKE) -j$(JOBS) fuzz-build
	rm -rf $(FUZZ_DIR)/seeds-gguf && mkdir -p $(FUZZ_DIR)/seeds-gguf
	for f in $(FT_SHARED_DIR)/fixtures/gguf/*/*.gguf; do [ -f "$$f" ] && head -c 8192 "$$f" > $(FUZZ_DIR)/seeds-gguf/$$(basename "$$f"); done; true
	for plan in $(FUZZ_PLAN); do \
	  h=$${plan%%:*}; rest=$${plan#*:}; pct=$${rest%%:*}; maxlen=$${rest#*:}; \
	  if [ -n "$(FUZZ_RUNS)" ]; then dir=$(FUZZ_DIR)/fixed-$$h; rm -rf $$dir; len="-runs=$$(( $(FUZZ_RUNS) * pct / 100 )) -seed=1"; \
	  else dir=$(FUZZ_DIR)/corpus-$$h; len="-max_total_time=$(FUZZ_S)"; fi; \
	  mkdir -p $$dir && \
	  dict=; if [ -f fuzz/$$h.dict ]; then dict=-dict=fuzz/$$h.dict; fi; \
	  $(FUZZ_DIR)/$${h}_fuzz $$len $$dict -max_len=$$maxlen -rss_limit_mb=2048 -timeout=10 $$dir \
	    $$(for d in fuzz/corpus/$$h $(FUZZ_DIR)/seeds-$$h; do [ -d $$d ] && echo $$d; done) > $(FUZZ_DIR)/$$h.log 2>&1; rc=$$?; \
	  echo "fuzz $$h: $$(grep -E '^Done' $(FUZZ_DIR)/$$h.log)"; \
	  if [ $$rc -ne 0 ]; then tail -40 $(FUZZ_DIR)/$$h.log; exit 1; fi; \
	done

# GPU tests only: every test named Cuda* (the Cuda* suites and the .../Cuda instances of the op
# tests, in the folders of the subsystems they test); they fail (rather than skip) when no device is present.
test-gpu: gpu-check build
	cd $(BUILD) && FT_REQUIRE_GPU=1 ctest --output-on-failure -R Cuda

# Before the build, so a machine without a GPU hears it at once.
gpu-check:
	@nvidia-smi -L >/dev/null 2>&1 || { echo "test-gpu: no NVIDIA GPU is visible (nvidia-smi -L fails); these tests need one (make test runs the rest)"; exit 1; }

# The soak (tests/soak/soak.mjs): `ft serve` on the demo model and the qwen3_moe fixture under
# SOAK_CLIENTS (default 24) clients for SOAK_MIN minutes (default 10; 60 for the record in
# bench/RESULTS.md): mixed routes, streams cut, malformed bodies; fails on an unexpected reply, work or
# pages left after the drain, or RSS growth past SOAK_RSS_MIB (64) after warm-up.
SOAK_MIN ?= 10
FT_SHARED_DIR ?= ../shared
soak: build
	SOAK_MIN=$(SOAK_MIN) node tests/soak/soak.mjs ./$(BUILD)/ft $(FT_SHARED_DIR)

serve: build
	./$(BUILD)/ft serve $(ARGS)

# Without ARGS: a 4-layer model of qwen3-30b-a3b's shapes in q4_k (synthetic weights, ~13 s on 2 CPU
# cores); pass ARGS="--model PATH" or ARGS="--model-preset NAME --dummy-weights ..." for others.
BENCH_DEFAULT_ARGS = --model-preset qwen3-30b-a3b --dummy-weights --weight-type q4_k --dummy-layers 4
bench: build
	./$(BUILD)/ft bench $(if $(strip $(ARGS)),$(ARGS),$(BENCH_DEFAULT_ARGS))

clean:
	rm -rf $(BUILD) $(BUILD_ASAN)
