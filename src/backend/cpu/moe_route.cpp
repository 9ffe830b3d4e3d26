// moe_route: router scores (softmax or sigmoid), selection bias and group-limited top-k (DeepSeek-V3),
// optional renormalisation and scaling (CPU backend). A row with a NaN or inf logit routes to experts
// 0..k-1 with zero weight.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {
namespace {

/** Sets the selection scores of every group but the `keep` best to -inf; a group's score is the sum
 *  of its two best entries (transformers' DeepseekV3TopkRouter), ties to the lower group. */
void mask_groups(float* choice, int64_t n_group, int64_t per_group, int64_t keep) {
  thread_local std::vector<float> group_score;
  thread_local std::vector<int32_t> kept;
  group_score.resize(static_cast<size_t>(n_group));
  kept.resize(static_cast<size_t>(keep));
  for (int64_t g = 0; g < n_group; ++g) {
    float a = -INFINITY, b = -INFINITY;  // the group's best two
    for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
      if (choice[e] > a) b = a, a = choice[e];
      else if (choice[e] > b) b = choice[e];
    }
    group_score[static_cast<size_t>(g)] = a + b;
  }
  cpu::topk_row(group_score.data(), n_group, static_cast<int32_t>(keep), kept.data());
  for (int64_t g = 0; g < n_group; ++g)
    if (std::find(kept.begin(), kept.end(), static_cast<int32_t>(g)) == kept.end())
      std::fill(choice + g * per_group, choice + (g + 1) * per_group, -INFINITY);
}

}  // namespace

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
  op_checks::router("moe_route", p, E);
  if (!p.bias.empty()) cpu::check_cpu("moe_route", "bias", p.bias);
  const float* bias = p.bias.empty() ? nullptr : p.bias.ptr<float>();
  const int64_t n_group = p.n_group > 1 ? p.n_group : 1, per_group = E / n_group;
  const float* lg = logits.ptr<float>();
  int32_t* id = ids.ptr<int32_t>();
  float* w = weights.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T > 64)
  for (int64_t t = 0; t < T; ++t) {
    thread_local std::vector<float> score, choice;
    score.resize(static_cast<size_t>(E));
    const float* row = lg + t * E;
    int32_t* it = id + t * k;
    float* wt = w + t * k;
    if (!std::all_of(row, row + E, [](float x) { return std::isfinite(x); })) {
      // A NaN or inf logit (a diverged token): experts 0..k-1 with zero weight, so the row's ids stay
      // valid and distinct for whatever runs the experts (caches, sorts, pools shared by the batch).
      for (int32_t j = 0; j < k; ++j) it[j] = j, wt[j] = 0.0f;
      continue;
    }
    if (p.scoring == RouterScoring::kSoftmax) {
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t e = 0; e < E; ++e) mx = std::fmax(mx, row[e]);
      for (int64_t e = 0; e < E; ++e) sum += (score[static_cast<size_t>(e)] = std::exp(row[e] - mx));
      for (float& s : score) s /= sum;
    } else {
      for (int64_t e = 0; e < E; ++e) score[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-row[e]));
    }
    const float* pick = score.data();
    if (bias || n_group > 1) {  // selection by score + bias, within the best groups (DeepSeek-V3)
      choice.assign(score.begin(), score.end());
      if (bias)
        for (int64_t e = 0; e < E; ++e) choice[static_cast<size_t>(e)] += bias[e];
      if (n_group > 1) mask_groups(choice.data(), n_group, per_group, p.topk_group);
      pick = choice.data();
    }
    cpu::topk_row(pick, E, k, it);
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
