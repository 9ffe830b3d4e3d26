// CUDA vs CPU matmul for every weight dtype the CUDA kernels decode (cuda_weight_types_under_test:
// GGUF's float, legacy, K-, I-, ternary and FP4 types and FreeToken's FP8 forms), over token counts that take
// each path: GEMV for 1 token, the 8-token GEMV, two GEMV passes (quantized, T = 16), and the
// cuBLAS path (T = 9 for BF16, T = 70 for all: decoded tiles + cuBLAS for quantized weights).
#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaMatmul : public GpuTest {
 protected:
  /** Runs y = x W^T (+ bias) on both backends and returns the rel L2 error of the GPU result. */
  double run(DType wdt, int64_t T, int64_t N, int64_t K, bool bias, uint32_t seed, DType act = DType::BF16) {
    const auto x = rand_bf16(static_cast<size_t>(T * K), seed);
    const auto w = random_weight(wdt, N, K, seed + 1);
    const auto b = rand_bf16(static_cast<size_t>(N), seed + 2);
    std::vector<float> ref(static_cast<size_t>(T * N));
    cpu().matmul(arena().host_f32(x, {T, K}), arena().host_bytes(w, wdt, {N, K}),
                 Tensor(ref.data(), DType::F32, {T, N}), bias ? arena().host_f32(b, {N}) : Tensor());
    Tensor y = arena().dev_poisoned(act, {T, N});
    gpu().matmul(arena().dev_from(x, act, {T, K}), arena().dev_bytes(w, wdt, {N, K}), y,
                 bias ? arena().dev_from(b, DType::BF16, {N}) : Tensor());
    return compare(y, ref);
  }
};

TEST_F(CudaMatmul, EveryWeightTypeEveryPath) {
  uint32_t seed = 1000;
  for (DType dt : cuda_weight_types_under_test()) {  // K = 512: whole blocks of every type
    for (int64_t T : {1, 5, 8, 9, 16, 70}) {
      const bool bias = T % 2 == 1;
      const double e = run(dt, T, 100, 512, bias, seed += 3);
      report("matmul", std::string(dtype_name(dt)) + " T=" + std::to_string(T) + " [100x512]" + (bias ? " +b" : ""),
             e);
      EXPECT_LE(e, kTol) << dtype_name(dt) << " T=" << T;
    }
  }
}

TEST_F(CudaMatmul, SmallAndOddShapes) {
  struct Case {
    DType dt;
    int64_t T, N, K;
  };
  const Case cases[] = {{DType::BF16, 37, 64, 96},   {DType::BF16, 1, 512, 64},  {DType::BF16, 130, 512, 64},
                        {DType::F32, 3, 33, 12},     {DType::F16, 21, 7, 48},    {DType::Q8_0, 130, 96, 64},
                        {DType::Q4_K, 3, 1, 256},    {DType::Q6_K, 40, 5, 768},  {DType::BF16, 4, 3000, 2048},
                        // the dp4a GEMV's layouts for decode shapes: 4 rows per warp with 2 warps per row
                        // (q/k/v of qwen3-30b-a3b), 4 warps per row (its o-proj), several tokens per pass
                        {DType::Q4_K, 1, 5120, 2048}, {DType::Q4_K, 2, 5120, 2048}, {DType::Q4_K, 1, 2048, 4096},
                        {DType::Q8_0, 1, 4100, 1024},
                        // FP8 rows of 16k values (F8_E4M3_B16, 16-value chunks) on the GEMV and the cuBLAS path
                        {DType::F8_E4M3_B16, 1, 40, 48}, {DType::F8_E4M3_B16, 6, 40, 48},
                        {DType::F8_E4M3_B16, 70, 40, 80}, {DType::F8_E4M3_B32, 3, 4100, 96},
                        // NVFP4 rows of 16k values (NVFP4_G16, 16-value chunks) and of a few 64-blocks
                        {DType::NVFP4_G16, 1, 40, 48}, {DType::NVFP4_G16, 6, 40, 48},
                        {DType::NVFP4_G16, 70, 40, 80}, {DType::NVFP4_G64, 3, 4100, 128},
                        {DType::NVFP4_G64, 70, 33, 192},
                        // the 64- and 128-value blocks with a row of few blocks, and a large decode shape
                        {DType::NVFP4, 2, 33, 64}, {DType::Q1_0, 1, 17, 128}, {DType::Q2_0, 20, 9, 64},
                        {DType::IQ2_XXS, 1, 2048, 1024}, {DType::IQ1_M, 1, 300, 256}, {DType::TQ1_0, 3, 5, 256}};
  uint32_t seed = 2000;
  for (const Case& c : cases) {
    const double e = run(c.dt, c.T, c.N, c.K, c.T % 2 == 0, seed += 3);
    report("matmul", std::string(dtype_name(c.dt)) + " T=" + std::to_string(c.T) + " [" + std::to_string(c.N) + "x" +
                         std::to_string(c.K) + "]",
           e);
    EXPECT_LE(e, kTol) << dtype_name(c.dt) << " T=" << c.T << " N=" << c.N << " K=" << c.K;
  }
}

TEST_F(CudaMatmul, F32Activations) {
  // F32 x and y (CudaOps with F32 activations): the GEMV reads x exactly, cuBLAS after a bf16 copy.
  uint32_t seed = 3000;
  for (DType dt : {DType::BF16, DType::Q4_K, DType::Q8_0, DType::F16})
    for (int64_t T : {1, 3, 20}) {
      const double e = run(dt, T, 64, 256, T == 3, seed += 3, DType::F32);
      report("matmul", std::string(dtype_name(dt)) + " T=" + std::to_string(T) + " f32 x/y", e);
      // exact (fp32 rounding) for float weights; Q4_K/Q8_0 go through int8 activations (gemv_q8.cu)
      const bool float_w = dt == DType::BF16 || dt == DType::F16;
      EXPECT_LE(e, float_w ? 2e-5 : kTol) << dtype_name(dt) << " T=" << T;
    }
}

TEST_F(CudaMatmul, GreedyArgmaxOfLogitsMatches) {
  // An LM-head-like product: the argmax of every row equals the CPU's where the top-2 margin is large.
  const int64_t T = 12, N = 2000, K = 256;
  const auto x = rand_bf16(static_cast<size_t>(T * K), 77);
  const auto w = random_weight(DType::BF16, N, K, 78);
  std::vector<float> ref(static_cast<size_t>(T * N));
  cpu().matmul(arena().host_f32(x, {T, K}), arena().host_bytes(w, DType::BF16, {N, K}),
               Tensor(ref.data(), DType::F32, {T, N}), Tensor());
  Tensor y = arena().dev_poisoned(DType::F32, {T, N});
  gpu().matmul(arena().dev_from(x, DType::BF16, {T, K}), arena().dev_bytes(w, DType::BF16, {N, K}), y, Tensor());
  const auto got = arena().read(y);
  int checked = 0;
  for (int64_t t = 0; t < T; ++t) {
    const float* r = ref.data() + t * N;
    int64_t best = 0, second = -1;
    for (int64_t n = 1; n < N; ++n) {
      if (r[n] > r[best]) second = best, best = n;
      else if (second < 0 || r[n] > r[second]) second = n;
    }
    if (r[best] - r[second] < 0.1f) continue;
    ++checked;
    int64_t gbest = 0;
    for (int64_t n = 1; n < N; ++n)
      if (got[static_cast<size_t>(t * N + n)] > got[static_cast<size_t>(t * N + gbest)]) gbest = n;
    EXPECT_EQ(gbest, best) << "row " << t;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace ft::testing
