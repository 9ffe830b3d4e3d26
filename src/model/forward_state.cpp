// ForwardState: the planned per-step activation buffers of a model.
#include <algorithm>

#include "model/model.h"
#include "util/error.h"

namespace ft {

ForwardState::ForwardState(Ops& ops, const ModelConfig& c, int64_t max_tokens_) : max_tokens(max_tokens_) {
  if (max_tokens < 1) fail(ErrorCode::kInvalidArgument, "forward state: max_tokens {} must be >= 1", max_tokens);
  const DType act = ops.activation_dtype();
  auto make = [&](DType dt, int64_t cols, int64_t rows = 0) {
    Tensor t(nullptr, dt, {rows > 0 ? rows : max_tokens, std::max<int64_t>(cols, 1)}, ops.device());
    storage.push_back(ops.alloc(t.bytes()));
    t.data = storage.back().data();
    return t;
  };
  const int64_t H = c.n_embd, qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
  const int64_t F = std::max({c.n_ff, c.n_ff_exp, c.n_ff_shexp, int64_t{1}});
  x = make(act, H);
  h = make(act, H);
  q = make(act, qd);
  qkv = make(act, qd + 2 * kvd, 1);
  k = make(act, kvd);
  v = make(act, kvd);
  attn = make(act, c.is_mla() ? std::max(qd, c.n_head * c.v_head_dim) : qd);
  if (c.is_mla()) {
    if (c.q_lora_rank > 0) q_a = make(act, c.q_lora_rank);
    q_nope = make(act, c.n_head * c.qk_nope_dim);
    q_pe = make(act, c.n_head * c.qk_rope_dim);
    q_lat = make(act, c.n_head * c.kv_lora_rank);
    kv_c = make(act, c.kv_lora_rank);
    k_pe = make(act, c.qk_rope_dim);
    attn_lat = make(act, c.n_head * c.kv_lora_rank);
  }
  if (c.attn_output_gate) attn_gate = make(act, qd);
  if (!c.layer_linear.empty()) {
    const int64_t vd = c.lin_n_v_heads * c.lin_v_dim;
    lin_qkv = make(act, c.lin_conv_dim());
    lin_conv = make(act, c.lin_conv_dim());
    lin_z = make(act, vd);
    // F32 whatever the activations: the decay exp(-exp(A_log) softplus(a)) multiplies a's rounding
    // by up to ~16 x softplus (bf16 a: percent-level errors in the state).
    lin_a = make(DType::F32, c.lin_n_v_heads);
    lin_b = make(DType::F32, c.lin_n_v_heads);
    lin_out = make(act, vd);
  }
  sub_out = make(act, H);
  ff_gate = make(act, F);
  ff_up = make(act, F);
  out_rows = make(act, H);
  if (c.ple_dim > 0) {
    ple = make(act, c.n_layer * c.ple_dim);
    ple_proj = make(act, c.n_layer * c.ple_dim);
    sub_out2 = make(act, H);
  }
  if (c.n_expert > 0) {
    moe.router_logits = make(act, c.n_expert);
    moe.ids = make(DType::I32, c.n_expert_used);
    moe.weights = make(DType::F32, c.n_expert_used);
    for (int i = 0; i < PrefetchTargets::kMax; ++i) {
      moe.prefetch_ids[i] = make(DType::I32, c.n_expert_used);
      moe.prefetch_weights[i] = make(DType::F32, c.n_expert_used);
    }
    if (c.n_ff_shexp > 0) {
      moe.sh_gate = make(act, c.n_ff_shexp);
      moe.sh_up = make(act, c.n_ff_shexp);
      moe.sh_out = make(act, H);
      moe.sh_score = make(act, 1);
    }
  }
}

}  // namespace ft
