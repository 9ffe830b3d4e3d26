#pragma once
// CpuExpertExecutor: routed experts computed on host cores straight from the expert banks (the
// `cpu` and `hybrid` strategies, and whole layers given to the CPU with --moe-cpu-layers). Input
// is the same (token, slot) -> (expert, weight) table as Ops::moe_experts; pairs with id < 0 are
// skipped (the GPU computes them), and results accumulate into `out`, so the GPU's and the CPU's
// partial sums add up.
//
// Arithmetic: each 16-row weight tile is decoded to fp32 once (cpu::to_f32: BF16/F16 widening, GGUF
// blocks via quant/) and meets the expert's inputs through the SIMD kernels of the CPU backend
// (AVX-512, AVX2 or scalar, chosen at run time): an expert with several inputs (prefill) as one GEMM
// block, cpu::gemm_nt over its inputs' x (or h) rows gathered contiguously, register-blocked 4 tokens
// x 4 rows; one input through cpu::dot_rows. Both give every element the same instruction sequence
// (one accumulator per element, a fixed final reduction), and the CPU backend's matmul runs the same
// gemm_nt; the grouping, biases, GLU and weighted sum in slot order are CpuOps::moe_experts' own
// (backend/cpu/expert_ffn.h), so on one machine the result equals the CPU backend's bit for bit, and a
// token's result does not depend on the other tokens of the step. An expert
// with a single input (decode) is dotted straight from its stored rows where a fused kernel exists
// (cpu::dot_rows_stored: same bits, no decoded tile written and read back). With int8 activations
// (the constructor's option; the engine's --moe-cpu-int8) Q4_K and Q6_K rows meet int8 forms of x and h
// instead (cpu::dot_rows_q8), for every input: faster, and ~1e-4 relative from the fp32 result
// (6e-5 on random data: the activations keep ~15 bits, x ~= d * (q1 + q2 / 254) per 256 elements);
// an expert with several inputs meets them as int8 GEMM blocks (cpu::gemm_q8: Q4_K rows unpacked
// once per block for 4 inputs, the same bits as one input's dot).
// With bf16 activations (the constructor's option) BF16 and EC12 rows meet BF16 forms of x and h
// (cpu::gemm_nt_bf16, AVX-512 BF16) for every input, as GEMM blocks straight from the stored (or
// EC12-decoded) BF16 tile: 2x the fp32 blocks' prefill throughput, ~3e-3 relative from fp32.
// On AMX CPUs an expert with 4 inputs or more runs those blocks as AMX tiles (cpu::gemm_nt_amx_bf16).
// EC12 weights (expert banks in BankFormat::kEc12) give the same bits as the BF16 bank they code: a
// single input meets them in ec12::dot_rows (decoded in registers with AVX-512), more inputs in BF16
// tiles decoded by ec12::decode_rows.
// Parallelism: a persistent ThreadPool; one job of tasks (expert, 16-row tile), gate+up then down
// (a down task waits for its own expert's gate+up tasks only), then token ranges for the sum.
// Scratch grows to the largest call and is reused.
#include <cstdint>
#include <vector>

#include "backend/cpu/expert_ffn.h"
#include "backend/cpu/q8_rows.h"
#include "backend/ops.h"
#include "moe/thread_pool.h"

namespace ft {

class CpuExpertExecutor {
 public:
  /** `n_threads` workers (<= 0: one per physical core); `spin_us` as in ThreadPool;
   *  `int8_activations`: weights cpu::dot_rows_q8 takes (Q4_K, Q6_K with AVX-512 VNNI) dot int8 forms of x
   *  and h (cpu::quantize_q8_row, ~15 bits) instead of fp32, for every input alike (a pair's result
   *  does not depend on the batch): +33-41% per core on the development machine, and no longer
   *  bit-identical to the CPU backend (~1e-4 relative from it). Off by default here and in
   *  MoeRuntimeOptions; the engine's MoeOptions (--moe-cpu-int8) turns it on.
   *  `bf16_activations`: BF16 and EC12 weights meet BF16 forms of x and h (rounded to nearest even)
   *  through cpu::gemm_nt_bf16 (AVX-512 BF16), every input alike, as a GEMM block per 16-row tile:
   *  2-2.5x the fp32 blocks' throughput on the development machine, no decoded fp32 tile, a pair's
   *  result still independent of the batch; within bf16 tolerance of the fp32 result (~1e-3
   *  relative), not bit-identical to the CPU backend. Only where has_bf16_dot(); else fp32. On a CPU
   *  with AMX-BF16 (cpu::has_amx_bf16) an expert with 4 inputs or more (prefill) runs its blocks of
   *  weights whose rows are whole 32-value chunks as AMX tiles (cpu::gemm_nt_amx_bf16; ~3x the
   *  AVX-512 blocks' prefill throughput on the H100 host): a pair's bits then depend on whether its
   *  expert had fewer than 4 inputs in the step (AVX-512) or not (AMX), both within fp32 rounding
   *  of the exact sum of the BF16 products; within each side they do not depend on the batch. */
  explicit CpuExpertExecutor(int n_threads = 0, int spin_us = 0, bool int8_activations = false,
                             bool bf16_activations = false);
  bool int8_activations() const { return int8_; }
  bool bf16_activations() const { return bf16_; }
  /** Whether the BF16 GEMM blocks run on AMX tiles (bf16 activations on a CPU with AMX-BF16). */
  bool amx() const { return amx_; }
  /** Whether weight `w` meets bf16 activations when they are on: BF16 or EC12, on a CPU with
   *  AVX-512 BF16 (cpu::has_bf16_dot). */
  static bool bf16_weight(const Tensor& w);
  /** Whether weight `w` [N, K] meets int8 activations when they are on: a type cpu::dot_rows_q8
   *  takes on this CPU, K a whole number of its 256-element blocks. */
  static bool int8_weight(const Tensor& w);
  /** Which activation forms some expert of `banks` meets when they are on: int8 (int8_weight) and
   *  bf16 (bf16_weight) of any bank's first gate, up or down matrix. */
  struct WeightForms {
    bool int8 = false, bf16 = false;
  };
  static WeightForms weight_forms(const std::vector<ExpertBank>& banks);

