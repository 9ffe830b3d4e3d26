// The memory plan counts the CUDA backend's scratch (Ops::workspace_bytes) against
// --gpu-memory-limit before the expert cache takes the rest: after the largest prefill step the
// engine allows (one prompt of max_step_tokens rows), batched decode and a mixed step, every scratch
// region CudaOps allocated fits inside the estimate, for dense, MoE, MLA and linear-attention models
// in F32 and BF16. (Before the estimate, a 24 GiB limit ran 26.6 GiB at an 8k prefill of
// qwen3-next-80b-a3b: the MoE's gathered rows were not counted.)
#include <random>

#ifdef FT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif
#include "engine/generate.h"
#include "formats/checkpoint.h"
#include "backend/op_harness.h"
#include "model/fixture_util.h"

namespace ft::testing {
namespace {

class CudaWorkspace : public ::testing::TestWithParam<std::tuple<const char*, DType>> {};

TEST_P(CudaWorkspace, ScratchStaysInsideTheEstimate) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
#ifdef FT_HAVE_CUDA
  const std::string model = std::get<0>(GetParam());
  const DType act = std::get<1>(GetParam());
  const std::string dir = shared_dir() + "/fixtures/hf/" + model;
  EngineOptions o = small_engine_options();
  o.max_step_tokens = 512;
  o.max_seqs = 8;
  Engine gpu(open_checkpoint(dir), make_cuda_ops(0, act), o);
  auto& cuda = dynamic_cast<CudaOps&>(gpu.ops());
  const int64_t V = gpu.config().n_vocab;
  std::mt19937 rng(7);
  auto prompt = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    return ids;
  };
  GenerateOptions go;
  go.max_prefill_tokens = o.max_step_tokens;
  generate(gpu, {greedy_request(prompt(o.max_step_tokens), 4)}, go);  // one full-size prefill step
  std::vector<GenerateRequest> batch;
  for (int i = 0; i < o.max_seqs; ++i) batch.push_back(greedy_request(prompt(40 + 7 * i), 12));
  generate(gpu, batch, go);  // packed prefills, then decode of 8 sequences
  gpu.ops().synchronize();
  const int64_t used = cuda.scratch_bytes(), estimate = cuda.workspace_bytes(gpu.workspace_shape());
  std::printf("[workspace] %-14s %-4s scratch %8.1f MiB, estimate %8.1f MiB\n", model.c_str(),
              act == DType::F32 ? "f32" : "bf16", used / 1048576.0, estimate / 1048576.0);
  EXPECT_GT(used, 0);
  EXPECT_LE(used + CudaOps::kCublasWorkspaceBytes, estimate);
#endif
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaWorkspace,
                         ::testing::Combine(::testing::Values("llama", "qwen3_moe", "deepseek_v3", "gpt_oss",
                                                              "qwen3_next", "qwen3_5_moe"),
                                            ::testing::Values(DType::F32, DType::BF16)));

}  // namespace
}  // namespace ft::testing
