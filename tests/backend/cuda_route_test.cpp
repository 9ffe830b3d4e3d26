// CUDA vs CPU: topk (exact indices, including ties and NaN) and moe_route (exact expert ids,
// weights to fp32 rounding) for softmax and sigmoid scoring, with and without renormalisation, with a
// selection bias and group-limited routing (DeepSeek-V3, GLM-4.5, MiniMax-M2 shapes), on the warp and
// block kernels and the fused router.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

class CudaRoute : public GpuTest {};

/** Rows of distinct values: a random permutation of 0..C-1 times `step`, minus an offset. */
std::vector<float> distinct_rows(int64_t R, int64_t C, float step, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> v(static_cast<size_t>(R * C));
  std::vector<int> perm(static_cast<size_t>(C));
  for (int64_t r = 0; r < R; ++r) {
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int64_t c = 0; c < C; ++c)
      v[static_cast<size_t>(r * C + c)] = (static_cast<float>(perm[static_cast<size_t>(c)]) - C / 2) * step;
  }
  return v;
}

TEST_F(CudaRoute, TopkMatchesExactly) {
  struct Case {
    DType dt;
    int64_t R, C;
    int32_t k;
  };
  const Case cases[] = {{DType::BF16, 5, 8, 2},     {DType::BF16, 9, 128, 8},   {DType::F32, 3, 1000, 40},
                        {DType::F32, 2, 151936, 5}, {DType::F32, 64, 256, 1}};
  uint32_t seed = 1;
  for (const Case& c : cases) {
    auto x = distinct_rows(c.R, c.C, c.dt == DType::BF16 ? 1.0f : 0.001f, seed++);
    if (c.C >= 1000) {  // ties and a NaN: ties go to the lower index, NaN ranks last
      x[3] = x[1] = 1e6f;
      x[7] = std::nanf("");
    }
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.R * c.k));
    std::vector<float> ref_v(ref_ids.size());
    cpu().topk(arena().host_f32(x, {c.R, c.C}), c.k, Tensor(ref_ids.data(), DType::I32, {c.R, c.k}),
               Tensor(ref_v.data(), DType::F32, {c.R, c.k}));
    Tensor ids = arena().dev_poisoned(DType::I32, {c.R, c.k});
    Tensor vals = arena().dev_poisoned(DType::F32, {c.R, c.k});
    gpu().topk(arena().dev_from(x, c.dt, {c.R, c.C}), c.k, ids, vals);
    EXPECT_EQ(arena().read_i32(ids), ref_ids) << "R=" << c.R << " C=" << c.C << " k=" << c.k;
    const double e = compare(vals, ref_v);
    report("topk", std::string(dtype_name(c.dt)) + " [" + std::to_string(c.R) + "x" + std::to_string(c.C) +
                       "] k=" + std::to_string(c.k) + " ids exact",
           e);
    EXPECT_LE(e, 1e-6);
  }
}

TEST_F(CudaRoute, MaskRowsMatchesCpu) {
  const int64_t T = 37, k = 8;
  std::vector<int32_t> ids_v(T * k);
  for (size_t i = 0; i < ids_v.size(); ++i) ids_v[i] = static_cast<int32_t>(i % 61);
  for (int32_t n : {37, 36, 1, 0, 50}) {
    std::vector<int32_t> want = ids_v;
    cpu().moe_mask_rows(arena().host_i32({n}, {1}), Tensor(want.data(), DType::I32, {T, k}));
    Tensor ids = arena().dev_i32(ids_v, {T, k});
    gpu().moe_mask_rows(arena().dev_i32({n}, {1}), ids);
    EXPECT_EQ(arena().read_i32(ids), want) << "n_valid " << n;
  }
}

