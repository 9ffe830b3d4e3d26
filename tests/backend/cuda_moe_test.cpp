// CUDA vs CPU moe_experts: decode path (per-pair fused GEMVs through the device pointer table) and
// prefill path (pairs sorted by expert, per-expert GEMMs), several weight dtypes (mixed per matrix
// kind too; every type of cuda_weight_types_under_test as experts), skipped slots (id -1), accumulate,
// DeepSeek-V4's clamped SwiGLU (ExpertGlu::kSwigluClamp) on every path, and a bank whose views are re-pointed between calls (the pointer table must follow, as the expert
// cache will require).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaMoe : public GpuTest {
 protected:
  struct Banks {
    ExpertBank cpu, gpu;
  };

  /** Stacked [E, rows, cols] weights on both backends, exposed as per-expert views. */
  void stack(DType dt, int64_t E, int64_t rows, int64_t cols, uint32_t seed, std::vector<Tensor>& cpu_views,
             std::vector<Tensor>& gpu_views) {
    const auto w = random_weight(dt, E * rows, cols, seed);
    Tensor h = arena().host_bytes(w, dt, {E, rows, cols});
    Tensor d = arena().dev_bytes(w, dt, {E, rows, cols});
    for (int64_t e = 0; e < E; ++e) cpu_views.push_back(h.index(e)), gpu_views.push_back(d.index(e));
  }

  Banks make_banks(DType gate, DType up, DType down, int64_t E, int64_t H, int64_t F, uint32_t seed) {
    Banks b;
    stack(gate, E, F, H, seed, b.cpu.gate, b.gpu.gate);
    stack(up, E, F, H, seed + 1, b.cpu.up, b.gpu.up);
    stack(down, E, H, F, seed + 2, b.cpu.down, b.gpu.down);
    return b;
  }

  /** rel L2 of the CUDA moe_experts against the CPU's on random inputs; the CUDA output's values in
   *  *got when given. */
  double run(const Banks& b, int64_t T, int32_t k, bool accumulate, uint32_t seed, DType act = DType::BF16,
             std::vector<float>* got = nullptr) {
    const int64_t H = b.cpu.gate[0].dim(1), E = b.cpu.n_expert();
    const auto x = rand_bf16(static_cast<size_t>(T * H), seed);
    const auto w = rand_bf16(static_cast<size_t>(T * k), seed + 1, 0.1f, 1.0f);
    std::mt19937 rng(seed + 2);
    std::vector<int32_t> ids(static_cast<size_t>(T * k));
    std::vector<int32_t> perm(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int32_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = perm[static_cast<size_t>(j)];
      if (t % 3 == 1) ids[static_cast<size_t>(t * k + (t % k))] = -1;  // computed elsewhere
    }
    const auto init = rand_bf16(static_cast<size_t>(T * H), seed + 3);
    MoeExpertsParams p;
    p.accumulate = accumulate;
    std::vector<float> ref = init;
    cpu().moe_experts(p, arena().host_f32(x, {T, H}), arena().host_i32(ids, {T, k}), arena().host_f32(w, {T, k}), b.cpu,
                      Tensor(ref.data(), DType::F32, {T, H}));
    Tensor out = accumulate ? arena().dev_from(init, act, {T, H}) : arena().dev_poisoned(act, {T, H});
    gpu().moe_experts(p, arena().dev_from(x, act, {T, H}), arena().dev_i32(ids, {T, k}),
                      arena().dev_from(w, DType::F32, {T, k}), b.gpu, out);
    if (got) *got = arena().read(out);
    return compare(out, ref);
  }
};

TEST_F(CudaMoe, DecodeAndPrefillPathsAcrossDtypes) {
  struct Case {
    DType gate, up, down;
  };
  const Case cases[] = {{DType::BF16, DType::BF16, DType::BF16},
                        {DType::Q8_0, DType::Q8_0, DType::Q8_0},
                        {DType::Q4_K, DType::Q4_K, DType::Q6_K},
                        {DType::Q4_0, DType::Q8_0, DType::BF16},
                        {DType::MXFP4, DType::MXFP4, DType::MXFP4}};
  const int64_t E = 16, H = 256, F = 512;
  const int32_t k = 4;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Banks b = make_banks(c.gate, c.up, c.down, E, H, F, seed += 10);
    for (int64_t T : {1, 5, 32, 50, 130}) {
      const bool acc = T == 5 || T == 130;
      const double e = run(b, T, k, acc, seed += 5);
      const std::string what = std::string(dtype_name(c.gate)) + "/" + dtype_name(c.up) + "/" + dtype_name(c.down) +
                               " T=" + std::to_string(T) + (T <= 32 ? " decode" : " prefill") + (acc ? " +=" : "");
      report("moe_experts", what, e);
      EXPECT_LE(e, kTol) << what;
    }
  }
}

