// Weight types and the CUDA engine's load-time checks. Every matrix type the CPU reads now has a CUDA
// kernel, so the engine's CUDA-specific refusals (WeightLoader::check_device_kernel for dense weights,
// check_gpu_expert_types for experts) have no readable type left to refuse: the first test pins that
// invariant, so a type added to the CPU without a CUDA kernel fails here until it gets one (or the
// refusal is exercised again). A type no backend reads (Q8_1, ggml's intermediate type) is refused at
// load naming the tensor, dense or expert, never at the first request; and a file with Q2_0 matrices
// (refused on CUDA before its kernel existed) now loads and generates under each MoE strategy. The
// file is the qwen3_moe Q8_0 fixture with one matrix rewritten.
#include <algorithm>
#include <filesystem>

#include "backend/cuda_weight_types.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "backend/op_harness.h"
#include "model/fixture_util.h"
#include "quant/quant.h"

namespace ft::testing {
namespace {

/** The fixture with tensor `name` stored as `dt` (random valid blocks), at a per-test path. */
std::string with_type(const std::string& name, DType dt) {
  const std::string src = shared_dir() + "/fixtures/gguf/qwen3_moe/qwen3_moe-q8_0.gguf";
  const std::string out = scratch_path(std::string(dtype_name(dt)) + "_" + name + ".gguf");
  const GgufReader r(src);
  GgufWriter w;
  for (const GgufKV& kv : r.kvs()) w.add(kv.key, kv.value);
  bool found = false;
  for (const GgufTensor& t : r.tensors()) {
    if (t.info.name != name) {
      w.add_tensor(t.info.name, t.info.dtype, t.info.shape, t.info.data, t.info.bytes);
      continue;
    }
    found = true;
    const int64_t cols = t.info.shape.back(), rows = t.info.numel() / cols;
    std::vector<uint8_t> bytes;
    if (dt == DType::Q8_1) bytes.assign(static_cast<size_t>(dtype_bytes(dt, t.info.numel())), 0);
    else bytes = random_weight(dt, rows, cols, 17);
    w.add_tensor(name, dt, t.info.shape, bytes.data(), static_cast<int64_t>(bytes.size()));
  }
  EXPECT_TRUE(found) << name;
  w.write(out);
  return out;
}

class CudaWeightTypeLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible";
    }
  }
  /** The load error of `file` on the CUDA engine under `strategy` ("" if it loads). */
  static std::string error_of(const std::string& file, MoeStrategy strategy, ErrorCode* code = nullptr) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    try {
      Engine e(open_checkpoint(file), make_cuda_ops(0, DType::F32), o);
    } catch (const Error& err) {
      if (code) *code = err.code();
      return err.what();
    }
    return "";
  }
};

TEST(CudaWeightTypeList, EveryMatrixTypeTheCpuReadsHasACudaKernel) {
  // Host-side lists only: runs in any build with the CUDA backend, device or not.
  if (cuda_weight_kernel_types().empty()) GTEST_SKIP() << "this build has no CUDA backend";
  std::vector<DType> types = {DType::F8_E4M3_B32, DType::F8_E4M3_B16, DType::NVFP4_G64, DType::NVFP4_G16};
  for (uint32_t id = 0; id < 64; ++id) {
    try {
      types.push_back(dtype_from_gguf_id(id));
    } catch (const Error&) {  // a removed or unknown id
    }
  }
  int quantized = 0;
  for (DType t : types) {
    if (!dtype_info(t).is_quantized || !can_dequantize(t)) continue;
    ++quantized;
    EXPECT_TRUE(cuda_has_weight_kernel(t)) << dtype_name(t) << " is read on the CPU but has no CUDA kernel";
  }
  EXPECT_GE(quantized, 29);  // the 25 GGUF block types quant/ dequantizes, the two FP8 and two NVFP4 forms
  EXPECT_FALSE(cuda_has_weight_kernel(DType::Q8_1));
  EXPECT_FALSE(cuda_has_weight_kernel(DType::Q8_K));
  EXPECT_FALSE(cuda_has_weight_kernel(DType::EC12));  // the expert banks' own form: read by its own code only
}

TEST_F(CudaWeightTypeLoad, ATypeNoBackendReadsIsRefusedAtLoadByName) {
  for (const char* name : {"blk.1.attn_q.weight", "blk.0.ffn_gate_exps.weight"}) {
    const std::string file = with_type(name, DType::Q8_1);
    for (MoeStrategy s : {MoeStrategy::kFused, MoeStrategy::kCpu}) {
      ErrorCode code = ErrorCode::kInternal;
      const std::string e = error_of(file, s, &code);
      EXPECT_EQ(code, ErrorCode::kInvalidFile) << e;
      EXPECT_NE(e.find(name), std::string::npos) << e;
      EXPECT_NE(e.find("Q8_1"), std::string::npos) << e;
    }
    std::filesystem::remove(file);
  }
}

TEST_F(CudaWeightTypeLoad, Q2_0MatricesLoadAndRunUnderEveryStrategy) {
  for (const char* name : {"blk.1.attn_q.weight", "blk.0.ffn_gate_exps.weight"}) {
    const std::string file = with_type(name, DType::Q2_0);
    for (MoeStrategy s : {MoeStrategy::kFused, MoeStrategy::kOffload, MoeStrategy::kCpu}) {
      EngineOptions o = small_engine_options();
      o.moe.strategy = s;
      if (s == MoeStrategy::kOffload) o.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};  // 2 x 8 experts: misses
      Engine e(open_checkpoint(file), make_cuda_ops(0, DType::F32), o);
      const GenerateResult r = generate(e, {greedy_request({1, 2, 3, 4}, 4)})[0];
      EXPECT_EQ(r.tokens.size(), 4u) << name;
    }
    std::filesystem::remove(file);
  }
}

}  // namespace
}  // namespace ft::testing
