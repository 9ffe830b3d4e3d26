#pragma once
// The routed-expert arithmetic of the CPU: (token, slot) pairs grouped by expert, the biases and
// GLU of an expert's gate/up projections, the down projection's bias, and each token's weighted
// sum of its pairs' results in slot order. Written once here; CpuOps::moe_experts (single GEMMs per
// expert) and moe/'s CpuExpertExecutor (threaded 16-row tiles, int8 / BF16 activations, EC12) both
// drive it, so their results agree bit for bit wherever their dot products do.
#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace ft::cpu {

/** One expert used by a step: its pairs sit at group positions [begin, begin + n); F is its
 *  gate's rows (the FFN width). */
struct ExpertGroup {
  int32_t expert;
  int64_t begin, n, F;
};

/** A step's (token, slot) pairs grouped by expert: experts in id order, a group's pairs in token
 *  order. Pair p = t * k + j; pairs with ids < 0 are skipped. Buffers are reused across build()s. */
class ExpertPairs {
 public:
  /** Groups ids I32 [T, k] (host) over `bank`, checking each used expert's gate/up [F, H] and down
   *  [H, F] shapes. Throws ft::Error(kInvalidArgument), messages prefixed `op`, for an id >= the
   *  bank's experts or a misshapen expert. */
  void build(const char* op, const Tensor& ids, const ExpertBank& bank, int64_t H);

  const std::vector<ExpertGroup>& groups() const { return groups_; }
  /** Pairs computed (ids >= 0). */
  int64_t n_pairs() const { return static_cast<int64_t>(index_.size()); }
  /** The pair at group position i. */
  int32_t pair(int64_t i) const { return index_[static_cast<size_t>(i)]; }
  /** Group position of pair p (defined where ids[p] >= 0): per pair, T * k entries. */
  const int32_t* positions() const { return pos_.data(); }
  /** Largest F and largest group size among the used experts (0 when none). */
  int64_t max_ff() const { return max_ff_; }
  int64_t max_n() const { return max_n_; }

 private:
  std::vector<int64_t> count_;
  std::vector<int32_t> index_, pos_;
  std::vector<ExpertGroup> groups_;
  int64_t max_ff_ = 0, max_n_ = 0;
};

/** For n pairs of expert e: rows [row0, row0 + nr) of their gate (g, row stride ldg) and up (u,
 *  stride ldu) projections, without biases. Adds the bank's gate/up biases (F32 [E, F], when given)
 *  in place, then writes h[r * ldh + i] = glu(g, u) per bank.glu: SwiGLU silu(g) u, gpt-oss's
 *  (clamp(u, -limit, limit) + 1) * g' sigmoid(alpha g') with g' = min(g, limit), DeepSeek-V4's
 *  silu(min(g, limit)) clamp(u, -limit, limit), or gelu_tanh(g) u. h may alias g. */
void expert_glu(const ExpertBank& bank, int64_t e, int64_t F, int64_t row0, int64_t nr, int64_t n, float* g,
                int64_t ldg, float* u, int64_t ldu, float* h, int64_t ldh);

/** Adds expert e's down bias (bank.down_bias F32 [E, H], when given) to columns [col0, col0 + nc)
 *  of n result rows y (row stride ldy). */
void expert_down_bias(const ExpertBank& bank, int64_t e, int64_t H, int64_t col0, int64_t nc, int64_t n, float* y,
                      int64_t ldy);

/** out[t] (=|+=) sum_j weights[t, j] * y[pos[t * k + j]] for tokens t in [t0, t1), over the j with
 *  ids[t, j] >= 0, in j order: ids I32 [T, k], weights F32 [T, k], y the pairs' results [pairs, H]
 *  by group position, out F32 [T, H]; `accumulate` adds to out instead of overwriting it. */
void weighted_slot_sum(const int32_t* ids, const float* weights, int64_t k, int64_t H, const float* y,
                       const int32_t* pos, bool accumulate, int64_t t0, int64_t t1, float* out);

}  // namespace ft::cpu
