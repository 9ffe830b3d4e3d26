#include "model/decoder.h"

#include <fmt/format.h>

#include "model/gated_delta_net.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {
namespace {

class Decoder final : public Model {
 public:
  Decoder(ModelConfig c, WeightLoader& ld, Ops& ops, const DecoderSpec& spec) : Model(std::move(c)) {
    io_ = load_output(ld, config_);
    embeddings_tied_ = io_.tied;
    config_.validate();
    tp_ = ld.tensor_parallel();
    const ModelConfig full = config_;  // the whole model's sizes: the shapes of the checkpoint's tensors
    if (tp_.size > 1) config_ = rank_config(full, ops, spec);
    if (config_.n_nextn_layers > 0)
      spdlog::info("{}: {} multi-token-prediction layer(s) not loaded (no speculative decoding yet)", config_.arch,
                   config_.n_nextn_layers);
    spec_ = load_attention_spec(ld, ops, config_, storage_);
    if (config_.is_mla()) mla_spec_ = mla_spec(config_, spec_.rope.inv_freq, spec_.rope.attn_factor);
    gdn_ = gated_delta_params(config_);
    gdn_norm_ = {static_cast<float>(config_.rms_eps), 0.0f};
    router_ = {static_cast<int32_t>(config_.n_expert_used), config_.router_scoring, config_.norm_topk_prob,
               static_cast<float>(config_.routed_scaling), static_cast<int32_t>(config_.n_group),
               static_cast<int32_t>(config_.topk_group), Tensor()};
    for (int64_t l = 0; l < config_.n_layer; ++l) layers_.push_back(load_layer(ld, ops, spec, full, l));
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
    for (Buffer& b : ld.take_host_storage()) host_storage_.push_back(std::move(b));
  }

  bool move_embeddings_to_host(WeightLoader& ld) override {
    if (io_.tied || host_mapped_bytes_ > 0) return host_mapped_bytes_ > 0;
    const void* device_copy = io_.tok_embd.data;
    io_.tok_embd = load_token_embd_host_mapped(ld, config_);
    std::erase_if(storage_, [&](const Buffer& b) { return b.data() == device_copy; });  // CPU: none
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
    host_mapped_bytes_ = io_.tok_embd.bytes();
    return true;
  }
  int64_t movable_embedding_bytes() const override { return io_.tied ? 0 : io_.tok_embd.bytes(); }
  int64_t unplaced_bytes() const override { return io_.tok_embd.data ? 0 : io_.tok_embd.bytes(); }
  void place_deferred(WeightLoader& ld, Ops&) override {
    place_token_embd(ld, config_, io_.tok_embd);
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  }

  void forward(ForwardContext& ctx) const override {
    if ((ctx.tp ? ctx.tp->group_size() : 1) != tp_.size || (ctx.tp && ctx.tp->rank() != tp_.rank))
      fail(ErrorCode::kInvalidArgument,
           "the model was loaded as tensor-parallel rank {} of {}, but runs with a group of {} (rank {})", tp_.rank,
           tp_.size, ctx.tp ? ctx.tp->group_size() : 1, ctx.tp ? ctx.tp->rank() : 0);
    Ops& ops = ctx.ops;
    const int64_t T = ctx.batch.n_tokens;
    const RmsNormParams norm{static_cast<float>(config_.rms_eps), config_.norm_weight_offset};
    Tensor x = embed(ctx, io_.tok_embd);                                   // [T, H]
    Tensor h = ctx.state.h.slice(0, T), o = ctx.state.sub_out.slice(0, T);  // [T, H]
    // Each residual add is fused with the RMSNorm after it (the last one with nothing: lm_head
    // normalises the logit rows only). h_q8: h's int8 form as its norm wrote it (or the router,
    // moe_block), handed to the ops that read h whole until the next norm rewrites h.
    ActQ8 h_q8;
    if (config_.n_layer > 0) ops.rms_norm(norm, x, layers_[0].attn_norm, h, ctx.q8(h_q8));
    for (int64_t l = 0; l < config_.n_layer; ++l) {
      const Layer& L = layers_[static_cast<size_t>(l)];
      ctx.dump_if("attn_norm", l, h);
      if (config_.is_linear_layer(l)) gated_delta_net_block(ctx, l, gdn_, gdn_norm_, L.gdn, h, o, ctx.q8(h_q8));
      else if (config_.is_mla()) mla_block(ctx, l, mla_spec_, L.mla, h, o, ctx.q8(h_q8));
      else attention_block(ctx, l, spec_, L.attn, h, o, ctx.q8(h_q8));
      ops.add_rms_norm(norm, x, o, L.ffn_norm, h, ctx.q8(h_q8));
      ctx.dump_if("ffn_inp", l, x);
      ctx.dump_if("ffn_norm", l, h);
      if (L.moe.gate_inp) {
        MoePrefetch pf;
        const PrefetchTargets targets = ctx.experts ? ctx.experts->prefetch_targets(l, T) : PrefetchTargets();
        for (int i = 0; i < targets.n; ++i) {
          const int64_t t = targets.layer[i];
          if (t <= l || t >= config_.n_layer || !layers_[static_cast<size_t>(t)].moe.gate_inp) continue;
          pf.routers[pf.targets.n] = layers_[static_cast<size_t>(t)].moe.gate_inp;
          pf.biases[pf.targets.n] = layers_[static_cast<size_t>(t)].moe.exp_probs_b;
          pf.router_biases[pf.targets.n] = layers_[static_cast<size_t>(t)].moe.gate_inp_b;
          pf.targets.add(t);
        }
        moe_block(ctx, l, router_, L.moe, h, o, pf, ctx.q8(h_q8));
        ctx.dump_if("ffn_moe_out", l, o);
      } else {
        gated_mlp(ctx, L.mlp, h, o, ctx.q8(h_q8));
        ctx.dump_if("ffn_out", l, o);
      }
      if (l + 1 < config_.n_layer)
        ops.add_rms_norm(norm, x, o, layers_[static_cast<size_t>(l + 1)].attn_norm, h, ctx.q8(h_q8));
      else ops.add(x, o, x);
      ctx.dump_if("l_out", l, x);
    }
    lm_head(ctx, io_, norm, x);
  }