  int n_threads() const { return pool_.size(); }

  /** out[t] (=|+=) sum_j weights[t, j] * down_e(glu(gate_e x[t], up_e x[t])), e = ids[t, j],
   *  over the j with ids[t, j] >= 0, in j order; glu per bank.glu (SwiGLU or gpt-oss's clamped
   *  SwiGLU with bank.glu_alpha / glu_limit), the bank's biases (F32 [E, F] / [E, H] host tensors,
   *  when given) added to each projection. x [T, H] F32 or BF16; ids I32 [T, k]; weights
   *  F32 [T, k]; out F32 [T, H] (not aliasing x); all host memory. bank: host views, gate/up
   *  [F, H] and down [H, F] in any dtype cpu::to_f32 decodes, or EC12. p.accumulate: add to out instead of
   *  overwriting it. Throws ft::Error(kInvalidArgument) naming the tensor for bad dtypes, shapes,
   *  devices, biases or GLU parameters (op_checks::expert_bank_extras) or an id >= bank.n_expert();
   *  kUnsupported for a weight dtype without a decoder. */
  void run(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
           const ExpertBank& bank, Tensor out);

  /** Distinct experts computed, summed over calls (a layer's stats line). */
  int64_t experts_computed() const { return experts_computed_; }
  /** (token, expert) pairs computed, summed over calls. */
  int64_t pairs_computed() const { return pairs_computed_; }

 private:
  using Group = cpu::ExpertGroup;  // one used expert: pairs at group positions [begin, begin + n)
  struct Task {
    int32_t group;
    int64_t row0;
  };

  ThreadPool pool_;
  cpu::ExpertPairs pairs_;  // the step's pairs grouped by expert (backend/cpu/expert_ffn.h)
  std::vector<Task> tasks_;
  std::vector<int32_t> pending_;  // per group: gate/up tasks not yet finished, + 1 while h8 is pending (atomic_ref)
  std::vector<int32_t> h8_stage_;  // per group: 1 if its down GEMV takes h's int8 form
  bool int8_ = false, bf16_ = false, amx_ = false;
  std::vector<uint16_t> x16_, xg16_, h16_;  // BF16 forms: x [T, H], x gathered [pairs, H], h [pairs, F]
  // AMX B-tile forms (cpu::amx_pack_bf16) of a group's x and h rows, at xp_at_ / hp_at_ per group.
  std::vector<uint16_t> xp16_, hp16_;
  std::vector<int64_t> xp_at_, hp_at_;
  std::vector<int32_t> xp_row_;  // by group position: the pair's token (its row of x)
  std::vector<uint8_t> x8_, h8_;  // int8 forms: T rows of H, pairs of F (cpu::q8_row_bytes each)
  std::vector<cpu::Q8Row> x8_rows_, h8_rows_, xg8_rows_;  // per token, per pair and per pair (x's, by group position)
  std::vector<float> x_f32_, h_, y_;  // [T, H], [pairs, F] and [pairs, H] by group position
  std::vector<float> xg_;  // [pairs, H]: x rows gathered by group position (experts with several inputs)
  std::vector<std::vector<float>> gu_;  // per worker: a tile's gate and up results, [n, 16] each
  std::vector<std::vector<float>> wbuf_;  // per worker: decoded weight tiles
  std::vector<std::vector<uint16_t>> wbuf16_;  // per worker: EC12 rows decoded to BF16
  int64_t experts_computed_ = 0, pairs_computed_ = 0;
};

}  // namespace ft
