// A GGUF whose weights include a type no CUDA kernel reads (here Q2_0) is refused when the CUDA
// engine loads it, naming the tensor (dense weights) or the MoE layer (experts) and what would run
// it, instead of starting and failing every request; experts of that type run under
// --moe-strategy cpu. The file is the qwen3_moe Q8_0 fixture with one matrix rewritten as Q2_0.
#include <algorithm>
#include <filesystem>

#include "backend/cuda_weight_types.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "gpu_harness.h"
#include "model/fixture_util.h"

namespace ft::testing {
namespace {

/** The fixture with tensor `name` stored as Q2_0 (zero blocks), at a per-test path. */
std::string with_q2_0(const std::string& name) {
  const std::string src = shared_dir() + "/fixtures/gguf/qwen3_moe/qwen3_moe-q8_0.gguf";
  const std::string out = ::testing::TempDir() + "/ft_q2_0_" + name + ".gguf";
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
    const std::vector<uint8_t> zeros(static_cast<size_t>(dtype_bytes(DType::Q2_0, t.info.numel())), 0);
    w.add_tensor(name, DType::Q2_0, t.info.shape, zeros.data(), static_cast<int64_t>(zeros.size()));
  }
  EXPECT_TRUE(found) << name;
  w.write(out);
  return out;
}

class CudaUnsupportedType : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible";
    }
    ASSERT_FALSE(cuda_has_weight_kernel(DType::Q2_0));
  }
  static std::string error_of(const std::string& file, MoeStrategy strategy) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    try {
      Engine e(open_checkpoint(file), make_cuda_ops(0, DType::F32), o);
    } catch (const Error& err) {
      EXPECT_EQ(err.code(), ErrorCode::kUnsupported) << err.what();
      return err.what();
    }
    return "";
  }
};

TEST_F(CudaUnsupportedType, ADenseWeightIsRefusedAtLoadByName) {
  const std::string file = with_q2_0("blk.1.attn_q.weight");
  const std::string e = error_of(file, MoeStrategy::kAuto);
  EXPECT_NE(e.find("blk.1.attn_q.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("Q2_0"), std::string::npos) << e;
  EXPECT_NE(e.find("--device cpu"), std::string::npos) << e;
  std::filesystem::remove(file);
}

TEST_F(CudaUnsupportedType, ExpertsAreRefusedOnTheGpuAndRunOnTheCpu) {
  const std::string file = with_q2_0("blk.0.ffn_gate_exps.weight");
  for (MoeStrategy s : {MoeStrategy::kFused, MoeStrategy::kOffload}) {
    const std::string e = error_of(file, s);
    EXPECT_NE(e.find("MoE layer 0"), std::string::npos) << e;
    EXPECT_NE(e.find("--moe-strategy cpu"), std::string::npos) << e;
  }
  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kCpu;
  Engine e(open_checkpoint(file), make_cuda_ops(0, DType::F32), o);
  const GenerateResult r = generate(e, {greedy_request({1, 2, 3, 4}, 4)})[0];
  EXPECT_EQ(r.tokens.size(), 4u);
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace ft::testing
