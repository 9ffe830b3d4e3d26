// Qwen3-MoE (Qwen Team, 2025, "Qwen3 Technical Report"): the Qwen3 decoder (QK-norm per head, no
// QKV bias, NeoX RoPE) with a sparse MoE FFN and no shared expert. Per layer
//   h = x + Attn(RMSNorm(x))
//   x = h + sum_{e in top-k(softmax(W_r h'))} p_e * Expert_e(h'),   h' = RMSNorm(h)
// with the k probabilities renormalised to sum 1 when norm_topk_prob (llama.cpp always does for
// qwen3moe GGUFs). Layers in mlp_only_layers or off the decoder_sparse_step use a dense SwiGLU MLP.
#include "model/architectures.h"
#include "model/blocks.h"

namespace ft {
namespace {

class Qwen3Moe final : public Model {
 public:
  Qwen3Moe(ModelConfig c, WeightLoader& ld, Ops& ops) : Model(std::move(c)) {
    config_.rope_mode = RopeMode::kNeox;
    config_.qk_norm = QkNorm::kPerHead;
    if (ld.is_gguf()) config_.norm_topk_prob = true;
    io_ = load_output(ld, config_);
    config_.validate();
    spec_ = load_attention_spec(ld, ops, config_, storage_);
    router_ = {static_cast<int32_t>(config_.n_expert_used), RouterScoring::kSoftmax, config_.norm_topk_prob, 1.0f};
    const int64_t H = config_.n_embd, E = config_.n_expert;
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      Layer L;
      L.attn_norm = load_norm(ld, config_, l, "attn_norm", "input_layernorm");         // [H]
      L.attn = load_attention(ld, config_, l);
      L.ffn_norm = load_norm(ld, config_, l, "ffn_norm", "post_attention_layernorm");  // [H]
      if (config_.is_moe_layer(l)) {
        L.moe.gate_inp = ld.get(layer_weight(l, "ffn_gate_inp", "mlp.gate"), {E, H});  // router [E, H]
        host_experts_.push_back(load_host_experts(ld, config_, l, ExpertNames{}));    // [E] x gate/up/down
      } else {
        L.mlp = load_mlp(ld, config_, l, config_.n_ff);
        host_experts_.emplace_back();
      }
      layers_.push_back(std::move(L));
    }
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  }

  void forward(ForwardContext& ctx) const override {
    Ops& ops = ctx.ops;
    const int64_t T = ctx.batch.n_tokens;
    const RmsNormParams norm{static_cast<float>(config_.rms_eps), 0.0f};
    Tensor x = embed(ctx, io_.tok_embd);                                   // [T, H]
    Tensor h = ctx.state.h.slice(0, T), o = ctx.state.sub_out.slice(0, T);  // [T, H]
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      ops.rms_norm(norm, x, L.attn_norm, h);
      ctx.dump_if("attn_norm", l, h);
      attention_block(ctx, l, spec_, L.attn, h, o);
      ops.add(x, o, x);
      ctx.dump_if("ffn_inp", l, x);
      ops.rms_norm(norm, x, L.ffn_norm, h);
      ctx.dump_if("ffn_norm", l, h);
      if (L.moe.gate_inp) {
        moe_block(ctx, l, router_, L.moe, h, o);
        ctx.dump_if("ffn_moe_out", l, o);
      } else {
        gated_mlp(ctx, L.mlp, h, o);
        ctx.dump_if("ffn_out", l, o);
      }
      ops.add(x, o, x);
      ctx.dump_if("l_out", l, x);
    }
    lm_head(ctx, io_, norm, x);
  }

 private:
  struct Layer {
    Tensor attn_norm;
    AttentionWeights attn;
    Tensor ffn_norm;
    MoeWeights moe;  // MoE layers (routed experts: host_experts_[l], run by ctx.experts)
    MlpWeights mlp;  // dense layers
  };
  OutputWeights io_;
  AttentionSpec spec_;
  RouterParams router_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> build_qwen3_moe(ModelConfig config, WeightLoader& ld, Ops& ops) {
  return std::make_unique<Qwen3Moe>(std::move(config), ld, ops);
}

}  // namespace ft