TEST_F(CudaRoute, MoeRouteMatches) {
  struct Case {
    RouterScoring scoring;
    bool norm;
    float scaling;
    int64_t T, E;
    int32_t k;
    DType dt;
  };
  const Case cases[] = {{RouterScoring::kSoftmax, true, 1.0f, 7, 8, 2, DType::F32},
                        {RouterScoring::kSoftmax, false, 1.0f, 40, 64, 8, DType::BF16},
                        {RouterScoring::kSigmoid, true, 2.5f, 5, 128, 8, DType::F32},
                        {RouterScoring::kSigmoid, false, 1.0f, 300, 60, 4, DType::BF16}};
  uint32_t seed = 50;
  for (const Case& c : cases) {
    // logits well separated (multiples of 1/16 fit bf16 exactly for |v| < 16)
    const auto x = distinct_rows(c.T, c.E, 1.0f / 16.0f, seed++);
    RouterParams p;
    p.n_expert_used = c.k, p.scoring = c.scoring, p.norm_topk_prob = c.norm, p.scaling = c.scaling;
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.T * c.k));
    std::vector<float> ref_w(ref_ids.size());
    cpu().moe_route(p, arena().host_f32(x, {c.T, c.E}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}),
                    Tensor(ref_w.data(), DType::F32, {c.T, c.k}));
    Tensor ids = arena().dev_poisoned(DType::I32, {c.T, c.k});
    Tensor w = arena().dev_poisoned(DType::F32, {c.T, c.k});
    gpu().moe_route(p, arena().dev_from(x, c.dt, {c.T, c.E}), ids, w);
    EXPECT_EQ(arena().read_i32(ids), ref_ids) << "E=" << c.E << " k=" << c.k;
    const double e = compare(w, ref_w);
    report("moe_route", std::string(c.scoring == RouterScoring::kSoftmax ? "softmax" : "sigmoid") +
                            (c.norm ? " norm" : "") + " T=" + std::to_string(c.T) + " E=" + std::to_string(c.E) +
                            " k=" + std::to_string(c.k) + " ids exact",
           e);
    EXPECT_LE(e, 1e-5);
  }
}

TEST_F(CudaRoute, NonFiniteRowsRouteLikeTheCpu) {
  // A NaN or inf logit: experts 0..k-1 with zero weight on both backends, in the warp kernel (E <= 256)
  // and the block kernel (E = 512, Qwen3-Next); the other rows unchanged (issue 40).
  for (const int64_t E : {int64_t{64}, int64_t{512}}) {
    const int64_t T = 6;
    const int32_t k = 8;
    auto x = distinct_rows(T, E, 1.0f / 16.0f, 77);
    x[1 * E + 3] = NAN;
    x[2 * E + 0] = INFINITY;
    x[4 * E + E - 1] = -INFINITY;
    for (RouterScoring sc : {RouterScoring::kSoftmax, RouterScoring::kSigmoid}) {
      RouterParams p;
      p.n_expert_used = k, p.scoring = sc, p.norm_topk_prob = true;
      std::vector<int32_t> ref_ids(static_cast<size_t>(T * k));
      std::vector<float> ref_w(ref_ids.size());
      cpu().moe_route(p, arena().host_f32(x, {T, E}), Tensor(ref_ids.data(), DType::I32, {T, k}),
                      Tensor(ref_w.data(), DType::F32, {T, k}));
      for (int32_t j = 0; j < k; ++j) EXPECT_EQ(ref_w[1 * k + j], 0.0f);
      Tensor ids = arena().dev_poisoned(DType::I32, {T, k});
      Tensor w = arena().dev_poisoned(DType::F32, {T, k});
      gpu().moe_route(p, arena().dev_from(x, DType::F32, {T, E}), ids, w);
      EXPECT_EQ(arena().read_i32(ids), ref_ids) << "E=" << E;
      EXPECT_LE(compare(w, ref_w), 1e-5) << "E=" << E;
    }
  }
}

