// moe_experts: routed expert FFNs (SwiGLU, gpt-oss's or DeepSeek-V4's clamped SwiGLU, GELU-tanh, with
// optional per-expert biases) and their weighted sum (CPU backend). Tokens are grouped by expert;
// each expert runs gate/up, the biases and GLU, down and its bias over its gathered rows with the
// shared matmul kernel; every (token, slot) result is kept and summed per token in slot order, so the
// output does not depend on which other tokens share the batch. The grouping, biases, GLU and sum
// are backend/cpu/expert_ffn.h's, which moe/'s CpuExpertExecutor drives too (bit-identical results).
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/expert_ffn.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                         const ExpertBank& bank, Tensor out, const ActQ8* /*x_q8*/) {
  cpu::check_dtype("moe_experts", "x", x, DType::F32);
  cpu::check_dtype("moe_experts", "out", out, DType::F32);
  cpu::check_dtype("moe_experts", "ids", ids, DType::I32);
  cpu::check_dtype("moe_experts", "weights", weights, DType::F32);
  cpu::check_same_shape("moe_experts", "out", out, x);
  const int64_t T = x.rows(), H = x.cols(), k = ids.cols();
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
  cpu::ExpertPairs& pairs = moe_pairs_;  // a member: no allocation per step once grown
  pairs.build("moe_experts", ids, bank, H);
  const int64_t n_pairs = pairs.n_pairs(), max_n = pairs.max_n(), max_ff = pairs.max_ff();
  // Scratch: per-pair results [pairs, H] by group position, then per-expert gathered x [n, H], gate
  // and up [n, F] (h overwrites gate).
  const size_t need = static_cast<size_t>(n_pairs * H + max_n * (H + 2 * max_ff));
  if (moe_scratch_.size() < need) moe_scratch_.resize(need);
  float* y = moe_scratch_.data();
  float* xg = y + n_pairs * H;
  float* gb = xg + max_n * H;
  float* ub = gb + max_n * max_ff;
  for (const cpu::ExpertGroup& G : pairs.groups()) {
    const auto e = static_cast<size_t>(G.expert);
    const int64_t n = G.n, F = G.F;
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(xg + r * H, x.ptr<float>() + (pairs.pair(G.begin + r) / k) * H, static_cast<size_t>(H) * 4);
    cpu::matmul_f32(xg, n, H, bank.gate[e], Tensor(), gb, F, n_threads_);
    cpu::matmul_f32(xg, n, H, bank.up[e], Tensor(), ub, F, n_threads_);
    cpu::expert_glu(bank, G.expert, F, 0, F, n, gb, F, ub, F, gb, F);
    float* yg = y + G.begin * H;  // the expert's results land at their group positions
    cpu::matmul_f32(gb, n, F, bank.down[e], Tensor(), yg, H, n_threads_);
    cpu::expert_down_bias(bank, G.expert, H, 0, H, n, yg, H);
  }
  const int32_t* pos = pairs.positions();
  const float* wt = weights.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t) cpu::weighted_slot_sum(id, wt, k, H, y, pos, p.accumulate, t, t + 1, o);
}

}  // namespace ft