 private:
  struct Layer {
    Tensor attn_norm;  // [H]
    AttentionWeights attn;
    MlaWeights mla;    // config.is_mla() in place of attn
    GatedDeltaNetWeights gdn;  // config.is_linear_layer(l) in place of attn
    Tensor ffn_norm;   // [H]
    MoeWeights moe;    // MoE layers (routed experts: host_experts_[l], run by ctx.experts)
    MlpWeights mlp;    // dense layers
  };

  /** The rank's config for tensor-parallel shard tp_ of `full`: n_head, n_head_kv, n_ff (when a layer
   *  is dense), n_ff_shexp (when there is a shared expert) and linear attention's lin_n_k_heads /
   *  lin_n_v_heads divided by the size. Split with the heads: full-width QK-norm (its RMS all-reduced,
   *  tp_full_rms_norm), the attention output gate's rows (load_attention), MLA (q_a / kv_a and the
   *  cached latent whole on every rank, q_b / kv_b / o by heads: load_mla), Gated DeltaNet (by key
   *  heads and their value heads, each rank its heads' recurrent state: load_gated_delta_net). Throws
   *  ft::Error(kUnsupported) for what is not split yet (full-width QK-norm on a backend other than the
   *  CPU, per-layer KV heads, linear attention's per-layer embeddings, value heads tiled over the key heads) and what
   *  dist::tp_split throws for sizes the group does not divide, naming them. */
  ModelConfig rank_config(const ModelConfig& full, const Ops& ops, const DecoderSpec& spec) const {
    auto refuse = [&](const char* what) {
      fail(ErrorCode::kUnsupported, "tensor parallelism (size {}) of {}: {} is not supported yet", tp_.size, full.arch,
           what);
    };
    if (ops.device() != Device::kCpu && full.qk_norm == QkNorm::kFull)
      refuse("full-width QK-norm on a backend other than the CPU (tp_full_rms_norm reduces its RMS on the host)");
    if (!full.layer_kv_heads.empty() || !full.layer_head_dim.empty()) refuse("per-layer KV heads");
    if (full.lin_conv2_rows > 0 || full.lin_token_history > 0) refuse("linear attention's per-layer embeddings");
    if (full.lin_v_tiled) refuse("linear-attention value heads tiled over the key heads (llama.cpp's qwen35 order)");
    ModelConfig c = full;
    if (!full.layer_linear.empty()) {  // linear attention: by key heads and the value heads that read them
      c.lin_n_k_heads = dist::tp_split(full.lin_n_k_heads, tp_, "linear-attention key heads").count;
      c.lin_n_v_heads = c.lin_n_k_heads * (full.lin_n_v_heads / full.lin_n_k_heads);
    }
    c.n_head = dist::tp_heads(full.n_head, tp_).count;
    c.n_head_kv = dist::tp_kv_heads(full.n_head_kv, tp_).count;
    bool dense = !spec.moe;
    for (int64_t l = 0; l < full.n_layer && !dense; ++l) dense = !full.is_moe_layer(l);
    if (dense) c.n_ff = dist::tp_ffn(full.n_ff, tp_).count;
    if (spec.moe && spec.shared_expert && full.n_ff_shexp > 0)
      c.n_ff_shexp = dist::tp_split(full.n_ff_shexp, tp_, "shared expert FFN width").count;
    return c;
  }

