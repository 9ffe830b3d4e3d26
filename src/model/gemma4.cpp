// Gemma 4 text models (Google, 2026; transformers 5.17 Gemma4ForCausalLM, model_type gemma4_text).
// Per layer l, with RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w (plain w, not Gemma 1-3's 1 + w):
//   a = Attn_l(RMSNorm(x));  x = x + RMSNorm_post_attn(a)
//   f = MLP(RMSNorm_pre_ffn(x))                 MLP = down(gelu_tanh(gate v) * up v)
//   with enable_moe_block: f = RMSNorm_post_ffn_1(f) + RMSNorm_post_ffn_2(MoE(RMSNorm_pre_ffn_2(x)))
//   x = x + RMSNorm_post_ffn(f)
//   with per-layer inputs: x = x + RMSNorm_post_ple(W_proj (gelu_tanh(W_gate x) * ple_l))
//   x = layer_scalar * x
// then the final RMSNorm, lm_head and, when final_logit_softcapping is set, c * tanh(logits / c).
// Embeddings are scaled by sqrt(hidden_size). Attention: q/k per-head RMSNorm (weights q_norm,
// k_norm), v per-head RMSNorm without weight, RoPE on q and k (NeoX halves), score scale 1 (the norms
// stand in for 1/sqrt(d)); layer_types alternate sliding_window attention ("sliding_attention", RoPE
// rope_parameters.sliding_attention) and full attention ("full_attention", proportional RoPE: the
// first partial_rotary_factor * head_dim / 2 frequency pairs 1 / theta^(2i / head_dim), the rest
// unrotated, i.e. NeoX over the whole head with zero frequencies). per_layer_config overrides head_dim
// and num_key_value_heads per layer; attention_k_eq_v (full layers) takes v from k_proj before
// k_norm; the last num_kv_shared_layers layers compute no K/V and attend to the K/V of the last
// earlier layer of their type (use_double_wide_mlp doubles their MLP width).
// Per-layer inputs (hidden_size_per_layer_input P > 0, vocab_size_per_layer_input):
//   ple = (RMSNorm_P(W_plmp e / sqrt(H)) + E_ple[id] sqrt(P)) / sqrt(2),  e = the scaled embedding,
// split into n_layer blocks of P (layer l takes block l).
// MoE (Gemma4TextRouter / Gemma4TextExperts): the router reads the residual x (before the FFN):
// logits = W_r (RMSNorm(x) * scale / sqrt(H)), softmax, top-k renormalised, times
// per_expert_scale[e]; experts gate_up_proj [E, 2F, H] (gate rows first), down_proj [E, H, F], GEGLU.
// The experts run through ExpertCompute (every MoE strategy); the block does not predict later layers'
// routes (no --moe-prefetch targets).
// KV layout: every layer's pages are sized for the widest layer (ModelConfig head_dim / n_head_kv are
// the maxima); a narrower layer uses a prefix of its pages.
// Tensor parallelism (a WeightLoader shard, dist/tensor_parallel.h): each rank its query heads (q rows,
// o columns), the KV heads they read (split, or one replicated on every rank whose query heads share
// it when a layer has fewer KV heads than ranks) and the MLP's columns (gate/up rows, down columns);
// the o_proj and down_proj outputs all-reduced, so the post-norms see whole rows. Norms, per-layer
// inputs, router and experts whole on every rank.
#include <cmath>

#include <fmt/format.h>