// The fused router (one launch: logits, routing, padding mask) against the CPU's matmul, moe_route and
// moe_mask_rows. x and w are small multiples of 1/4 and 1/16, so every logit is exact in fp32 whatever
// the summation order, and both sides round it to bf16 the same way: ids must match exactly.
TEST_F(CudaRoute, MoeRouterMatchesUnfused) {
  struct Case {
    int64_t T, H, E;
    int32_t k;
    DType x_dt, w_dt;
    RouterScoring scoring;
    int32_t n_valid;  // -1: no mask
  };
  const Case cases[] = {{1, 2048, 128, 8, DType::F32, DType::F32, RouterScoring::kSoftmax, -1},
                        {4, 256, 60, 4, DType::F32, DType::BF16, RouterScoring::kSigmoid, 3},
                        {3, 64, 256, 8, DType::BF16, DType::BF16, RouterScoring::kSoftmax, 1},
                        {20, 64, 32, 2, DType::F32, DType::F32, RouterScoring::kSoftmax, 17}};  // 20 > 16: unfused path
  uint32_t seed = 70;
  for (const Case& c : cases) {
    std::vector<float> x(static_cast<size_t>(c.T * c.H)), w(static_cast<size_t>(c.E * c.H));
    uint32_t r = seed++;
    for (float& v : x) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 28) - 8) / 4.0f;
    for (float& v : w) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 27) - 16) / 16.0f;
    RouterParams p;
    p.n_expert_used = c.k, p.scoring = c.scoring, p.norm_topk_prob = true;
    std::vector<float> ref_logits(static_cast<size_t>(c.T * c.E));
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.T * c.k));
    std::vector<float> ref_w(ref_ids.size());
    // CPU reference on the logits as the GPU stores them (rounded to x's dtype)
    cpu().matmul(arena().host_f32(x, {c.T, c.H}), arena().host_f32(w, {c.E, c.H}),
                 Tensor(ref_logits.data(), DType::F32, {c.T, c.E}), Tensor());
    if (c.x_dt == DType::BF16) ref_logits = round_bf16(ref_logits);
    cpu().moe_route(p, arena().host_f32(ref_logits, {c.T, c.E}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}),
                    Tensor(ref_w.data(), DType::F32, {c.T, c.k}));
    if (c.n_valid >= 0)
      cpu().moe_mask_rows(arena().host_i32({c.n_valid}, {1}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}));
    Tensor logits = arena().dev_poisoned(c.x_dt, {c.T, c.E});
    Tensor ids = arena().dev_poisoned(DType::I32, {c.T, c.k}), wt = arena().dev_poisoned(DType::F32, {c.T, c.k});
    for (int rep = 0; rep < 2; ++rep) {  // twice: the per-token counters must be back at zero
      gpu().moe_router(p, arena().dev_from(x, c.x_dt, {c.T, c.H}), arena().dev_from(w, c.w_dt, {c.E, c.H}), Tensor(), logits, ids,
                       wt, c.n_valid >= 0 ? arena().dev_i32({c.n_valid}, {1}) : Tensor());
      EXPECT_EQ(arena().read_i32(ids), ref_ids) << "T=" << c.T << " E=" << c.E << " rep " << rep;
      EXPECT_LE(compare(logits, ref_logits), 1e-6);
      const double e = compare(wt, ref_w);
      report("moe_router", "T=" + std::to_string(c.T) + " E=" + std::to_string(c.E) + " " + dtype_name(c.x_dt) + "/" +
                               dtype_name(c.w_dt) + " ids exact", e);
      EXPECT_LE(e, 1e-5);
    }
  }
}

/** Bias and groups: DeepSeek-V3 (256 experts, 8 groups, 4 kept, top-8, sigmoid, bias, scaling 2.5),
 *  GLM-4.5-Air (128, no groups, bias), MiniMax-M2 (256, bias), the fixture's (8 experts, 2 groups, 1
 *  kept), softmax with groups, and more than 32 groups or 256 experts (the block kernel). */
struct BiasCase {
  std::string name;
  int64_t T, E;
  int32_t k, n_group, topk_group;
  RouterScoring scoring;
  bool norm, bias;
  float scaling;
  DType dt;
};

const std::vector<BiasCase>& bias_cases() {
  const RouterScoring sig = RouterScoring::kSigmoid, sm = RouterScoring::kSoftmax;
  static const std::vector<BiasCase> cases = {
      {"v3 E256 g8/4 k8 bias", 5, 256, 8, 8, 4, sig, true, true, 2.5f, DType::F32},
      {"v3 E256 g8/4 k8 bias bf16 T40", 40, 256, 8, 8, 4, sig, true, true, 2.5f, DType::BF16},
      {"glm4.5-air E128 k8 bias", 40, 128, 8, 1, 1, sig, true, true, 1.0f, DType::BF16},
      {"minimax-m2 E256 k8 bias", 3, 256, 8, 1, 1, sig, true, true, 1.0f, DType::F32},
      {"fixture E8 g2/1 k2 bias", 20, 8, 2, 2, 1, sig, true, true, 1.0f, DType::F32},
      {"softmax E64 g8/3 k6 no bias", 300, 64, 6, 8, 3, sm, false, false, 1.0f, DType::F32},
      {"E256 g64/8 k8 bias (block kernel)", 7, 256, 8, 64, 8, sig, true, true, 1.5f, DType::F32},
      {"E512 g8/2 k8 bias (block kernel)", 6, 512, 8, 8, 2, sig, false, true, 1.0f, DType::F32},
  };
  return cases;
}

RouterParams bias_params(const BiasCase& c) {
  RouterParams p;
  p.n_expert_used = c.k, p.scoring = c.scoring, p.norm_topk_prob = c.norm, p.scaling = c.scaling;
  p.n_group = c.n_group, p.topk_group = c.topk_group;
  return p;
}

