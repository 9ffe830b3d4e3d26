// CUDA vs CPU: topk (exact indices, including ties and NaN) and moe_route (exact expert ids,
// weights to fp32 rounding) for softmax and sigmoid scoring, with and without renormalisation.
#include <algorithm>
#include <numeric>

#include "gpu_harness.h"

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
      gpu().moe_router(p, arena().dev_from(x, c.x_dt, {c.T, c.H}), arena().dev_from(w, c.w_dt, {c.E, c.H}), logits, ids,
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

}  // namespace
}  // namespace ft::testing