#include "model/architectures.h"
#include "model/blocks.h"
#include "model/rope.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ft {
namespace {

using json = nlohmann::json;

const json* opt(const json& c, const char* key) {
  auto it = c.find(key);
  return it == c.end() || it->is_null() ? nullptr : &*it;
}

double num(const json& c, const char* key, double def) {
  const json* v = opt(c, key);
  if (!v) return def;
  if (!v->is_number()) fail(ErrorCode::kInvalidFile, "config.json: {}: expected a number, got {}", key, v->dump());
  return v->get<double>();
}

bool flag(const json& c, const char* key) {
  const json* v = opt(c, key);
  if (!v) return false;
  if (!v->is_boolean()) fail(ErrorCode::kInvalidFile, "config.json: {}: expected true/false, got {}", key, v->dump());
  return v->get<bool>();
}

/** One layer's attention geometry and RoPE, from layer_types, per_layer_config and rope_parameters. */
struct LayerGeom {
  bool sliding = false;
  int64_t head_dim = 0, n_kv = 0;
  std::vector<float> inv_freq;  // [head_dim / 2]
};

std::vector<float> rope_freqs(const json& rp, const char* type, int64_t head_dim, int64_t n_ctx) {
  const char* src = "config.json: rope_parameters";
  const json* p = opt(rp, type);
  if (!p || !p->is_object()) fail(ErrorCode::kInvalidFile, "{}: no '{}' entry", src, type);
  const std::string kind = p->value("rope_type", std::string("default"));
  const double theta = num(*p, "rope_theta", 10000.0), factor = num(*p, "factor", 1.0);
  std::vector<float> inv(static_cast<size_t>(head_dim / 2), 0.0f);
  if (kind == "default") {
    if (num(*p, "partial_rotary_factor", 1.0) != 1.0)
      fail(ErrorCode::kUnsupported, "{}.{}: partial_rotary_factor with rope_type default is not supported", src, type);
    ModelConfig tmp;  // transformers' default inv_freq over the whole head
    tmp.n_rot = head_dim, tmp.rope_theta = theta, tmp.n_ctx_train = n_ctx;
    inv = rope_table(tmp).inv_freq;
  } else if (kind == "proportional") {
    // transformers _compute_proportional_rope_parameters: int(partial * head_dim // 2) rotated
    // pairs at 1 / theta^(2i / head_dim), the rest zero; all divided by factor.
    const double partial = num(*p, "partial_rotary_factor", 1.0);
    const int64_t angles = static_cast<int64_t>(std::floor(partial * static_cast<double>(head_dim) / 2.0));
    for (int64_t i = 0; i < angles && i < head_dim / 2; ++i)
      inv[static_cast<size_t>(i)] = static_cast<float>(
          1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)) / factor);
  } else {
    fail(ErrorCode::kUnsupported, "{}.{}: rope_type '{}' is not supported (default, proportional)", src, type, kind);
  }
  return inv;
}

class Gemma4 final : public Model {
 public:
  Gemma4(ModelConfig c, const json& raw, WeightLoader& ld, Ops& ops) : Model(std::move(c)) {
    read_config(raw);
    io_ = load_output(ld, config_);
    embeddings_tied_ = io_.tied;
    config_.validate();
    tp_ = ld.tensor_parallel();
    full_n_head_ = config_.n_head;
    if (tp_.size > 1) shard_config();
    const int64_t H = config_.n_embd, P = config_.ple_dim, L = config_.n_layer;
    if (P > 0) {
      // Untied: placed by the memory plan with the token table (place_deferred / move_embeddings_to_host).
      ple_table_ = io_.tied ? ld.get({"", "model.embed_tokens_per_layer.weight"}, {ple_vocab_, L * P})
                            : ld.unplaced({"", "model.embed_tokens_per_layer.weight"}, {ple_vocab_, L * P});
      ple_model_proj_ = ld.get({"", "model.per_layer_model_projection.weight"}, {L * P, H});
      ple_proj_norm_ = ld.get({"", "model.per_layer_projection_norm.weight"}, {P}, WeightKind::kVector);
    }
    std::vector<float> ones(static_cast<size_t>(config_.head_dim), 1.0f);
    ones_ = upload_f32(ops, ones, storage_);
    for (int64_t l = 0; l < L; ++l) layers_.push_back(load_layer(ld, ops, l));
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
    for (Buffer& b : ld.take_host_storage()) host_storage_.push_back(std::move(b));
  }

  bool move_embeddings_to_host(WeightLoader& ld) override {
    if (io_.tied || host_mapped_bytes_ > 0) return host_mapped_bytes_ > 0;
    const void* device_copy = io_.tok_embd.data;
    io_.tok_embd = load_token_embd_host_mapped(ld, config_);
    std::erase_if(storage_, [&](const Buffer& b) { return b.data() == device_copy; });  // CPU: none
    host_mapped_bytes_ = io_.tok_embd.bytes();
    if (config_.ple_dim > 0) {  // the per-layer table is read a row per token too
      const void* ple_copy = ple_table_.data;
      ple_table_ = ld.get_host_mapped({"", "model.embed_tokens_per_layer.weight"},
                                      {ple_vocab_, config_.n_layer * config_.ple_dim});
      std::erase_if(storage_, [&](const Buffer& b) { return b.data() == ple_copy; });
      host_mapped_bytes_ += ple_table_.bytes();
    }
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
    return true;
  }
  int64_t movable_embedding_bytes() const override {
    return io_.tied ? 0 : io_.tok_embd.bytes() + (config_.ple_dim > 0 ? ple_table_.bytes() : 0);
  }
  int64_t unplaced_bytes() const override {
    return (io_.tok_embd.data ? 0 : io_.tok_embd.bytes()) + (config_.ple_dim > 0 && !ple_table_.data ? ple_table_.bytes() : 0);
  }
  void place_deferred(WeightLoader& ld, Ops&) override {
    place_token_embd(ld, config_, io_.tok_embd);
    if (config_.ple_dim > 0 && !ple_table_.data)
      ple_table_ = ld.get({"", "model.embed_tokens_per_layer.weight"}, {ple_vocab_, config_.n_layer * config_.ple_dim});
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  }