TEST_F(CudaRoute, MoeRouteBiasAndGroupsMatch) {
  uint32_t seed = 90;
  for (const BiasCase& c : bias_cases()) {
    const auto x = distinct_rows(c.T, c.E, 1.0f / 16.0f, seed++);
    const auto bias = distinct_rows(1, c.E, 1.0f / 256.0f, seed++);  // [-0.5, 0.5): reorders the scores
    RouterParams p = bias_params(c);
    if (c.bias) p.bias = arena().host_f32(bias, {c.E});
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.T * c.k));
    std::vector<float> ref_w(ref_ids.size());
    cpu().moe_route(p, arena().host_f32(x, {c.T, c.E}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}),
                    Tensor(ref_w.data(), DType::F32, {c.T, c.k}));
    if (c.bias) p.bias = arena().dev_from(bias, DType::F32, {c.E});
    Tensor ids = arena().dev_poisoned(DType::I32, {c.T, c.k});
    Tensor w = arena().dev_poisoned(DType::F32, {c.T, c.k});
    gpu().moe_route(p, arena().dev_from(x, c.dt, {c.T, c.E}), ids, w);
    EXPECT_EQ(arena().read_i32(ids), ref_ids) << c.name;
    const double e = compare(w, ref_w);
    report("moe_route", c.name + " ids exact", e);
    EXPECT_LE(e, 1e-5) << c.name;
  }
}

TEST_F(CudaRoute, MoeRouterBiasAndGroupsMatchUnfused) {
  uint32_t seed = 120;
  for (const BiasCase& c : bias_cases()) {
    if (c.dt != DType::F32) continue;
    const int64_t T = std::min<int64_t>(c.T, 16), H = 128;  // <= 16 tokens: the fused kernel where it fits
    std::vector<float> x(static_cast<size_t>(T * H)), w(static_cast<size_t>(c.E * H));
    uint32_t r = seed++;
    for (float& v : x) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 28) - 8) / 4.0f;
    for (float& v : w) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 27) - 16) / 16.0f;
    const auto bias = distinct_rows(1, c.E, 1.0f / 256.0f, seed++);
    RouterParams p = bias_params(c);
    if (c.bias) p.bias = arena().host_f32(bias, {c.E});
    std::vector<float> ref_logits(static_cast<size_t>(T * c.E));
    std::vector<int32_t> ref_ids(static_cast<size_t>(T * c.k));
    std::vector<float> ref_w(ref_ids.size());
    cpu().matmul(arena().host_f32(x, {T, H}), arena().host_f32(w, {c.E, H}), Tensor(ref_logits.data(), DType::F32, {T, c.E}),
                 Tensor());
    cpu().moe_route(p, arena().host_f32(ref_logits, {T, c.E}), Tensor(ref_ids.data(), DType::I32, {T, c.k}),
                    Tensor(ref_w.data(), DType::F32, {T, c.k}));
    const int32_t n_valid = static_cast<int32_t>(T - 1);
    cpu().moe_mask_rows(arena().host_i32({n_valid}, {1}), Tensor(ref_ids.data(), DType::I32, {T, c.k}));
    if (c.bias) p.bias = arena().dev_from(bias, DType::F32, {c.E});
    Tensor logits = arena().dev_poisoned(DType::F32, {T, c.E});
    Tensor ids = arena().dev_poisoned(DType::I32, {T, c.k}), wt = arena().dev_poisoned(DType::F32, {T, c.k});
    gpu().moe_router(p, arena().dev_from(x, DType::F32, {T, H}), arena().dev_from(w, DType::F32, {c.E, H}), Tensor(), logits, ids,
                     wt, arena().dev_i32({n_valid}, {1}));
    EXPECT_EQ(arena().read_i32(ids), ref_ids) << c.name;
    const double e = compare(wt, ref_w);
    report("moe_router", c.name + " T=" + std::to_string(T) + " ids exact", e);
    EXPECT_LE(e, 1e-5) << c.name;
  }
}

TEST_F(CudaRoute, MoeRouteRejectsBadBiasAndGroups) {
  const Tensor logits = arena().dev(DType::F32, {2, 64});
  Tensor ids = arena().dev(DType::I32, {2, 4}), w = arena().dev(DType::F32, {2, 4});
  RouterParams p;
  p.n_expert_used = 4;
  p.bias = arena().dev(DType::F32, {63});
  EXPECT_THROW(gpu().moe_route(p, logits, ids, w), Error);  // bias is not [E]
  p.bias = Tensor();
  p.n_group = 7, p.topk_group = 1;
  EXPECT_THROW(gpu().moe_route(p, logits, ids, w), Error);  // 64 experts do not split into 7 groups
  p.n_group = 32, p.topk_group = 1;
  EXPECT_THROW(gpu().moe_route(p, logits, ids, w), Error);  // 4 experts needed, 1 group of 2 kept
}

}  // namespace
}  // namespace ft::testing
