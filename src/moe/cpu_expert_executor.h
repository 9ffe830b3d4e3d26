#pragma once
// CpuExpertExecutor: routed experts computed on host cores straight from the expert banks (the
// `cpu` and `hybrid` strategies, and whole layers given to the CPU with --moe-cpu-layers). Input
// is the same (token, slot) -> (expert, weight) table as Ops::moe_experts; pairs with id < 0 are
// skipped (the GPU computes them), and results accumulate into `out`, so the GPU's and the CPU's
// partial sums add up.
//
// Arithmetic: each weight row is decoded to fp32 (cpu::to_f32: BF16/F16 widening, GGUF blocks via
// quant/) and dotted with the SIMD kernel of the CPU backend (cpu::dot_rows: AVX-512, AVX2 or
// scalar, chosen at run time), SwiGLU and the weighted sum in slot order written exactly as in
// CpuOps::moe_experts, so on one machine the result equals the CPU backend's bit for bit. An expert
// with a single input (decode) is dotted straight from its stored rows where a fused kernel exists
// (cpu::dot_rows_stored: same bits, no decoded tile written and read back).
// Parallelism: a persistent ThreadPool; one job of tasks (expert, 16-row tile), gate+up then down
// (a down task waits for its own expert's gate+up tasks only), then token ranges for the sum.
// Scratch grows to the largest call and is reused.
#include <cstdint>
#include <vector>

#include "backend/ops.h"
#include "moe/thread_pool.h"

namespace ft {

class CpuExpertExecutor {
 public:
  /** `n_threads` workers (<= 0: one per physical core); `spin_us` as in ThreadPool. */
  explicit CpuExpertExecutor(int n_threads = 0, int spin_us = 0);

  int n_threads() const { return pool_.size(); }

  /** out[t] (=|+=) sum_j weights[t, j] * down_e(silu(gate_e x[t]) * up_e x[t]), e = ids[t, j],
   *  over the j with ids[t, j] >= 0, in j order. x [T, H] F32 or BF16; ids I32 [T, k]; weights
   *  F32 [T, k]; out F32 [T, H] (not aliasing x); all host memory. bank: host views, gate/up
   *  [F, H] and down [H, F] in any dtype cpu::to_f32 decodes. p.accumulate: add to out instead of
   *  overwriting it. Throws ft::Error(kInvalidArgument) naming the tensor for bad dtypes, shapes,
   *  devices or an id >= bank.n_expert(); kUnsupported for a weight dtype without a decoder. */
  void run(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
           const ExpertBank& bank, Tensor out);

  /** Distinct experts computed, summed over calls (a layer's stats line). */
  int64_t experts_computed() const { return experts_computed_; }
  /** (token, expert) pairs computed, summed over calls. */
  int64_t pairs_computed() const { return pairs_computed_; }

 private:
  struct Group {  // one used expert: pairs pair_index_[begin, begin + n)
    int32_t expert;
    int64_t begin, n, F;
  };
  struct Task {
    int32_t group;
    int64_t row0;
  };

  ThreadPool pool_;
  std::vector<int64_t> count_;
  std::vector<int32_t> pair_index_;  // pairs grouped by expert, token order inside a group
  std::vector<Group> groups_;
  std::vector<Task> tasks_;
  std::vector<int32_t> pending_;  // per group: gate/up tasks not yet finished (atomic_ref)
  std::vector<float> x_f32_, h_, y_;  // [T, H], [pairs, F] by group position, [T * k, H]
  std::vector<std::vector<float>> wbuf_;  // per worker: decoded weight tiles
  int64_t experts_computed_ = 0, pairs_computed_ = 0;
};

}  // namespace ft