  void forward(ForwardContext& ctx) const override {
    check_tp_group(ctx, tp_);
    Ops& ops = ctx.ops;
    ForwardState& s = ctx.state;
    const int64_t T = ctx.batch.n_tokens, H = config_.n_embd, P = config_.ple_dim, L = config_.n_layer;
    const RmsNormParams norm{static_cast<float>(config_.rms_eps), 0.0f};
    Tensor x = embed(ctx, io_.tok_embd);  // [T, H]
    ops.scale(x, std::sqrt(static_cast<float>(H)), x);
    Tensor ple;  // [L, T, P]
    if (P > 0) {
      ple = s.ple.reshape({s.max_tokens * L * P}).slice(0, L * T * P).reshape({L, T, P});
      Tensor proj = s.ple_proj.reshape({s.max_tokens * L * P}).slice(0, L * T * P).reshape({L, T, P});
      if (!ple_table_.data) fail(ErrorCode::kInternal, "gemma4: the per-layer table was not placed (Model::place_deferred)");
      ops.embedding_split(ple_table_, ctx.token_ids, ple);
      ops.scale(ple, std::sqrt(static_cast<float>(P)), ple);
      for (int64_t l = 0; l < L; ++l) ops.matmul(x, ple_model_proj_.slice(l * P, P), proj.index(l), Tensor());
      Tensor rows = proj.reshape({L * T, P});
      ops.scale(rows, 1.0f / std::sqrt(static_cast<float>(H)), rows);
      ops.rms_norm(norm, rows, ple_proj_norm_, rows);
      ops.add(proj, ple, ple);
      ops.scale(ple, 1.0f / std::sqrt(2.0f), ple);
    }
    Tensor h = s.h.slice(0, T), o = s.sub_out.slice(0, T);  // [T, H]
    for (int64_t l = 0; l < L; ++l) {
      const Layer& Ly = layers_[static_cast<size_t>(l)];
      ActQ8 h_q8;  // h's int8 form as its norm wrote it, for the projections of h
      ops.rms_norm(norm, x, Ly.attn_norm, h, ctx.q8(h_q8));
      ctx.dump_if("attn_norm", l, h);
      attention(ctx, l, Ly, h, o, ctx.q8(h_q8));
      ops.rms_norm(norm, o, Ly.post_attn_norm, o);
      ops.add(x, o, x);
      ctx.dump_if("ffn_inp", l, x);
      ops.rms_norm(norm, x, Ly.pre_ffn_norm, h, ctx.q8(h_q8));
      mlp(ctx, Ly, h, o, ctx.q8(h_q8));
      ctx.dump_if("ffn_out", l, o);
      if (!Ly.router.empty()) {
        ops.rms_norm(norm, o, Ly.post_ffn_norm_1, o);
        Tensor o2 = s.sub_out2.slice(0, T);
        moe(ctx, l, Ly, x, h, o2);
        ctx.dump_if("ffn_moe_out", l, o2);
        ops.rms_norm(norm, o2, Ly.post_ffn_norm_2, o2);
        ops.add(o, o2, o);
      }
      ops.rms_norm(norm, o, Ly.post_ffn_norm, o);
      ops.add(x, o, x);
      if (P > 0) {
        Tensor g = s.ff_gate.reshape({s.max_tokens * s.ff_gate.cols()}).slice(0, T * P).reshape({T, P});
        ops.matmul(x, Ly.ple_gate, g, Tensor());  // [T, P]
        ops.gelu_tanh_mul(g, ple.index(l), g);
        ops.matmul(g, Ly.ple_proj, o, Tensor());  // [T, H]
        ops.rms_norm(norm, o, Ly.post_ple_norm, o);
        ops.add(x, o, x);
      }
      if (Ly.layer_scalar != 1.0f) ops.scale(x, Ly.layer_scalar, x);
      ctx.dump_if("l_out", l, x);
    }
    lm_head(ctx, io_, norm, x);
    if (softcap_ > 0.0f && !ctx.logit_rows.empty()) ops.softcap(ctx.logits, softcap_, ctx.logits);
  }

 private:
  struct Layer {
    int64_t head_dim = 0, n_kv = 0;
    int64_t kv_source = 0;  // the layer whose K/V pages this one reads (itself unless KV-shared)
    AttentionParams attn;
    RopeParams rope;
    Tensor attn_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;  // [H]
    Tensor wq, wk, wv, wo;  // wv empty: v = k_proj's output (attention_k_eq_v)
    Tensor q_norm, k_norm;  // [head_dim]
    MlpWeights mlp;
    // MoE block (enable_moe_block): router [E, H], its norm weight scale / sqrt(H) (F32 [H]),
    // per_expert_scale (F32 [E]), the branch's norms.
    Tensor router, router_norm, expert_scale, pre_ffn_norm_2, post_ffn_norm_1, post_ffn_norm_2;
    Tensor ple_gate, ple_proj, post_ple_norm;  // [P, H], [H, P], [H]
    float layer_scalar = 1.0f;
  };

