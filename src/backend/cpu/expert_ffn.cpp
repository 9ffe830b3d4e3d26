#include "backend/cpu/expert_ffn.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft::cpu {

void ExpertPairs::build(const char* op, const Tensor& ids, const ExpertBank& bank, int64_t H) {
  const int64_t T = ids.rows(), k = ids.cols(), E = bank.n_expert();
  const int32_t* id = ids.ptr<int32_t>();
  count_.assign(static_cast<size_t>(E) + 1, 0);
  max_ff_ = max_n_ = 0;
  for (int64_t i = 0; i < T * k; ++i) {
    if (id[i] < 0) continue;
    if (id[i] >= E)
      fail(ErrorCode::kInvalidArgument, "{}: expert id {} at token {} is outside the bank's {} experts", op, id[i],
           i / k, E);
    const size_t e = static_cast<size_t>(id[i]);
    if (count_[e + 1] == 0) {
      const Tensor &g = bank.gate[e], &u = bank.up[e], &d = bank.down[e];
      if (g.ndim != 2 || g.dim(1) != H || !u.has_shape({g.dim(0), H}) || !d.has_shape({H, g.dim(0)}))
        fail(ErrorCode::kInvalidArgument, "{}: expert {} has gate {}, up {}, down {}; expected [F, {}], [F, {}], [{}, F]",
             op, id[i], g.str(), u.str(), d.str(), H, H, H);
      max_ff_ = std::max(max_ff_, g.dim(0));
    }
    ++count_[e + 1];
  }
  groups_.clear();
  int64_t n_pairs = 0;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = count_[static_cast<size_t>(e) + 1];
    if (n > 0) groups_.push_back(ExpertGroup{static_cast<int32_t>(e), n_pairs, n, bank.gate[static_cast<size_t>(e)].dim(0)});
    max_n_ = std::max(max_n_, n);
    count_[static_cast<size_t>(e) + 1] = n_pairs;  // becomes the fill cursor below
    n_pairs += n;
  }
  index_.resize(static_cast<size_t>(n_pairs));
  pos_.resize(static_cast<size_t>(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    if (id[i] < 0) continue;
    const int64_t at = count_[static_cast<size_t>(id[i]) + 1]++;
    index_[static_cast<size_t>(at)] = static_cast<int32_t>(i);
    pos_[static_cast<size_t>(i)] = static_cast<int32_t>(at);
  }
}

void expert_glu(const ExpertBank& bank, int64_t e, int64_t F, int64_t row0, int64_t nr, int64_t n, float* g,
                int64_t ldg, float* u, int64_t ldu, float* h, int64_t ldh) {
  const float* gate_bias = bank.gate_bias.empty() ? nullptr : bank.gate_bias.ptr<float>() + e * F + row0;
  const float* up_bias = bank.up_bias.empty() ? nullptr : bank.up_bias.ptr<float>() + e * F + row0;
  const float alpha = bank.glu_alpha, limit = bank.glu_limit;
  for (int64_t r = 0; r < n; ++r) {
    float* gv = g + r * ldg;
    float* uv = u + r * ldu;
    float* hv = h + r * ldh;
    // y = dot, then y += bias (as the matmul's bias); then the GLU.
    if (gate_bias)
      for (int64_t i = 0; i < nr; ++i) gv[i] += gate_bias[i];
    if (up_bias)
      for (int64_t i = 0; i < nr; ++i) uv[i] += up_bias[i];
    switch (bank.glu) {
      case ExpertGlu::kSwigluOai:
        for (int64_t i = 0; i < nr; ++i) {
          const float gi = std::min(gv[i], limit), ui = std::clamp(uv[i], -limit, limit);
          hv[i] = (ui + 1.0f) * (gi / (1.0f + std::exp(-alpha * gi)));
        }
        break;
      case ExpertGlu::kSwigluClamp:
        for (int64_t i = 0; i < nr; ++i) {
          const float gi = std::min(gv[i], limit), ui = std::clamp(uv[i], -limit, limit);
          hv[i] = gi / (1.0f + std::exp(-gi)) * ui;
        }
        break;
      case ExpertGlu::kGeluTanh:
        for (int64_t i = 0; i < nr; ++i) hv[i] = gelu_tanh(gv[i]) * uv[i];
        break;
      default:
        for (int64_t i = 0; i < nr; ++i) hv[i] = gv[i] / (1.0f + std::exp(-gv[i])) * uv[i];
    }
  }
}

void expert_down_bias(const ExpertBank& bank, int64_t e, int64_t H, int64_t col0, int64_t nc, int64_t n, float* y,
                      int64_t ldy) {
  if (bank.down_bias.empty()) return;
  const float* b = bank.down_bias.ptr<float>() + e * H + col0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t i = 0; i < nc; ++i) y[r * ldy + i] += b[i];
}

void weighted_slot_sum(const int32_t* ids, const float* weights, int64_t k, int64_t H, const float* y,
                       const int32_t* pos, bool accumulate, int64_t t0, int64_t t1, float* out) {
  for (int64_t t = t0; t < t1; ++t) {
    float* ot = out + t * H;
    if (!accumulate) std::memset(ot, 0, static_cast<size_t>(H) * 4);
    for (int64_t j = 0; j < k; ++j) {
      if (ids[t * k + j] < 0) continue;
      const float w = weights[t * k + j];
      const float* yp = y + static_cast<int64_t>(pos[t * k + j]) * H;
      for (int64_t i = 0; i < H; ++i) ot[i] += w * yp[i];
    }
  }
}

}  // namespace ft::cpu
