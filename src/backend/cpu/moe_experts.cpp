// moe_experts: routed expert FFNs (SwiGLU, or gpt-oss's clamped SwiGLU, with optional per-expert
// biases) and their weighted sum (CPU backend). Tokens are grouped by expert; each expert runs
// gate/up (+ bias), the GLU and down (+ bias) over its gathered rows with the shared matmul kernel;
// every (token, slot) result is kept and summed per token in slot order, so the output does not
// depend on which other tokens share the batch. moe/cpu_expert_executor.cpp writes the same
// arithmetic (bit-identical results).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                         const ExpertBank& bank, Tensor out) {
  cpu::check_dtype("moe_experts", "x", x, DType::F32);
  cpu::check_dtype("moe_experts", "out", out, DType::F32);
  cpu::check_dtype("moe_experts", "ids", ids, DType::I32);
  cpu::check_dtype("moe_experts", "weights", weights, DType::F32);
  cpu::check_same_shape("moe_experts", "out", out, x);
  const int64_t T = x.rows(), H = x.cols(), k = ids.cols(), E = bank.n_expert();
  if (ids.rows() != T || weights.rows() != T || weights.cols() != k)
    fail(ErrorCode::kInvalidArgument, "moe_experts: ids {} and weights {} must both be [{}, k]", ids.str(),
         weights.str(), T);
  if (bank.up.size() != bank.gate.size() || bank.down.size() != bank.gate.size())
    fail(ErrorCode::kInvalidArgument, "moe_experts: bank has {} gate, {} up, {} down experts", bank.gate.size(),
         bank.up.size(), bank.down.size());
  op_checks::expert_bank_extras("moe_experts", bank, H);
  for (const Tensor* b : {&bank.gate_bias, &bank.up_bias, &bank.down_bias})
    if (!b->empty()) cpu::check_cpu("moe_experts", "bank bias", *b);
  const int32_t* id = ids.ptr<int32_t>();
  const float* wt = weights.ptr<float>();
  // Group (token, slot) pairs by expert, in token order.
  std::vector<int64_t>& count = moe_count_;  // members: no allocation per step once grown
  count.assign(static_cast<size_t>(E) + 1, 0);
  int64_t max_ff = 0;
  for (int64_t i = 0; i < T * k; ++i) {
    if (id[i] < 0) continue;
    if (id[i] >= E)
      fail(ErrorCode::kInvalidArgument, "moe_experts: expert id {} at token {} is outside the bank's {} experts", id[i],
           i / k, E);
    const Tensor& g = bank.gate[static_cast<size_t>(id[i])];
    const Tensor& u = bank.up[static_cast<size_t>(id[i])];
    const Tensor& d = bank.down[static_cast<size_t>(id[i])];
    if (g.ndim != 2 || g.dim(1) != H || !u.has_shape({g.dim(0), H}) || !d.has_shape({H, g.dim(0)}))
      fail(ErrorCode::kInvalidArgument, "moe_experts: expert {} has gate {}, up {}, down {}; expected [F, {}], [F, {}], [{}, F]",
           id[i], g.str(), u.str(), d.str(), H, H, H);
    max_ff = std::max(max_ff, g.dim(0));
    ++count[static_cast<size_t>(id[i]) + 1];
  }
  for (int64_t e = 0; e < E; ++e) count[static_cast<size_t>(e) + 1] += count[static_cast<size_t>(e)];
  const int64_t n_pairs = count[static_cast<size_t>(E)];
  moe_index_.resize(static_cast<size_t>(n_pairs));
  {
    std::vector<int64_t>& fill = moe_fill_;
    fill.assign(count.begin(), count.end() - 1);
    for (int64_t i = 0; i < T * k; ++i)
      if (id[i] >= 0) moe_index_[static_cast<size_t>(fill[static_cast<size_t>(id[i])]++)] = static_cast<int32_t>(i);
  }
  // Scratch: per-pair results [T*k, H], then per-expert gathered x [n, H], gate and up [n, F].
  int64_t max_n = 0;
  for (int64_t e = 0; e < E; ++e)
    max_n = std::max(max_n, count[static_cast<size_t>(e) + 1] - count[static_cast<size_t>(e)]);
  const size_t need = static_cast<size_t>(T * k * H + max_n * (H + 2 * max_ff));
  if (moe_scratch_.size() < need) moe_scratch_.resize(need);
  float* ypair = moe_scratch_.data();
  float* xg = ypair + T * k * H;
  float* gb = xg + max_n * H;
  float* ub = gb + max_n * max_ff;
  for (int64_t e = 0; e < E; ++e) {
    const int64_t b = count[static_cast<size_t>(e)], n = count[static_cast<size_t>(e) + 1] - b;
    if (n == 0) continue;
    const Tensor& g = bank.gate[static_cast<size_t>(e)];
    const int64_t F = g.dim(0);
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xg + r * H, x.ptr<float>() + (moe_index_[static_cast<size_t>(b + r)] / k) * H,
                  static_cast<size_t>(H) * 4);
    auto bias_row = [&](const Tensor& bias) { return bias.empty() ? Tensor() : bias.index(e); };
    cpu::matmul_f32(xg, n, H, g, bias_row(bank.gate_bias), gb, F, n_threads_);
    cpu::matmul_f32(xg, n, H, bank.up[static_cast<size_t>(e)], bias_row(bank.up_bias), ub, F, n_threads_);
    if (bank.glu == ExpertGlu::kSwigluOai) {
      const float alpha = bank.glu_alpha, limit = bank.glu_limit;
      for (int64_t i = 0; i < n * F; ++i) {
        const float gv = std::min(gb[i], limit), uv = std::clamp(ub[i], -limit, limit);
        gb[i] = (uv + 1.0f) * (gv / (1.0f + std::exp(-alpha * gv)));
      }
    } else if (bank.glu == ExpertGlu::kSwigluClamp) {
      const float limit = bank.glu_limit;
      for (int64_t i = 0; i < n * F; ++i) {
        const float gv = std::min(gb[i], limit), uv = std::clamp(ub[i], -limit, limit);
        gb[i] = gv / (1.0f + std::exp(-gv)) * uv;
      }
    } else if (bank.glu == ExpertGlu::kGeluTanh) {
      for (int64_t i = 0; i < n * F; ++i) gb[i] = cpu::gelu_tanh(gb[i]) * ub[i];
    } else {
      for (int64_t i = 0; i < n * F; ++i) gb[i] = gb[i] / (1.0f + std::exp(-gb[i])) * ub[i];
    }
    // down: results land in the pair slots directly (row stride H, rows scattered) via a gather copy.
    cpu::matmul_f32(gb, n, F, bank.down[static_cast<size_t>(e)], bias_row(bank.down_bias), xg, H, n_threads_);
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(ypair + static_cast<int64_t>(moe_index_[static_cast<size_t>(b + r)]) * H, xg + r * H,
                  static_cast<size_t>(H) * 4);
  }
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    float* ot = o + t * H;
    if (!p.accumulate) std::memset(ot, 0, static_cast<size_t>(H) * 4);
    for (int64_t j = 0; j < k; ++j) {
      if (id[t * k + j] < 0) continue;
      const float w = wt[t * k + j];
      const float* y = ypair + (t * k + j) * H;
      for (int64_t i = 0; i < H; ++i) ot[i] += w * y[i];
    }
  }
}

}  // namespace ft