  void read_config(const json& c) {
    const int64_t L = config_.n_layer;
    const char* src = "config.json";
    if (const json* bidi = opt(c, "use_bidirectional_attention"); bidi && *bidi != false)
      fail(ErrorCode::kUnsupported, "{}: use_bidirectional_attention {} is not supported (causal text models only)", src,
           bidi->dump());
    if (config_.attn_bias) fail(ErrorCode::kUnsupported, "{}: attention_bias true is not supported", src);
    config_.tie_embeddings = !opt(c, "tie_word_embeddings") || flag(c, "tie_word_embeddings");  // default true
    const std::string act = c.value("hidden_activation", std::string("gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh")
      fail(ErrorCode::kUnsupported, "{}: hidden_activation '{}' is not supported (gelu_pytorch_tanh)", src, act);
    // layer_types (transformers' default: every 6th layer full; the last layer always full).
    std::vector<bool> sliding(static_cast<size_t>(L), false);
    if (const json* lt = opt(c, "layer_types"); lt && lt->is_array()) {
      if (static_cast<int64_t>(lt->size()) != L)
        fail(ErrorCode::kInvalidFile, "{}: layer_types has {} entries for {} layers", src, lt->size(), L);
      for (int64_t l = 0; l < L; ++l) {
        const json& t = (*lt)[static_cast<size_t>(l)];
        if (t != "sliding_attention" && t != "full_attention")
          fail(ErrorCode::kUnsupported, "{}: layer_types[{}] {} is not supported", src, l, t.dump());
        sliding[static_cast<size_t>(l)] = t == "sliding_attention";
      }
    } else {
      for (int64_t l = 0; l < L; ++l) sliding[static_cast<size_t>(l)] = (l + 1) % 6 != 0;
    }
    if (L > 0) sliding[static_cast<size_t>(L - 1)] = false;
    const int32_t window = static_cast<int32_t>(num(c, "sliding_window", 512));
    config_.sliding_window = window;
    config_.layer_window.assign(static_cast<size_t>(L), 0);
    for (int64_t l = 0; l < L; ++l)
      if (sliding[static_cast<size_t>(l)]) config_.layer_window[static_cast<size_t>(l)] = window;
    // per_layer_config: {"<layer>": {"head_dim": .., "num_key_value_heads": ..}}; without it
    // transformers gives full layers global_head_dim (default 512) and, with attention_k_eq_v,
    // num_global_key_value_heads.
    k_eq_v_ = flag(c, "attention_k_eq_v");
    geom_.assign(static_cast<size_t>(L), LayerGeom{});
    for (int64_t l = 0; l < L; ++l) {
      LayerGeom& g = geom_[static_cast<size_t>(l)];
      g.sliding = sliding[static_cast<size_t>(l)];
      g.head_dim = config_.head_dim, g.n_kv = config_.n_head_kv;
    }
    if (const json* plc = opt(c, "per_layer_config")) {
      if (!plc->is_object()) fail(ErrorCode::kInvalidFile, "{}: per_layer_config: expected an object", src);
      for (const auto& [key, v] : plc->items()) {
        int64_t l = -1;
        try {
          l = std::stoll(key);
        } catch (...) {
        }
        if (l < 0 || l >= L || !v.is_object())
          fail(ErrorCode::kInvalidFile, "{}: per_layer_config[\"{}\"]: expected a layer index below {} with an object",
               src, key, L);
        for (const auto& [name, val] : v.items()) {
          if (name != "head_dim" && name != "num_key_value_heads")
            fail(ErrorCode::kUnsupported, "{}: per_layer_config[\"{}\"].{} is not supported (head_dim, "
                 "num_key_value_heads)", src, key, name);
          if (!val.is_number_integer() || val.get<int64_t>() <= 0)
            fail(ErrorCode::kInvalidFile, "{}: per_layer_config[\"{}\"].{}: expected a positive integer", src, key, name);
          (name == "head_dim" ? geom_[static_cast<size_t>(l)].head_dim : geom_[static_cast<size_t>(l)].n_kv) =
              val.get<int64_t>();
        }
      }
    } else {
      const int64_t ghd = static_cast<int64_t>(num(c, "global_head_dim", 512));
      const json* gkv = opt(c, "num_global_key_value_heads");
      for (LayerGeom& g : geom_)
        if (!g.sliding) {
          g.head_dim = ghd;
          if (k_eq_v_ && gkv) g.n_kv = gkv->get<int64_t>();
        }
    }
    const json* rp = opt(c, "rope_parameters");
    json rp_default = json::parse(R"({"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0}})");
    const json& rope = rp ? *rp : rp_default;
    int64_t max_hd = 0, max_w = 0;
    for (int64_t l = 0; l < L; ++l) {
      LayerGeom& g = geom_[static_cast<size_t>(l)];
      if (g.head_dim % 2 != 0 || config_.n_head % g.n_kv != 0)
        fail(ErrorCode::kInvalidFile, "{}: layer {}: head_dim {} must be even and {} heads a multiple of {} kv heads",
             src, l, g.head_dim, config_.n_head, g.n_kv);
      g.inv_freq = rope_freqs(rope, g.sliding ? "sliding_attention" : "full_attention", g.head_dim, config_.n_ctx_train);
      max_hd = std::max(max_hd, g.head_dim);
      max_w = std::max(max_w, g.n_kv * g.head_dim);
    }
    // The KV pages and step buffers take the widest layer: head_dim the largest, n_head_kv enough
    // heads of it for the widest K/V row (a divisor of n_head, as validate() wants).
    config_.head_dim = max_hd;
    int64_t kv = (max_w + max_hd - 1) / max_hd;
    while (config_.n_head % kv != 0) ++kv;
    config_.n_head_kv = kv;
    config_.n_rot = max_hd;
    for (const LayerGeom& g : geom_) {
      config_.layer_kv_heads.push_back(g.n_kv);
      config_.layer_head_dim.push_back(g.head_dim);
    }
    // KV sharing: the last num_kv_shared_layers layers read the last earlier layer of their type.
    const int64_t shared = static_cast<int64_t>(num(c, "num_kv_shared_layers", 0));
    if (shared < 0 || shared >= L)
      fail(ErrorCode::kInvalidFile, "{}: num_kv_shared_layers {} must be in [0, {})", src, shared, L);
    first_shared_ = L - shared;
    double_wide_ = flag(c, "use_double_wide_mlp");
    // Per-layer inputs.
    // (transformers' defaults: 256 and 262144; an explicit 0 or null turns per-layer inputs off)
    config_.ple_dim = opt(c, "hidden_size_per_layer_input") || !c.contains("hidden_size_per_layer_input")
                          ? static_cast<int64_t>(num(c, "hidden_size_per_layer_input", 256))
                          : 0;
    ple_vocab_ = static_cast<int64_t>(num(c, "vocab_size_per_layer_input", 262144));
    // MoE block.
    if (flag(c, "enable_moe_block")) {
      config_.n_expert = static_cast<int64_t>(num(c, "num_experts", 0));
      config_.n_expert_used = static_cast<int64_t>(num(c, "top_k_experts", 0));
      config_.n_ff_exp = static_cast<int64_t>(num(c, "moe_intermediate_size", 0));
      if (config_.n_expert <= 0 || config_.n_expert_used <= 0 || config_.n_ff_exp <= 0)
        fail(ErrorCode::kInvalidFile, "{}: enable_moe_block needs num_experts, top_k_experts and moe_intermediate_size "
             "(got {}, {}, {})", src, config_.n_expert, config_.n_expert_used, config_.n_ff_exp);
      config_.router_scoring = RouterScoring::kSoftmax;
      config_.norm_topk_prob = true;
      config_.expert_glu = ExpertGlu::kGeluTanh;
    } else {
      config_.n_expert = config_.n_expert_used = config_.n_ff_exp = 0;
    }
    const int64_t base_ff = config_.n_ff;
    mlp_ff_ = base_ff;
    // ForwardState's FFN buffers hold the widest MLP and the per-layer gate.
    config_.n_ff = std::max({base_ff * (double_wide_ && shared > 0 ? 2 : 1), config_.ple_dim});
    softcap_ = static_cast<float>(num(c, "final_logit_softcapping", 0.0));
    if (softcap_ < 0.0f) fail(ErrorCode::kInvalidFile, "{}: final_logit_softcapping {} must be > 0", src, softcap_);
  }

  /** config_ made tensor-parallel rank tp_'s (the whole model's sizes stay in geom_, full_n_head_ and
   *  mlp_ff_): n_head and each layer's KV heads (layer_kv_heads: tp_kv_heads_read, a KV head replicated
   *  on the ranks whose query heads share it when the size exceeds a layer's KV heads), the KV pages'
   *  n_head_kv for the rank's widest layer, the MLP width n_ff divided by the size. Throws
   *  ft::Error(kUnsupported) naming what the size does not divide. */
  void shard_config() {
    ModelConfig& c = config_;
    c.n_head = dist::tp_heads(full_n_head_, tp_).count;
    (void)dist::tp_ffn(mlp_ff_, tp_);  // refuses an MLP width the size does not divide
    int64_t max_w = 0;
    for (size_t l = 0; l < geom_.size(); ++l) {
      const int64_t kv = tp_kv_heads_read(full_n_head_, geom_[l].n_kv, tp_).count;
      c.layer_kv_heads[l] = kv;
      max_w = std::max(max_w, kv * geom_[l].head_dim);
    }
    int64_t kv = (max_w + c.head_dim - 1) / c.head_dim;
    while (c.n_head % kv != 0) ++kv;
    c.n_head_kv = kv;
    const bool wide = double_wide_ && first_shared_ < c.n_layer;
    c.n_ff = std::max({mlp_ff_ * (wide ? 2 : 1) / tp_.size, c.ple_dim});
  }

  Layer load_layer(WeightLoader& ld, Ops& ops, int64_t l) {
    const ModelConfig& c = config_;  // the rank's sizes; the checkpoint's: geom_, full_n_head_, mlp_ff_
    const LayerGeom& g = geom_[static_cast<size_t>(l)];
    const int64_t H = c.n_embd, hd = g.head_dim, qd = full_n_head_ * hd, kvd = g.n_kv * hd, P = c.ple_dim;
    const dist::TpRange heads = dist::tp_heads(full_n_head_, tp_);
    const dist::TpRange kvr = tp_.size == 1 ? dist::TpRange{0, g.n_kv} : tp_kv_heads_read(full_n_head_, g.n_kv, tp_);
    Layer Ly;
    Ly.head_dim = hd, Ly.n_kv = kvr.count;
    Ly.attn = {static_cast<int32_t>(c.n_head), static_cast<int32_t>(kvr.count), static_cast<int32_t>(hd), 1.0f,
               g.sliding ? c.sliding_window : 0, Tensor()};
    Ly.rope = {RopeMode::kNeox, static_cast<int32_t>(hd), static_cast<int32_t>(hd), upload_f32(ops, g.inv_freq, storage_),
               1.0f};
    auto norm_w = [&](const char* name, int64_t n) {
      return ld.get({"", fmt::format("model.layers.{}.{}.weight", l, name)}, {n}, WeightKind::kVector);
    };
    auto wname = [&](const char* name) { return WeightName{"", fmt::format("model.layers.{}.{}.weight", l, name)}; };
    auto mat = [&](const char* name, int64_t rows, int64_t cols) { return ld.get(wname(name), {rows, cols}); };
    // Column parallel: rows [begin, begin + n) of [rows, cols]; row parallel: its columns (one rank: whole).
    auto mat_rows = [&](const char* name, int64_t rows, int64_t cols, int64_t begin, int64_t n) {
      return tp_.size == 1 ? mat(name, rows, cols) : ld.get_rows(wname(name), {rows, cols}, index_range(begin, n));
    };
    Ly.attn_norm = norm_w("input_layernorm", H);
    Ly.post_attn_norm = norm_w("post_attention_layernorm", H);
    Ly.pre_ffn_norm = norm_w("pre_feedforward_layernorm", H);
    Ly.post_ffn_norm = norm_w("post_feedforward_layernorm", H);
    Ly.wq = mat_rows("self_attn.q_proj", qd, H, heads.begin * hd, heads.count * hd);  // the rank's heads
    Ly.q_norm = norm_w("self_attn.q_norm", hd);  // per head: whole
    Ly.wo = tp_.size == 1 ? mat("self_attn.o_proj", H, qd)
                          : ld.get_cols(wname("self_attn.o_proj"), {H, qd}, heads.begin * hd, heads.count * hd);
    Ly.kv_source = l;
    if (l >= first_shared_) {
      int64_t src = -1;
      for (int64_t j = first_shared_ - 1; j >= 0 && src < 0; --j)
        if (geom_[static_cast<size_t>(j)].sliding == g.sliding) src = j;
      if (src < 0)
        fail(ErrorCode::kInvalidFile, "layer {} shares K/V (num_kv_shared_layers) but no earlier layer has its type", l);
      const LayerGeom& sg = geom_[static_cast<size_t>(src)];
      if (sg.head_dim != hd || sg.n_kv != g.n_kv)
        fail(ErrorCode::kInvalidFile, "layer {} shares layer {}'s K/V but their heads differ ({} x {} vs {} x {})", l,
             src, g.n_kv, hd, sg.n_kv, sg.head_dim);
      Ly.kv_source = src;
    } else {
      Ly.wk = mat_rows("self_attn.k_proj", kvd, H, kvr.begin * hd, kvr.count * hd);  // the KV heads the rank reads
      Ly.k_norm = norm_w("self_attn.k_norm", hd);
      if (!(k_eq_v_ && !g.sliding)) Ly.wv = mat_rows("self_attn.v_proj", kvd, H, kvr.begin * hd, kvr.count * hd);
    }
    const int64_t F = mlp_ff_ * (double_wide_ && l >= first_shared_ ? 2 : 1);
    Ly.mlp = load_mlp_shard(ld, wname("mlp.gate_proj"), wname("mlp.up_proj"), wname("mlp.down_proj"), H, F, tp_);
    if (c.n_expert > 0) {
      const int64_t E = c.n_expert, Fe = c.n_ff_exp;
      Ly.router = mat("router.proj", E, H);
      std::vector<float> sc(static_cast<size_t>(H)), pes(static_cast<size_t>(E));
      const Tensor scale = ld.host({"", fmt::format("model.layers.{}.router.scale", l)}, {H}, WeightKind::kVector);
      dequantize_row(scale.dtype, scale.data, sc.data(), H);
      for (float& v : sc) v *= static_cast<float>(1.0 / std::sqrt(static_cast<double>(H)));
      Ly.router_norm = upload_f32(ops, sc, storage_);
      const Tensor pe = ld.host({"", fmt::format("model.layers.{}.router.per_expert_scale", l)}, {E}, WeightKind::kVector);
      dequantize_row(pe.dtype, pe.data, pes.data(), E);
      Ly.expert_scale = upload_f32(ops, pes, storage_);
      Ly.pre_ffn_norm_2 = norm_w("pre_feedforward_layernorm_2", H);
      Ly.post_ffn_norm_1 = norm_w("post_feedforward_layernorm_1", H);
      Ly.post_ffn_norm_2 = norm_w("post_feedforward_layernorm_2", H);
      // experts.gate_up_proj [E, 2F, H] (gate rows, then up rows) and down_proj [E, H, F]: views.
      const Tensor gu = ld.host_routed({"", fmt::format("model.layers.{}.experts.gate_up_proj", l)}, {E, 2 * Fe, H});
      const Tensor dn = ld.host_routed({"", fmt::format("model.layers.{}.experts.down_proj", l)}, {E, H, Fe});
      ExpertBank b;
      for (int64_t e = 0; e < E; ++e) {
        b.gate.push_back(gu.index(e).slice(0, Fe));
        b.up.push_back(gu.index(e).slice(Fe, Fe));
        b.down.push_back(dn.index(e));
      }
      b.glu = ExpertGlu::kGeluTanh;
      host_experts_.push_back(std::move(b));
    }
    if (P > 0) {
      Ly.ple_gate = mat("per_layer_input_gate", P, H);
      Ly.ple_proj = mat("per_layer_projection", H, P);
      Ly.post_ple_norm = norm_w("post_per_layer_input_norm", H);
    }
    const WeightName scalar{"", fmt::format("model.layers.{}.layer_scalar", l)};
    if (ld.has(scalar)) {
      const Tensor t = ld.host(scalar, {1}, WeightKind::kVector);
      dequantize_row(t.dtype, t.data, &Ly.layer_scalar, 1);
    }
    return Ly;
  }

  /** out [T, H] = o_proj(attention of h) for layer l, its K/V written to its pages (KV-shared layers
   *  read their source layer's pages and write none). h_q8: h's int8 form from its norm (ActQ8). */
  void attention(ForwardContext& ctx, int64_t l, const Layer& Ly, const Tensor& h, Tensor out,
                 const ActQ8* h_q8) const {
    Ops& ops = ctx.ops;
    ForwardState& s = ctx.state;
    const int64_t T = h.rows(), hd = Ly.head_dim, qd = config_.n_head * hd, kvd = Ly.n_kv * hd;
    auto view = [&](const Tensor& buf, int64_t cols) {
      return buf.reshape({buf.rows() * buf.cols()}).slice(0, T * cols).reshape({T, cols});
    };
    Tensor q = view(s.q, qd), attn = view(s.attn, qd);
    const RmsNormParams np{static_cast<float>(config_.rms_eps), 0.0f};
    ops.matmul(h, Ly.wq, q, Tensor(), h_q8);
    ops.norm_rope(np, Ly.q_norm, Ly.rope, q, ctx.batch.positions);
    const KvLayer full = ctx.kv.layer(static_cast<int32_t>(Ly.kv_source));
    // This layer's heads over a prefix of the pages (sized for the widest layer).
    const KvLayer kv = kv_head_view(full, Ly.n_kv, hd);
    const BatchInfo& kvb = ctx.kv_batch(Ly.kv_source);
    if (Ly.kv_source == l) {
      Tensor k = view(s.k, kvd), v = view(s.v, kvd);
      ops.matmul(h, Ly.wk, k, Tensor(), h_q8);
      if (Ly.wv.empty()) ops.copy(k, v);  // attention_k_eq_v: v from k_proj, before k_norm
      else ops.matmul(h, Ly.wv, v, Tensor(), h_q8);
      ops.norm_rope(np, Ly.k_norm, Ly.rope, k, ctx.batch.positions);
      Tensor vr = v.reshape({T * Ly.n_kv, hd});
      ops.rms_norm(np, vr, ones_.slice(0, hd), vr);  // v_norm: no weight
      ops.kv_write(kvb, k, v, kv);
    }
    ActQ8 attn_q8;  // attn's int8 form when the decode attention wrote it
    ops.attention(Ly.attn, kvb, q, kv, attn, ctx.q8(attn_q8));  // [T, n_head * hd]
    ctx.dump_if("kqv_out", l, attn);
    ops.matmul(attn, Ly.wo, out, Tensor(), ctx.q8(attn_q8));
    tp_all_reduce(ctx, out);  // tensor parallel: the heads' partial sums
  }

  /** out [T, H] = down(gelu_tanh(gate h) * up h). h_q8: h's int8 form from its norm (ActQ8). */
  void mlp(ForwardContext& ctx, const Layer& Ly, const Tensor& h, Tensor out, const ActQ8* h_q8) const {
    ForwardState& s = ctx.state;
    const int64_t T = h.rows(), F = Ly.mlp.gate.dim(0);
    Tensor g = s.ff_gate.reshape({s.max_tokens * s.ff_gate.cols()}).slice(0, T * F).reshape({T, F});
    Tensor u = s.ff_up.reshape({s.max_tokens * s.ff_up.cols()}).slice(0, T * F).reshape({T, F});
    ctx.ops.matmul(h, Ly.mlp.gate, g, Tensor(), h_q8);
    ctx.ops.matmul(h, Ly.mlp.up, u, Tensor(), h_q8);
    ctx.ops.gelu_tanh_mul(g, u, g);
    ctx.ops.matmul(g, Ly.mlp.down, out, Tensor());
    tp_all_reduce(ctx, out);  // tensor parallel: the MLP columns' partial sums
  }

  /** out [T, H] = the routed experts of layer l: routes from the residual x, experts on
   *  RMSNorm_pre_ffn_2(x) (scratch: h [T, H]). */
  void moe(ForwardContext& ctx, int64_t l, const Layer& Ly, const Tensor& x, Tensor h, Tensor out) const {
    if (!ctx.experts) fail(ErrorCode::kInvalidArgument, "layer {}: a MoE layer needs an expert executor", l);
    Ops& ops = ctx.ops;
    MoeScratch& ms = ctx.state.moe;
    const int64_t T = x.rows();
    const RmsNormParams np{static_cast<float>(config_.rms_eps), 0.0f};
    Tensor logits = ms.router_logits.slice(0, T), ids = ms.ids.slice(0, T), weights = ms.weights.slice(0, T);
    ActQ8 h_q8;  // h's int8 form as each norm wrote it
    ops.rms_norm(np, x, Ly.router_norm, h, ctx.q8(h_q8));  // RMSNorm(x) * scale / sqrt(H)
    const RouterParams rp{static_cast<int32_t>(config_.n_expert_used), RouterScoring::kSoftmax, true, 1.0f, 1, 1,
                          Tensor()};
    ops.moe_router(rp, h, Ly.router, Tensor(), logits, ids, weights, ctx.batch.n_valid, ctx.q8(h_q8));
    ops.moe_expert_scale(ids, Ly.expert_scale, weights);
    ops.rms_norm(np, x, Ly.pre_ffn_norm_2, h, ctx.q8(h_q8));
    ctx.experts->compute(l, h, ids, weights, out, ctx.q8(h_q8));
  }

  std::vector<LayerGeom> geom_;
  bool k_eq_v_ = false, double_wide_ = false;
  int64_t first_shared_ = 0, mlp_ff_ = 0, ple_vocab_ = 0;
  int64_t full_n_head_ = 0;  // the checkpoint's query heads (config_.n_head: the rank's)
  float softcap_ = 0.0f;
  OutputWeights io_;
  Tensor ones_;  // F32 [head_dim]: the weight of the unweighted v_norm
  Tensor ple_table_, ple_model_proj_, ple_proj_norm_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<Model> build_gemma4(ModelConfig c, WeightLoader& ld, Ops& ops) {
  if (ld.is_gguf()) fail(ErrorCode::kUnsupported, "gemma4: GGUF checkpoints are not supported (safetensors only)");
  const json raw = ld.checkpoint().metadata().value("config", json::object());
  return std::make_unique<Gemma4>(std::move(c), raw, ld, ops);
}

}  // namespace ft
