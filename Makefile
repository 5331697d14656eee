# The two commands a user needs: `make demo` and `make test`.
BUILD_DIR ?= build
ASAN_DIR  ?= build-asan
JOBS      ?= $(shell nproc)
ASAN_TESTS = test_core test_io test_model
DEMO_MODEL ?= tests/fixtures/llama_gqa_f32

.PHONY: deps build test test-asan demo bench clean

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/build.ninja: CMakeLists.txt
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

test: build test-asan
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)

# Input validation (safetensors, config.json) and the kernels run again under ASan + UBSan.
test-asan: deps
	cmake -S . -B $(ASAN_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLATENTSERVE_SANITIZE=ON -DLATENTSERVE_CUDA=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS) --target $(ASAN_TESTS)
	set -e; for t in $(ASAN_TESTS); do $(ASAN_DIR)/$$t --gtest_brief=1; done

demo: build
	@echo "== latentserve generate on the bundled $(DEMO_MODEL) =="
	$(BUILD_DIR)/latentserve generate --model $(DEMO_MODEL) --tokens 1,15,27,8,42 --max-tokens 16
	@echo "== logits agree with Hugging Face transformers? (GQA, then DeepSeek-V3 MLA + MoE) =="
	$(BUILD_DIR)/latentserve check --model $(DEMO_MODEL)
	$(BUILD_DIR)/latentserve check --model tests/fixtures/deepseek_v3_f32
	@echo "== what would Llama-3-70B cost on 8 x H100 at 8K context, batch 32? =="
	$(BUILD_DIR)/latentserve plan --preset llama3-70b --gpu h100 --tp 8 --context 8192 --batch 32

bench: build
	$(BUILD_DIR)/bench_cpu_decode

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR)
