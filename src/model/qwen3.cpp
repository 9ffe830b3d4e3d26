// Qwen3 (Qwen Team, 2025, "Qwen3 Technical Report"): the Llama decoder with QK-norm, an RMSNorm over
// each head of q and k (weights [head_dim]) before RoPE, and no QKV bias. Per layer
//   h = x + Attn(RMSNorm(x))        q = RoPE(RMSNorm_head(W_q x)), k likewise, GQA
//   x = h + MLP(RMSNorm(h))         SwiGLU
// Small Qwen3 models tie the LM head to the embedding table (tie_word_embeddings; GGUF: no
// output.weight). NeoX RoPE in both formats.
#include "model/architectures.h"
#include "model/blocks.h"

namespace ft {
namespace {

class Qwen3 final : public Model {
 public:
  Qwen3(ModelConfig c, WeightLoader& ld, Ops& ops) : Model(std::move(c)) {
    config_.rope_mode = RopeMode::kNeox;
    config_.qk_norm = QkNorm::kPerHead;  // q_norm, k_norm: [head_dim]
    io_ = load_output(ld, config_);
    config_.validate();
    spec_ = load_attention_spec(ld, ops, config_, storage_);
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      layers_.push_back({
          load_norm(ld, config_, l, "attn_norm", "input_layernorm"),         // [H]
          load_attention(ld, config_, l),                                   // q, k, v, o
          load_norm(ld, config_, l, "ffn_norm", "post_attention_layernorm"),  // [H]
          load_mlp(ld, config_, l, config_.n_ff),                           // gate, up [F, H]; down [H, F]
      });
    }
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  }

  void forward(ForwardContext& ctx) const override {
    Ops& ops = ctx.ops;
    const int64_t T = ctx.batch.n_tokens;
    const RmsNormParams norm{static_cast<float>(config_.rms_eps), 0.0f};
    Tensor x = embed(ctx, io_.tok_embd);                                 // [T, H]
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
      gated_mlp(ctx, L.mlp, h, o);
      ctx.dump_if("ffn_out", l, o);
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
    MlpWeights mlp;
  };
  OutputWeights io_;
  AttentionSpec spec_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> build_qwen3(ModelConfig config, WeightLoader& ld, Ops& ops) {
  return std::make_unique<Qwen3>(std::move(config), ld, ops);
}

}  // namespace ft