TEST_F(CudaMoe, EveryWeightTypeAsExperts) {
  // Each type of cuda_weight_types_under_test as gate and up (the fused GLU GEMV / grouped GEMM) and as
  // down (the next type's gate), through the decode GEMVs (T <= 32) and the grouped GEMM (prefill).
  const std::vector<DType>& types = cuda_weight_types_under_test();
  const int64_t E = 8, H = 256, F = 512;
  const int32_t k = 3;
  uint32_t seed = 500;
  for (size_t i = 0; i < types.size(); ++i) {
    const DType g = types[i], u = types[i], d = types[(i + 1) % types.size()];
    const Banks b = make_banks(g, u, d, E, H, F, seed += 10);
    for (int64_t T : {1, 4, 70}) {
      const bool acc = T == 4;
      const double e = run(b, T, k, acc, seed += 5);
      const std::string what = std::string(dtype_name(g)) + "/" + dtype_name(u) + "/" + dtype_name(d) +
                               " T=" + std::to_string(T) + (T <= 32 ? " decode" : " prefill") + (acc ? " +=" : "");
      report("moe_experts", what, e);
      EXPECT_LE(e, kTol) << what;
    }
  }
}

TEST_F(CudaMoe, Fp8ExpertsWithRowsOfSixteenBlocks) {
  // F8_E4M3_B16 experts (rows 16k long): with H = 80 (not a multiple of 64) prefill takes the
  // per-expert GEMMs (matmul_raw: decoded tiles + cuBLAS); decode the 16-value-chunk GEMVs.
  const Banks b = make_banks(DType::F8_E4M3_B16, DType::F8_E4M3_B16, DType::F8_E4M3_B16, 6, 80, 192, 808);
  for (int64_t T : {1, 3, 40}) {
    const double e = run(b, T, 2, false, 809 + static_cast<uint32_t>(T));
    report("moe_experts", "F8_E4M3_B16 H=80 F=192 T=" + std::to_string(T), e);
    EXPECT_LE(e, kTol) << "T=" << T;
  }
}

TEST_F(CudaMoe, Nvfp4ExpertsWithRowsOfSixteenBlocks) {
  // NVFP4_G16 experts (rows 16k long, one 13-byte block per 16 values, so rows are not 4-byte
  // aligned): with H = 80 prefill takes the per-expert GEMMs, decode the 16-value-chunk GEMVs; then
  // NVFP4_G64 gate/up with NVFP4_G16 down (F = 208) through the grouped GEMM.
  const Banks b = make_banks(DType::NVFP4_G16, DType::NVFP4_G16, DType::NVFP4_G16, 6, 80, 192, 818);
  for (int64_t T : {1, 3, 40}) {
    const double e = run(b, T, 2, false, 819 + static_cast<uint32_t>(T));
    report("moe_experts", "NVFP4_G16 H=80 F=192 T=" + std::to_string(T), e);
    EXPECT_LE(e, kTol) << "T=" << T;
  }
  const Banks m = make_banks(DType::NVFP4_G64, DType::NVFP4_G64, DType::NVFP4_G16, 6, 128, 208, 828);
  for (int64_t T : {1, 70}) {
    const double e = run(m, T, 2, T == 1, 829 + static_cast<uint32_t>(T));
    report("moe_experts", "NVFP4_G64/G64/G16 H=128 F=208 T=" + std::to_string(T), e);
    EXPECT_LE(e, kTol) << "T=" << T;
  }
}

TEST_F(CudaMoe, F32Activations) {
  const Banks b = make_banks(DType::Q4_K, DType::Q4_K, DType::Q6_K, 16, 256, 512, 321);
  for (int64_t T : {2, 40}) {
    const double e = run(b, T, 4, T == 2, 77 + static_cast<uint32_t>(T), DType::F32);
    report("moe_experts", "Q4_K/Q4_K/Q6_K T=" + std::to_string(T) + " f32 x/out", e);
    EXPECT_LE(e, kTol);
  }
}

