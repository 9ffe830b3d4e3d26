// CUDA vs CPU: head_matmul (one matmul per head over strided head slices, MLA's absorbed W_UK / W_UV)
// with F32, F16 and BF16 weights, F32 and BF16 activations, on the GEMV path (up to 16 tokens, and
// F16 weights at any T), cuBLAS strided-batched bf16 and SGEMM, DeepSeek-V3's and DeepSeek-V4-Flash's
// shapes included (K 4096: fewer tokens a GEMV block). With
// F32 activations every path keeps fp32-level accuracy: 1e-5 (x is not bf16-exact in the F32 cases, so
// the cuBLAS path's split of x into two bf16 halves is exercised); BF16 outputs: kTol.
#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

class CudaHeadMatmul : public GpuTest {};

TEST_F(CudaHeadMatmul, MatchesCpu) {
  struct Case {
    int64_t T, H, N, K;
    DType w, act;
  };
  const DType F = DType::F32, H16 = DType::F16, B = DType::BF16;
  const Case cases[] = {
      {1, 128, 512, 128, B, F},   // V3 W_UK^T absorbed into the query, decode
      {1, 128, 128, 512, B, B},   // V3 W_UV after attention, decode
      {5, 16, 128, 512, F, F},    {16, 16, 512, 128, H16, F}, {3, 4, 16, 8, H16, B},
      {37, 16, 512, 128, B, F},   // cuBLAS bf16 (x split into two bf16 halves)
      {40, 8, 64, 32, B, B},      // cuBLAS bf16
      {40, 8, 64, 32, F, F},      // SGEMM
      {37, 4, 24, 12, H16, F},    // GEMV in token groups
      {20, 3, 10, 10, F, B},      // K % 4 != 0: one element per lane
      {300, 16, 128, 512, B, B},  // prefill-sized
      // DeepSeek-V4-Flash's grouped output LoRA (o_groups 8, o_lora_rank 1024, K = 64 x 512 / 8): the GEMV
      // at 12 tokens a block (K above 3072), then cuBLAS past 16 tokens
      {1, 8, 1024, 4096, B, B},   {5, 8, 1024, 4096, B, F}, {16, 8, 1024, 4096, F, F}, {13, 2, 64, 4096, H16, B},
      {40, 8, 1024, 4096, B, B},  {30, 2, 64, 4096, H16, F},  // F16: the GEMV in three token groups
      {2, 2, 8, 49152, B, B},     // one token a block
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const int64_t HK = c.H * c.K, HN = c.H * c.N;
    std::vector<float> x = rand_bf16(static_cast<size_t>(c.T * HK), seed++);
    if (c.act == F)  // values bf16 cannot hold: F32 activations must not be rounded on the way
      for (size_t i = 0; i < x.size(); ++i) x[i] += 1e-3f * static_cast<float>(static_cast<int>(i % 7) - 3) / 7.0f;
    const auto wb = random_weight(c.w, c.H * c.N, c.K, seed++);
    std::vector<float> ref(static_cast<size_t>(c.T * HN));
    cpu().head_matmul(arena().host_f32(x, {c.T, HK}), arena().host_bytes(wb, c.w, {c.H, c.N, c.K}),
                      Tensor(ref.data(), DType::F32, {c.T, HN}));
    Tensor y = arena().dev_poisoned(c.act, {c.T, HN});
    gpu().head_matmul(arena().dev_from(x, c.act, {c.T, HK}), arena().dev_bytes(wb, c.w, {c.H, c.N, c.K}), y);
    const double e = compare(y, ref);
    const std::string what = "T=" + std::to_string(c.T) + " H=" + std::to_string(c.H) + " N=" + std::to_string(c.N) +
                             " K=" + std::to_string(c.K) + " w " + dtype_name(c.w) + " act " + dtype_name(c.act);
    report("head_matmul", what, e);
    EXPECT_LE(e, c.act == F ? 1e-5 : kTol) << what;
  }
}

TEST_F(CudaHeadMatmul, RejectsBadArguments) {
  const Tensor x = arena().dev(DType::F32, {2, 4 * 8}), w = arena().dev(DType::BF16, {4, 6, 8});
  Tensor y = arena().dev(DType::F32, {2, 4 * 6});
  EXPECT_THROW(gpu().head_matmul(x, arena().dev(DType::BF16, {4, 6, 7}), y), Error);  // x is not H * K
  EXPECT_THROW(gpu().head_matmul(x, w, arena().dev(DType::F32, {2, 4 * 5})), Error);  // y is not H * N
  EXPECT_THROW(gpu().head_matmul(x, arena().dev(DType::Q8_0, {4, 6, 32}), arena().dev(DType::F32, {2, 4 * 6})),
               Error);  // weight dtype (and shape)
  gpu().head_matmul(x, w, y);  // the good call runs
  gpu().synchronize();
}

}  // namespace
}  // namespace ft::testing
