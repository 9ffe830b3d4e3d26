// MiniMax-M2 / M2.1 (MiniMax, 2025; transformers' MiniMaxM2ForCausalLM): the pre-norm decoder with
// RMS QK-norm over the whole q and k projections (not per head, as OLMoE), partial NeoX RoPE on the
// first rotary_dim dims of each head, and a MoE FFN in every layer without a shared expert:
//   s = sigmoid(W_r h'),  experts = top-k of s + e_score_correction_bias,  weights s_e / sum s.
// Experts and router use Mixtral's names (block_sparse_moe.gate, experts.E.w1 / w3 / w2).
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_minimax_m2(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kFull;  // q_norm [n_head * hd], k_norm [n_kv * hd]
  c.router_scoring = RouterScoring::kSigmoid;
  c.norm_topk_prob = true;
  DecoderSpec spec;
  spec.moe = true;
  spec.router = "block_sparse_moe.gate";
  spec.router_bias = "block_sparse_moe.e_score_correction_bias";
  spec.experts = {"block_sparse_moe.experts.{}.w1", "block_sparse_moe.experts.{}.w3", "block_sparse_moe.experts.{}.w2"};
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