// The decode path's fusions (h's int8 form written by the gate/up GEMV, the weighted sum formed by the
// down GEMV: int8 lane groups or the decoding kernel, set_cuda_moe_fusion) give the bits of the
// separate launches, for
// 1 to 16 slots (the most a fused block holds) and 17 (unfused either way), with skipped slots.
TEST_F(CudaMoe, FusedDecodeEqualsSeparateLaunchesBitForBit) {
  struct Case {
    DType gate, up, down, act;
  };
  const Case cases[] = {{DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::BF16},
                        {DType::Q8_0, DType::Q8_0, DType::Q4_K, DType::F32},
                        {DType::Q4_0, DType::Q4_0, DType::Q8_0, DType::BF16},
                        {DType::BF16, DType::BF16, DType::BF16, DType::BF16},
                        {DType::F16, DType::F16, DType::BF16, DType::F32},
                        {DType::Q4_0, DType::Q8_0, DType::Q5_K, DType::BF16}};
  const int64_t E = 24, H = 512, F = 256;
  uint32_t seed = 500;
  for (const Case& c : cases) {
    const Banks b = make_banks(c.gate, c.up, c.down, E, H, F, seed += 10);
    for (int32_t k : {1, 2, 8, 16, 17}) {
      for (int64_t T : {1, 3, 32}) {
        const bool acc = T == 3;
        std::vector<float> fused, separate;
        set_cuda_moe_fusion(false);
        const double e0 = run(b, T, k, acc, seed, c.act, &separate);
        set_cuda_moe_fusion(true);
        const double e1 = run(b, T, k, acc, seed, c.act, &fused);
        const std::string what = std::string(dtype_name(c.gate)) + "/" + dtype_name(c.down) + " " +
                                 dtype_name(c.act) + " k=" + std::to_string(k) + " T=" + std::to_string(T) +
                                 (acc ? " +=" : "");
        EXPECT_LE(e0, kTol) << what;
        EXPECT_LE(e1, kTol) << what;
        ASSERT_EQ(fused.size(), separate.size());
        EXPECT_EQ(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)), 0) << what;
        seed += 3;
      }
    }
  }
}

// DeepSeek-V4's experts (ExpertGlu::kSwigluClamp: silu(min(g, limit)) * clamp(u, -limit, limit)) on every
// path: the decode GEMVs with the GLU in their epilogue (BF16; Q4_K/Q6_K's int8 lane groups with int8 h and
// the fused weighted sum), the unfused GLU kernel (gate and up of different dtypes), the grouped prefill
// GEMM (F = 512) and the per-expert GEMMs (F = 96), F32 and BF16 activations. gate and up have a standard
// deviation near 5 here (x, w uniform in [-1, 1), H = 256), so the limit 3 clamps most of them: the CPU's
// result with the clamp must differ from plain SwiGLU's, and the CUDA result must match the CPU's.
TEST_F(CudaMoe, ClampedSwigluExpertsMatchTheCpu) {
  struct Case {
    DType gate, up, down;
    int64_t F;
  };
  const Case cases[] = {{DType::BF16, DType::BF16, DType::BF16, 512},
                        {DType::Q4_K, DType::Q4_K, DType::Q6_K, 512},
                        {DType::Q8_0, DType::Q8_0, DType::Q8_0, 512},
                        {DType::Q4_K, DType::BF16, DType::Q8_0, 512},
                        {DType::BF16, DType::BF16, DType::BF16, 96},
                        {DType::Q4_K, DType::Q4_K, DType::Q8_0, 96}};  // down's K = 96: 32-value blocks
  const int64_t E = 16, H = 256;
  const int32_t k = 4;
  const float limit = 3.0f;
  uint32_t seed = 900;
  for (const Case& c : cases) {
    Banks b = make_banks(c.gate, c.up, c.down, E, H, c.F, seed += 10);
    const std::string what0 = std::string(dtype_name(c.gate)) + "/" + dtype_name(c.up) + "/" + dtype_name(c.down) +
                              " F=" + std::to_string(c.F);
    {  // the clamp bites: plain SwiGLU's CPU result differs (same inputs)
      const int64_t T = 4;
      const auto x = rand_bf16(static_cast<size_t>(T * H), seed + 1);
      const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
      const std::vector<float> w(static_cast<size_t>(T * k), 0.5f);
      std::vector<float> plain(static_cast<size_t>(T * H)), clamped(plain.size());
      cpu().moe_experts({}, arena().host_f32(x, {T, H}), arena().host_i32(ids, {T, k}), arena().host_f32(w, {T, k}),
                        b.cpu, Tensor(plain.data(), DType::F32, {T, H}));
      b.cpu.glu = ExpertGlu::kSwigluClamp, b.cpu.glu_limit = limit;
      cpu().moe_experts({}, arena().host_f32(x, {T, H}), arena().host_i32(ids, {T, k}), arena().host_f32(w, {T, k}),
                        b.cpu, Tensor(clamped.data(), DType::F32, {T, H}));
      ASSERT_GT(rel_l2(plain, clamped), 0.1) << what0 << ": the limit should clamp";
    }
    b.gpu.glu = ExpertGlu::kSwigluClamp, b.gpu.glu_limit = limit;
    for (const DType act : {DType::BF16, DType::F32}) {
      for (int64_t T : {1, 2, 4, 17, 32, 50, 130}) {
        const bool acc = T == 2 || T == 50;
        const double e = run(b, T, k, acc, seed += 5, act);
        const std::string what = what0 + " " + dtype_name(act) + " T=" + std::to_string(T) +
                                 (T <= 32 ? " decode" : " prefill") + (acc ? " +=" : "");
        report("moe_experts swiglu_clamp", what, e);
        EXPECT_LE(e, kTol) << what;
      }
    }
  }
}