  /** Layer l's weights: the whole model's (`full`'s shapes) or tp_'s slice of them. */
  Layer load_layer(WeightLoader& ld, Ops& ops, const DecoderSpec& spec, const ModelConfig& full, int64_t l) {
    const int64_t H = config_.n_embd;
    Layer L;
    L.attn_norm = load_norm(ld, config_, l, "attn_norm", "input_layernorm");
    if (config_.is_linear_layer(l)) L.gdn = load_gated_delta_net(ld, ops, full, l, storage_, tp_);  // the rank's heads
    else if (config_.is_mla()) L.mla = load_mla(ld, ops, full, l, storage_, tp_);  // the rank's heads
    else L.attn = load_attention(ld, full, l, tp_);  // q, k, v, o (+ biases, QK-norm); the rank's heads
    L.ffn_norm = load_norm(ld, config_, l, spec.ffn_norm, "post_attention_layernorm");
    if (spec.moe && config_.is_moe_layer(l)) {
      L.moe.gate_inp = ld.get(layer_weight(l, "ffn_gate_inp", spec.router), {config_.n_expert, H});
      if (spec.router_logit_bias)  // F32 [E], resident
        L.moe.gate_inp_b = ld.get_f32(layer_weight(l, "ffn_gate_inp", spec.router, "bias"), {config_.n_expert});
      if (spec.router_bias) {  // F32 [E], resident
        const WeightName bn{fmt::format("blk.{}.exp_probs_b.bias", l), fmt::format("model.layers.{}.{}", l, spec.router_bias)};
        const Tensor b = ld.host(bn, {config_.n_expert}, WeightKind::kVector);
        std::vector<float> f(static_cast<size_t>(config_.n_expert));
        dequantize_row(b.dtype, b.data, f.data(), config_.n_expert);
        L.moe.exp_probs_b = upload_f32(ops, f, storage_);
      }
      host_experts_.push_back(load_host_experts(ld, config_, l, spec.experts));  // [E] x gate/up/down
      if (spec.shared_expert) {
        const std::string p = spec.shared_prefix;
        const MlpWeights sh = load_mlp_shard(ld, layer_weight(l, "ffn_gate_shexp", p + ".gate_proj"),
                                             layer_weight(l, "ffn_up_shexp", p + ".up_proj"),
                                             layer_weight(l, "ffn_down_shexp", p + ".down_proj"), H, full.n_ff_shexp, tp_);
        L.moe.shexp_gate = sh.gate, L.moe.shexp_up = sh.up, L.moe.shexp_down = sh.down;
        if (spec.shared_gated)
          L.moe.shexp_gate_inp = ld.get(layer_weight(l, "ffn_gate_inp_shexp", "mlp.shared_expert_gate"), {1, H});
      }
    } else {
      L.mlp = tp_.size == 1 ? load_mlp(ld, config_, l, config_.n_ff)  // gate, up [F, H]; down [H, F]
                            : load_mlp_shard(ld, layer_weight(l, "ffn_gate", "mlp.gate_proj"),
                                             layer_weight(l, "ffn_up", "mlp.up_proj"),
                                             layer_weight(l, "ffn_down", "mlp.down_proj"), H, full.n_ff, tp_);
      if (spec.moe) host_experts_.emplace_back();
    }
    return L;
  }

  OutputWeights io_;
  AttentionSpec spec_;
  MlaSpec mla_spec_;
  GatedDeltaParams gdn_;      // linear-attention layers (a_log, dt_bias per layer)
  RmsNormParams gdn_norm_;    // their gated RMSNorm (plain weights)
  RouterParams router_;
  std::vector<Layer> layers_;
};

}  // namespace

DecoderSpec deepseek_moe_spec(const ModelConfig& c) {
  DecoderSpec spec;
  spec.moe = true;
  spec.router_bias = "mlp.gate.e_score_correction_bias";
  spec.shared_expert = c.n_ff_shexp > 0;
  spec.shared_prefix = "mlp.shared_experts";
  spec.shared_gated = false;
  return spec;
}

std::unique_ptr<Model> build_decoder(ModelConfig config, WeightLoader& ld, Ops& ops, const DecoderSpec& spec) {
  return std::make_unique<Decoder>(std::move(config), ld, ops, spec);
}

}  // namespace ft
