// moe_route: router scores (softmax or sigmoid), top-k, optional renormalisation (CPU backend).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) {
  cpu::check_dtype("moe_route", "logits", logits, DType::F32);
  cpu::check_dtype("moe_route", "ids", ids, DType::I32);
  cpu::check_dtype("moe_route", "weights", weights, DType::F32);
  const int64_t T = logits.rows(), E = logits.cols();
  const int32_t k = p.n_expert_used;
  if (k < 1 || k > E)
    fail(ErrorCode::kInvalidArgument, "moe_route: n_expert_used {} must be in [1, {}] (experts in logits {})", k, E,
         logits.str());
  if (ids.rows() != T || ids.cols() != k || weights.rows() != T || weights.cols() != k)
    fail(ErrorCode::kInvalidArgument, "moe_route: ids {} and weights {} must be [{}, {}]", ids.str(), weights.str(), T,
         k);
  const float* lg = logits.ptr<float>();
  int32_t* id = ids.ptr<int32_t>();
  float* w = weights.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T > 64)
  for (int64_t t = 0; t < T; ++t) {
    thread_local std::vector<float> score;
    score.resize(static_cast<size_t>(E));
    const float* row = lg + t * E;
    if (p.scoring == RouterScoring::kSoftmax) {
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) mx = std::fmax(mx, row[e]);
      for (int64_t e = 0; e < E; ++e) sum += (score[static_cast<size_t>(e)] = std::exp(row[e] - mx));
      for (float& s : score) s /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) score[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-row[e]));
    }
    int32_t* it = id + t * k;
    float* wt = w + t * k;
    cpu::topk_row(score.data(), E, k, it);
    float sel = 0.0f;
    for (int32_t j = 0; j < k; ++j) sel += (wt[j] = score[static_cast<size_t>(it[j])]);
    const float f = p.norm_topk_prob && sel > 0.0f ? p.scaling / sel : p.scaling;
    for (int32_t j = 0; j < k; ++j) wt[j] *= f;
  }
}

void CpuOps::moe_mask_rows(const Tensor& n_valid, Tensor ids) {
  cpu::check_dtype("moe_mask_rows", "n_valid", n_valid, DType::I32);
  cpu::check_dtype("moe_mask_rows", "ids", ids, DType::I32);
  if (n_valid.numel() != 1) fail(ErrorCode::kInvalidArgument, "moe_mask_rows: n_valid {} must hold one count", n_valid.str());
  const int64_t T = ids.rows(), k = ids.cols();
  const int64_t from = std::max<int64_t>(0, std::min<int64_t>(T, n_valid.ptr<int32_t>()[0]));
  std::fill(ids.ptr<int32_t>() + from * k, ids.ptr<int32_t>() + T * k, -1);
}

}  // namespace ft