// The decode fusions apply the clamped GLU as the separate launches do: the same bits.
TEST_F(CudaMoe, ClampedSwigluFusedDecodeEqualsSeparateLaunches) {
  const DType types[][3] = {{DType::Q4_K, DType::Q4_K, DType::Q6_K}, {DType::BF16, DType::BF16, DType::BF16}};
  const int64_t E = 24, H = 512, F = 256;
  uint32_t seed = 1200;
  for (const auto& t : types) {
    Banks b = make_banks(t[0], t[1], t[2], E, H, F, seed += 10);
    for (ExpertBank* bank : {&b.cpu, &b.gpu}) bank->glu = ExpertGlu::kSwigluClamp, bank->glu_limit = 4.0f;
    for (int32_t k : {1, 8}) {
      for (int64_t T : {1, 3}) {
        std::vector<float> fused, separate;
        set_cuda_moe_fusion(false);
        const double e0 = run(b, T, k, T == 3, seed, DType::BF16, &separate);
        set_cuda_moe_fusion(true);
        const double e1 = run(b, T, k, T == 3, seed, DType::BF16, &fused);
        const std::string what = std::string(dtype_name(t[0])) + "/" + dtype_name(t[2]) + " k=" + std::to_string(k) +
                                 " T=" + std::to_string(T);
        EXPECT_LE(e0, kTol) << what;
        EXPECT_LE(e1, kTol) << what;
        ASSERT_EQ(fused.size(), separate.size());
        EXPECT_EQ(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)), 0) << what;
        seed += 3;
      }
    }
  }
}

TEST_F(CudaMoe, RepointedBankViewsAreFollowed) {
  const int64_t E = 8, H = 64, F = 96;
  Banks b = make_banks(DType::BF16, DType::BF16, DType::BF16, E, H, F, 99);
  const double e1 = run(b, 4, 2, false, 7);
  EXPECT_LE(e1, kTol);
  // Re-point experts (as a cache would move them between slots): same bank object, new addresses.
  for (ExpertBank* bank : {&b.cpu, &b.gpu}) {
    std::reverse(bank->gate.begin(), bank->gate.end());
    std::rotate(bank->up.begin(), bank->up.begin() + 3, bank->up.end());
    std::swap(bank->down[0], bank->down[5]);
  }
  const double e2 = run(b, 4, 2, false, 7);
  report("moe_experts", "bank views re-pointed between calls", e2);
  EXPECT_LE(e2, kTol);
}

}  // namespace
}  // namespace ft::testing
