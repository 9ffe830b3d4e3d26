#include "hf_to_gguf.h"

#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/gguf_writer.h"
#include "formats/hf_config.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// ---- config.json access (the converter's find_hparam) ----

const json* find(const json& c, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto it = c.find(k); it != c.end() && !it->is_null()) return &*it;
  return nullptr;
}

int64_t need_int(const json& c, std::initializer_list<const char*> keys) {
  const json* v = find(c, keys);
  if (!v || !v->is_number_integer())
    fail(ErrorCode::kInvalidFile, "config.json: {}: missing or not an integer (the GGUF converter needs it)",
         *keys.begin());
  return v->get<int64_t>();
}

/** transformers 5 `rope_parameters`, else the older top-level rope_theta + rope_scaling. */
json rope_parameters(const json& c) {
  if (const json* rp = find(c, {"rope_parameters"}); rp && rp->is_object()) return *rp;
  json p = find(c, {"rope_scaling"}) ? c["rope_scaling"] : json::object();
  if (const json* t = find(c, {"rope_theta"})) p["rope_theta"] = *t;
  return p;
}

// ---- the writer with llama.cpp's tensor-type rules ----

class Out {
 public:
  Out(const std::string& arch, const HfToGgufOptions& o) : a_(arch + "."), o_(o) {}

  void kv(const std::string& key, GgufValue v) {
    if (!o_.omit_keys.count(key)) w_.add(key, std::move(v));
  }
  void u32(const std::string& arch_key, int64_t v) { kv(a_ + arch_key, GgufValue::u32(static_cast<uint32_t>(v))); }
  void f32(const std::string& arch_key, double v) { kv(a_ + arch_key, GgufValue::f32(static_cast<float>(v))); }

  /** Writes `values` (row-major `shape`) as `name`. Type: F32 for 1-D tensors, *_norm weights and
   *  ffn_gate_inp (convert_hf_to_gguf.py's always-F32 set), else the matrix type; Q8_0 rows that are
   *  not whole blocks fall back to F16. */
  void tensor(const std::string& name, const std::vector<float>& values, const std::vector<int64_t>& shape) {
    DType t = o_.matrix_type;
    const bool f32 = shape.size() <= 1 || name.ends_with("_norm.weight") || name.find(".ffn_gate_inp.") != std::string::npos;
    if (f32) t = DType::F32;
    if (dtype_info(t).block_size > 1 && shape.back() % dtype_info(t).block_size != 0) t = DType::F16;
    const int64_t n = static_cast<int64_t>(values.size());
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_bytes(t, n)));
    const int64_t row = shape.back(), row_bytes = dtype_bytes(t, row);
    for (int64_t r = 0; r * row < n; ++r) quantize_row(t, values.data() + r * row, bytes.data() + r * row_bytes, row);
    w_.add_tensor(name, t, shape, bytes.data(), static_cast<int64_t>(bytes.size()));
    ++n_tensors_;
  }
  void write(const std::string& path) const { w_.write(path); }
  int64_t n_tensors() const { return n_tensors_; }

 private:
  std::string a_;
  const HfToGgufOptions& o_;
  GgufWriter w_;
  int64_t n_tensors_ = 0;
};

// ---- the checkpoint's tensors as floats, each consumed once ----

class Source {
 public:
  explicit Source(const Checkpoint& ck) : ck_(ck) {
    for (const TensorInfo& t : ck.tensors()) left_.insert(t.name);
  }
  bool has(const std::string& name) const { return ck_.find(name) != nullptr; }
  /** Row-major values and shape of `name`, marked as converted unless `peek`. */
  std::vector<float> take(const std::string& name, std::vector<int64_t>* shape = nullptr, bool peek = false) {
    const TensorInfo& t = ck_.get(name);
    if (!can_dequantize(t.dtype) || dtype_info(t.dtype).is_quantized)
      fail(ErrorCode::kUnsupported, "{}: tensor {} is {} (the converter takes F32, F16 or BF16)", ck_.path(), name,
           dtype_name(t.dtype));
    std::vector<float> v(static_cast<size_t>(t.numel()));
    dequantize_row(t.dtype, t.data, v.data(), t.numel());
    if (shape) *shape = t.shape;
    if (!peek) left_.erase(name);
    return v;
  }
  void drop(const std::string& name) { left_.erase(name); }
  /** Throws kInvalidFile naming the first tensor no rule converted (llama.cpp: "Can not map tensor"). */
  void check_all_taken() const {
    if (!left_.empty())
      fail(ErrorCode::kInvalidFile, "{}: cannot map tensor {} to a GGUF name ({} unmapped)", ck_.path(),
           *left_.begin(), left_.size());
  }
  const std::set<std::string>& left() const { return left_; }

 private:
  const Checkpoint& ck_;
  std::set<std::string> left_;
};

enum class Arch { kDeepseek2, kGlm4Moe, kMinimaxM2, kGptOss, kQwen3Next, kQwen35, kQwen35Moe };

/** Qwen3-Next and Qwen3.5 (llama.cpp's Qwen3NextModel and its _LinearAttentionVReorderBase subclasses). */
bool linear_arch(Arch a) { return a == Arch::kQwen3Next || a == Arch::kQwen35 || a == Arch::kQwen35Moe; }

struct ArchInfo {
  Arch arch;
  const char* gguf;
};

ArchInfo arch_of(const json& c, const std::string& dir) {
  const json* a = find(c, {"architectures"});
  const std::string name = a && a->is_array() && !a->empty() && (*a)[0].is_string() ? (*a)[0].get<std::string>() : "";
  if (name == "DeepseekV3ForCausalLM" || name == "DeepseekV2ForCausalLM") return {Arch::kDeepseek2, "deepseek2"};
  if (name == "Glm4MoeForCausalLM") return {Arch::kGlm4Moe, "glm4moe"};
  if (name == "MiniMaxM2ForCausalLM") return {Arch::kMinimaxM2, "minimax-m2"};
  if (name == "GptOssForCausalLM") return {Arch::kGptOss, "gpt-oss"};
  if (name == "Qwen3NextForCausalLM") return {Arch::kQwen3Next, "qwen3next"};
  if (name == "Qwen3_5ForCausalLM") return {Arch::kQwen35, "qwen35"};
  if (name == "Qwen3_5MoeForCausalLM") return {Arch::kQwen35Moe, "qwen35moe"};
  fail(ErrorCode::kUnsupported, "{}: architecture '{}' is not one this converter writes (DeepseekV3ForCausalLM, "
       "Glm4MoeForCausalLM, MiniMaxM2ForCausalLM, GptOssForCausalLM, Qwen3NextForCausalLM, Qwen3_5ForCausalLM, "
       "Qwen3_5MoeForCausalLM)", dir, name);
}

// ---- metadata (TextModel.set_gguf_parameters + the model class's) ----

void write_metadata(Out& o, const json& c, const ArchInfo& ai, int64_t block_count, const HfToGgufOptions& opt) {
  const bool ds = ai.arch == Arch::kDeepseek2, glm = ai.arch == Arch::kGlm4Moe;
  o.kv("general.architecture", GgufValue::string(ai.gguf));
  o.kv("general.type", GgufValue::string("model"));
  o.kv("general.name", GgufValue::string(std::string(ai.gguf) + " (converted by FreeToken's test converter)"));
  const int64_t n_head = need_int(c, {"num_attention_heads"});
  o.u32("block_count", block_count);
  if (const json* v = find(c, {"max_position_embeddings"})) o.u32("context_length", v->get<int64_t>());
  o.u32("embedding_length", need_int(c, {"hidden_size"}));
  if (const json* v = find(c, {"intermediate_size"})) o.u32("feed_forward_length", v->get<int64_t>());
  o.u32("attention.head_count", n_head);
  // deepseek2 runs MLA as MQA over the latent: one KV head.
  o.u32("attention.head_count_kv", ds ? 1 : need_int(c, {"num_key_value_heads"}));
  const json rp = rope_parameters(c);
  if (const json* t = find(rp, {"rope_theta"})) o.f32("rope.freq_base", t->get<double>());
  const std::string rope_type = rp.value("rope_type", rp.value("type", std::string("default")));
  if (rope_type == "yarn" && find(rp, {"factor"})) {
    o.kv(std::string(ai.gguf) + ".rope.scaling.type", GgufValue::string("yarn"));
    o.f32("rope.scaling.factor", rp["factor"].get<double>());
    o.u32("rope.scaling.original_context_length", need_int(rp, {"original_max_position_embeddings"}));
    if (const json* v = find(rp, {"attention_factor", "attn_factor"})) o.f32("rope.scaling.attn_factor", v->get<double>());
    if (const json* v = find(rp, {"beta_fast"})) o.f32("rope.scaling.yarn_beta_fast", v->get<double>());
    if (const json* v = find(rp, {"beta_slow"})) o.f32("rope.scaling.yarn_beta_slow", v->get<double>());
  } else if (rope_type == "linear" && find(rp, {"factor"})) {
    o.kv(std::string(ai.gguf) + ".rope.scaling.type", GgufValue::string("linear"));
    o.f32("rope.scaling.factor", rp["factor"].get<double>());
  }
  o.f32("attention.layer_norm_rms_epsilon", find(c, {"rms_norm_eps"}) ? c["rms_norm_eps"].get<double>() : 1e-6);
  if (ai.arch != Arch::kQwen35) {  // qwen35 is dense
    o.u32("expert_count", need_int(c, {"num_local_experts", "num_experts", "n_routed_experts"}));
    o.u32("expert_used_count", need_int(c, {"num_experts_per_tok"}));
  }
  if (const json* v = find(c, {"n_group"})) o.u32("expert_group_count", v->get<int64_t>());
  if (const json* v = find(c, {"topk_group"})) o.u32("expert_group_used_count", v->get<int64_t>());
  // The three others route with sigmoid scores (their real configs say scoring_func "sigmoid"; the
  // tiny fixtures' configs leave it out, and glm.py writes SIGMOID unconditionally). gpt-oss.py
  // writes no gating key (llama.cpp hard-codes its softmax over the selected logits).
  const bool oss = ai.arch == Arch::kGptOss, q3n = linear_arch(ai.arch);
  if (const json* v = find(c, {"scoring_func"}); !oss && !q3n && v && v->get<std::string>() != "sigmoid")
    fail(ErrorCode::kUnsupported, "config.json: scoring_func '{}' is not sigmoid", v->get<std::string>());
  if (!oss && !q3n) o.u32("expert_gating_func", 2);  // gguf ExpertGatingFuncType.SIGMOID
  const int64_t head_dim = find(c, {"head_dim"}) ? c["head_dim"].get<int64_t>() : need_int(c, {"hidden_size"}) / n_head;
  if (!ds) {
    o.u32("attention.key_length", head_dim);
    o.u32("attention.value_length", head_dim);
  }
  o.kv("general.file_type", GgufValue::u32(opt.matrix_type == DType::Q8_0 ? 7 : opt.matrix_type == DType::F16 ? 1
                                           : opt.matrix_type == DType::F32 ? 0 : 32));
  o.kv("general.quantization_version", GgufValue::u32(2));

  if (oss) {  // conversion/gpt_oss.py GptOssModel: expert width = intermediate_size
    o.u32("attention.sliding_window", need_int(c, {"sliding_window"}));
    o.u32("expert_feed_forward_length", need_int(c, {"intermediate_size"}));
    return;
  }
  if (q3n) {  // Qwen2MoeModel + Qwen3NextModel.set_gguf_parameters
    if (ai.arch != Arch::kQwen35) {
      o.u32("expert_feed_forward_length", need_int(c, {"moe_intermediate_size"}));
      o.u32("expert_shared_feed_forward_length", need_int(c, {"shared_expert_intermediate_size"}));
    }
    if (const json* v = find(c, {"norm_topk_prob"}); v && v->get<bool>())
      o.kv(std::string(ai.gguf) + ".expert_weights_norm", GgufValue::boolean(true));
    o.u32("ssm.conv_kernel", need_int(c, {"linear_conv_kernel_dim"}));
    o.u32("ssm.state_size", need_int(c, {"linear_key_head_dim"}));
    o.u32("ssm.group_count", need_int(c, {"linear_num_key_heads"}));
    o.u32("ssm.time_step_rank", need_int(c, {"linear_num_value_heads"}));
    o.u32("ssm.inner_size", need_int(c, {"linear_value_head_dim"}) * need_int(c, {"linear_num_value_heads"}));
    // llama.cpp writes full_attention_interval (default 4) and derives the layer kinds from it; the tiny
    // fixture names its kinds only in layer_types (every 2nd layer attends), so the interval is taken
    // from them here, and a pattern no interval describes is refused.
    int64_t every = find(c, {"full_attention_interval"}) ? c["full_attention_interval"].get<int64_t>() : 4;
    if (const json* lt = find(c, {"layer_types"}); lt && lt->is_array()) {
      every = 0;
      for (size_t l = 0; l < lt->size() && every == 0; ++l)
        if ((*lt)[l] == "full_attention") every = static_cast<int64_t>(l) + 1;
      for (size_t l = 0; l < lt->size(); ++l)
        if (every == 0 || ((*lt)[l] == "full_attention") != ((static_cast<int64_t>(l) + 1) % every == 0))
          fail(ErrorCode::kUnsupported, "config.json: layer_types has no full_attention_interval");
    }
    o.u32("full_attention_interval", every);
    const double partial = rp.value("partial_rotary_factor", c.value("partial_rotary_factor", 0.25));
    o.u32("rope.dimension_count", static_cast<int64_t>(static_cast<double>(head_dim) * partial));
    return;
  }
  if (ai.arch == Arch::kMinimaxM2) {
    o.u32("expert_feed_forward_length", need_int(c, {"intermediate_size"}));
    const json* rd = find(c, {"rotary_dim"});  // llama.cpp requires it; transformers 5 may fold it into the factor
    const double partial = rp.value("partial_rotary_factor", c.value("partial_rotary_factor", 1.0));
    o.u32("rope.dimension_count", rd ? rd->get<int64_t>() : static_cast<int64_t>(static_cast<double>(head_dim) * partial));
    return;
  }
  o.u32("leading_dense_block_count", need_int(c, {"first_k_dense_replace"}));
  o.u32("expert_feed_forward_length", need_int(c, {"moe_intermediate_size"}));
  o.u32("expert_shared_count", find(c, {"n_shared_experts"}) ? c["n_shared_experts"].get<int64_t>() : 0);
  if (const json* v = find(c, {"routed_scaling_factor"})) o.f32("expert_weights_scale", v->get<double>());
  if (const json* v = find(c, {"norm_topk_prob"}); v && (glm || v->get<bool>()))
    o.kv(std::string(ai.gguf) + ".expert_weights_norm", GgufValue::boolean(v->get<bool>()));
  if (glm) {
    const double partial = rp.value("partial_rotary_factor", c.value("partial_rotary_factor", 0.5));
    o.u32("rope.dimension_count", static_cast<int64_t>(static_cast<double>(head_dim) * partial));
    if (const json* v = find(c, {"num_nextn_predict_layers"})) o.u32("nextn_predict_layers", v->get<int64_t>());
    return;
  }
  // deepseek2: the latent's widths in key_length / value_length, the per-head ones in *_mla.
  o.u32("vocab_size", need_int(c, {"vocab_size"}));
  if (const json* v = find(c, {"q_lora_rank"})) o.u32("attention.q_lora_rank", v->get<int64_t>());
  const int64_t R = need_int(c, {"kv_lora_rank"}), rope = need_int(c, {"qk_rope_head_dim"});
  o.u32("attention.kv_lora_rank", R);
  o.u32("attention.key_length", R + rope);
  o.u32("attention.value_length", R);
  o.u32("attention.key_length_mla", need_int(c, {"qk_nope_head_dim"}) + rope);
  o.u32("attention.value_length_mla", need_int(c, {"v_head_dim"}));
  o.u32("rope.dimension_count", rope);
  if (const json* m = find(rp, {"mscale_all_dim"})) o.f32("rope.scaling.yarn_log_multiplier", 0.1 * m->get<double>());
}

// ---- tokenizer (llama.cpp's _set_vocab_gpt2 over a byte-level BPE tokenizer.json) ----

void write_tokenizer(Out& o, const json& c, const HfToGgufOptions& opt) {
  const json tok = read_json_file(opt.tokenizer_dir + "/tokenizer.json");
  const fs::path cfg_path = fs::path(opt.tokenizer_dir) / "tokenizer_config.json";
  const json cfg = fs::exists(cfg_path) ? read_json_file(cfg_path.string()) : json::object();
  const int64_t V = need_int(c, {"vocab_size"});
  std::vector<std::string> tokens(static_cast<size_t>(V));
  std::vector<int32_t> types(static_cast<size_t>(V), 5);  // UNUSED: "[PAD{i}]"
  for (int64_t i = 0; i < V; ++i) tokens[static_cast<size_t>(i)] = fmt::format("[PAD{}]", i);
  std::map<std::string, int32_t> ids;
  auto put = [&](const std::string& t, int64_t id, int32_t type) {
    if (id < 0 || id >= V) fail(ErrorCode::kInvalidFile, "tokenizer.json: token id {} outside the vocabulary ({})", id, V);
    tokens[static_cast<size_t>(id)] = t, types[static_cast<size_t>(id)] = type, ids[t] = static_cast<int32_t>(id);
  };
  for (const auto& [t, id] : tok.at("model").at("vocab").items()) put(t, id.get<int64_t>(), 1);  // NORMAL
  for (const json& a : tok.value("added_tokens", json::array()))  // CONTROL when special, else USER_DEFINED
    put(a.at("content").get<std::string>(), a.at("id").get<int64_t>(), a.value("special", false) ? 3 : 4);
  std::vector<std::string> merges;
  for (const json& m : tok.at("model").value("merges", json::array()))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  o.kv("tokenizer.ggml.model", GgufValue::string("gpt2"));
  o.kv("tokenizer.ggml.pre", GgufValue::string(opt.tokenizer_pre));
  o.kv("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  o.kv("tokenizer.ggml.token_type", GgufValue::numeric_array(GgufType::I32, types.data(), types.size()));
  o.kv("tokenizer.ggml.merges", GgufValue::string_array(merges));
  // gguf.SpecialVocab: ids from tokenizer_config's token strings, else config.json's *_token_id.
  using Special = std::tuple<const char*, const char*, const char*>;  // GGUF kind, tokenizer_config key, config.json key
  for (const auto& [kind, key, cfg_key] : std::initializer_list<Special>{
           {"bos", "bos_token", "bos_token_id"}, {"eos", "eos_token", "eos_token_id"}, {"padding", "pad_token", "pad_token_id"}}) {
    int64_t id = -1;
    if (const json* t = find(cfg, {key}); t && t->is_string() && ids.count(t->get<std::string>()))
      id = ids[t->get<std::string>()];
    else if (const json* v = find(c, {cfg_key}); v && v->is_number_integer())
      id = v->get<int64_t>();
    if (id >= 0) o.kv(fmt::format("tokenizer.ggml.{}_token_id", kind), GgufValue::u32(static_cast<uint32_t>(id)));
  }
  for (const char* k : {"add_bos_token", "add_eos_token"})
    if (const json* v = find(cfg, {k}); v && v->is_boolean())
      o.kv(std::string("tokenizer.ggml.") + k, GgufValue::boolean(v->get<bool>()));
  if (const json* t = find(cfg, {"chat_template"}); t && t->is_string())
    o.kv("tokenizer.chat_template", GgufValue::string(t->get<std::string>()));
}

// ---- tensors ----

/** HF module suffix (after "model.layers.N.") -> GGUF name (after "blk.N."), for 2-D weights,
 *  biases and norms. `post_norm`: the GGUF name of post_attention_layernorm. */
std::vector<std::pair<std::string, std::string>> layer_names(const std::string& post_norm) {
  return {
      {"input_layernorm", "attn_norm"},
      {"post_attention_layernorm", post_norm},
      {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"},
      {"self_attn.q_a_proj", "attn_q_a"},
      {"self_attn.q_a_layernorm", "attn_q_a_norm"},
      {"self_attn.q_b_proj", "attn_q_b"},
      {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa"},
      {"self_attn.kv_a_layernorm", "attn_kv_a_norm"},
      {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"},
      {"mlp.gate", "ffn_gate_inp"},
      {"block_sparse_moe.gate", "ffn_gate_inp"},
      {"mlp.router", "ffn_gate_inp"},  // gpt-oss (weight and bias)
      {"mlp.shared_experts.gate_proj", "ffn_gate_shexp"},
      {"mlp.shared_experts.up_proj", "ffn_up_shexp"},
      {"mlp.shared_experts.down_proj", "ffn_down_shexp"},
      {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},  // Qwen2-MoE / Qwen3-Next
      {"mlp.shared_expert.up_proj", "ffn_up_shexp"},
      {"mlp.shared_expert.down_proj", "ffn_down_shexp"},
      {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"},
      {"linear_attn.norm", "ssm_norm"},  // Qwen3-Next's Gated DeltaNet
      {"linear_attn.out_proj", "ssm_out"},
      {"linear_attn.in_proj_ba", "ssm_ba"},
      {"eh_proj", "nextn.eh_proj"},  // GLM MTP layers
      {"enorm", "nextn.enorm"},
      {"hnorm", "nextn.hnorm"},
      {"embed_tokens", "nextn.embed_tokens"},
      {"shared_head.head", "nextn.shared_head_head"},
      {"shared_head.norm", "nextn.shared_head_norm"},
  };
}

/** gpt-oss's fused experts (gpt_oss.py modify_tensors, BF16 path): gate_up_proj [E, H, 2F]
 *  transposed to [E, 2F, H] and split into even rows (ffn_gate_exps) and odd rows (ffn_up_exps);
 *  down_proj [E, F, H] transposed to ffn_down_exps [E, H, F]; the biases split the same way
 *  (ffn_{gate,up}_exps.bias [E, F], ffn_down_exps.bias [E, H]). */
template <typename Take>
void write_fused_experts(Out& o, Take& take, std::vector<int64_t>& shape, const std::string& p, const std::string& b) {
  const std::vector<float> gu = take(p + "mlp.experts.gate_up_proj");
  const int64_t E = shape[0], H = shape[1], F = shape[2] / 2;
  std::vector<float> g(static_cast<size_t>(E * F * H)), u(g.size());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t f = 0; f < F; ++f)
      for (int64_t h = 0; h < H; ++h) {
        const size_t at = static_cast<size_t>((e * F + f) * H + h), from = static_cast<size_t>((e * H + h) * 2 * F + 2 * f);
        g[at] = gu[from], u[at] = gu[from + 1];
      }
  o.tensor(b + "ffn_gate_exps.weight", g, {E, F, H});
  o.tensor(b + "ffn_up_exps.weight", u, {E, F, H});
  const std::vector<float> dn = take(p + "mlp.experts.down_proj");  // [E, F, H]
  std::vector<float> d(dn.size());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t f = 0; f < F; ++f)
        d[static_cast<size_t>((e * H + h) * F + f)] = dn[static_cast<size_t>((e * F + f) * H + h)];
  o.tensor(b + "ffn_down_exps.weight", d, {E, H, F});
  const std::vector<float> gub = take(p + "mlp.experts.gate_up_proj_bias");  // [E, 2F]
  std::vector<float> gb(static_cast<size_t>(E * F)), ub(gb.size());
  for (size_t i = 0; i < gb.size(); ++i) gb[i] = gub[2 * i], ub[i] = gub[2 * i + 1];
  o.tensor(b + "ffn_gate_exps.bias", gb, {E, F});
  o.tensor(b + "ffn_up_exps.bias", ub, {E, F});
  const std::vector<float> db = take(p + "mlp.experts.down_proj_bias");
  o.tensor(b + "ffn_down_exps.bias", db, {E, H});
}

/** Layer `l`'s tensors written as block `blk` (blk != l: the stand-in MTP block). */
void write_layer(Out& o, Source& src, const json& c, const ArchInfo& ai, int64_t l, int64_t blk,
                 const HfToGgufOptions& opt) {
  const std::string p = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", blk);
  std::vector<int64_t> shape;
  // the stand-in block re-reads layer l, already converted
  auto take = [&](const std::string& name) { return src.take(name, &shape, blk != l); };
  const bool post_norm = ai.arch == Arch::kGlm4Moe || ai.arch == Arch::kGptOss, q3n = linear_arch(ai.arch);
  for (const auto& [hf, gg] : layer_names(post_norm ? "post_attention_norm" : "ffn_norm"))
    for (const char* suffix : {"weight", "bias"})
      if (const std::string n = p + hf + "." + suffix;
          src.has(n) && !(hf == "linear_attn.out_proj" && q3n && ai.arch != Arch::kQwen3Next)) {  // qwen35: below
        std::vector<float> v = take(n);
        // qwen3next: every norm but the DeltaNet's gated one is stored as 1 + w (zero-centred in HF).
        if (q3n && std::string(suffix) == "weight" && hf.ends_with("norm") && hf != "linear_attn.norm")
          for (float& x : v) x += 1.0f;
        o.tensor(b + gg + "." + suffix, v, shape);
      }
  if (q3n && src.has(p + "linear_attn.A_log")) {  // Qwen3NextModel.modify_tensors
    const int64_t Hk = need_int(c, {"linear_num_key_heads"}), dk = need_int(c, {"linear_key_head_dim"}),
                  dv = need_int(c, {"linear_value_head_dim"}), r = need_int(c, {"linear_num_value_heads"}) / Hk;
    // Qwen3.5 (_LinearAttentionVReorderBase): value heads from grouped (g r + i) to tiled (i Hk + g)
    // order, rows of `dim` values each starting at row `first` (of rows of `cols` values), or columns.
    const bool tiled = ai.arch != Arch::kQwen3Next;
    auto tile_rows = [&](std::vector<float>& v, int64_t first, int64_t dim, int64_t cols) {
      if (!tiled) return;
      const std::vector<float> src_v = v;
      for (int64_t g = 0; g < Hk; ++g)
        for (int64_t i = 0; i < r; ++i)
          for (int64_t d = 0; d < dim; ++d)
            std::copy_n(src_v.begin() + (first + (g * r + i) * dim + d) * cols, cols,
                        v.begin() + (first + (i * Hk + g) * dim + d) * cols);
    };
    std::vector<float> a = take(p + "linear_attn.A_log");
    tile_rows(a, 0, 1, 1);
    for (float& x : a) x = -std::exp(x);
    o.tensor(b + "ssm_a", a, shape);
    std::vector<float> dt = take(p + "linear_attn.dt_bias");
    tile_rows(dt, 0, 1, 1);
    o.tensor(b + "ssm_dt.bias", dt, shape);
    std::vector<float> conv = take(p + "linear_attn.conv1d.weight");  // [C, 1, K] squeezed
    tile_rows(conv, 2 * Hk * dk, dv, shape[2]);
    o.tensor(b + "ssm_conv1d.weight", conv, {shape[0], shape[2]});
    if (tiled) {  // separate projections: qkv, z, b, a; the output projection's columns
      std::vector<float> w = take(p + "linear_attn.in_proj_qkv.weight");
      tile_rows(w, 2 * Hk * dk, dv, shape[1]);
      o.tensor(b + "attn_qkv.weight", w, shape);
      w = take(p + "linear_attn.in_proj_z.weight");
      tile_rows(w, 0, dv, shape[1]);
      o.tensor(b + "attn_gate.weight", w, shape);
      for (const auto& [hf, gg] : {std::pair{"in_proj_b", "ssm_beta"}, std::pair{"in_proj_a", "ssm_alpha"}}) {
        w = take(p + "linear_attn." + hf + ".weight");
        tile_rows(w, 0, 1, shape[1]);
        o.tensor(b + gg + ".weight", w, shape);
      }
      w = take(p + "linear_attn.out_proj.weight");  // [H, Hv dv]: columns
      const std::vector<float> src_w = w;
      for (int64_t row = 0; row < shape[0]; ++row)
        for (int64_t g = 0; g < Hk; ++g)
          for (int64_t i = 0; i < r; ++i)
            std::copy_n(src_w.begin() + row * shape[1] + (g * r + i) * dv, dv, w.begin() + row * shape[1] + (i * Hk + g) * dv);
      o.tensor(b + "ssm_out.weight", w, shape);
    }
  }
  if (ai.arch == Arch::kQwen3Next && src.has(p + "linear_attn.in_proj_qkvz.weight")) {
    // in_proj_qkvz [Hk (q dk, k dk, v r dv, z r dv), H] -> attn_qkv [q all, k all, v all], attn_gate [z all].
    const std::vector<float> w = take(p + "linear_attn.in_proj_qkvz.weight");
    const int64_t H = shape[1], Hk = need_int(c, {"linear_num_key_heads"}), dk = need_int(c, {"linear_key_head_dim"}),
                  dv = need_int(c, {"linear_value_head_dim"}), r = need_int(c, {"linear_num_value_heads"}) / Hk;
    const int64_t group = 2 * dk + 2 * r * dv;
    std::vector<float> qkv, z;
    auto rows = [&](std::vector<float>& out, int64_t off, int64_t n) {
      for (int64_t g = 0; g < Hk; ++g)
        out.insert(out.end(), w.begin() + (g * group + off) * H, w.begin() + (g * group + off + n) * H);
    };
    rows(qkv, 0, dk);
    rows(qkv, dk, dk);
    rows(qkv, 2 * dk, r * dv);
    rows(z, 2 * dk + r * dv, r * dv);
    o.tensor(b + "attn_qkv.weight", qkv, {static_cast<int64_t>(qkv.size()) / H, H});
    o.tensor(b + "attn_gate.weight", z, {static_cast<int64_t>(z.size()) / H, H});
  }
  // Router selection bias: mlp.gate.e_score_correction_bias / block_sparse_moe.e_score_correction_bias.
  for (const char* hf : {"mlp.gate.e_score_correction_bias", "block_sparse_moe.e_score_correction_bias"})
    if (src.has(p + hf)) {
      std::vector<float> v = take(p + hf);
      o.tensor(b + "exp_probs_b.bias", v, shape);
    }
  // MLA kv_b_proj [n_head * (nope + vd), R]: as is, or split per head into W_UK^T and W_UV.
  if (const std::string n = p + "self_attn.kv_b_proj.weight"; src.has(n)) {
    const std::vector<float> kv = take(n);
    if (opt.kv_b == MlaKvB::kFused) {
      o.tensor(b + "attn_kv_b.weight", kv, shape);
    } else {
      const int64_t nh = need_int(c, {"num_attention_heads"}), nope = need_int(c, {"qk_nope_head_dim"}),
                    vd = need_int(c, {"v_head_dim"}), R = shape[1];
      std::vector<float> kb(static_cast<size_t>(nh * R * nope)), vb(static_cast<size_t>(nh * vd * R));
      for (int64_t h = 0; h < nh; ++h)
        for (int64_t r = 0; r < R; ++r) {
          for (int64_t i = 0; i < nope; ++i) kb[static_cast<size_t>((h * R + r) * nope + i)] = kv[static_cast<size_t>((h * (nope + vd) + i) * R + r)];
          for (int64_t d = 0; d < vd; ++d) vb[static_cast<size_t>((h * vd + d) * R + r)] = kv[static_cast<size_t>((h * (nope + vd) + nope + d) * R + r)];
        }
      o.tensor(b + "attn_k_b.weight", kb, {nh, R, nope});
      o.tensor(b + "attn_v_b.weight", vb, {nh, vd, R});
    }
  }
  if (const std::string n = p + "self_attn.sinks"; src.has(n)) {  // gpt_oss.py: sinks -> sinks.weight
    std::vector<float> v = take(n);
    o.tensor(b + "attn_sinks.weight", v, shape);
  }
  if (src.has(p + "mlp.experts.gate_up_proj")) write_fused_experts(o, take, shape, p, b);
  // Routed experts, stacked [E, rows, cols] (GGUF ne = [cols, rows, E]).
  const bool mm = ai.arch == Arch::kMinimaxM2;
  const std::string ep = mm ? "block_sparse_moe.experts." : "mlp.experts.";
  const std::pair<const char*, const char*> parts[] = {{mm ? "w1" : "gate_proj", "ffn_gate_exps"},
                                                       {mm ? "w3" : "up_proj", "ffn_up_exps"},
                                                       {mm ? "w2" : "down_proj", "ffn_down_exps"}};
  for (const auto& [hf, gg] : parts) {
    if (!src.has(p + ep + "0." + hf + ".weight")) continue;
    std::vector<float> all;
    int64_t E = 0;
    for (; src.has(fmt::format("{}{}{}.{}.weight", p, ep, E, hf)); ++E) {
      const std::vector<float> v = take(fmt::format("{}{}{}.{}.weight", p, ep, E, hf));
      all.insert(all.end(), v.begin(), v.end());
    }
    o.tensor(b + gg + ".weight", all, {E, shape[0], shape[1]});
  }
}

/** Deterministic values in [-s, s) (splitmix64), for the stand-in MTP projection. */
std::vector<float> pseudo_random(int64_t n, uint64_t seed, float s) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) {
    uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    x = static_cast<float>((static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0 * 2.0 - 1.0) * s);
  }
  return v;
}

}  // namespace

HfToGgufResult convert_hf_to_gguf(const std::string& hf_dir, const std::string& out_path, const HfToGgufOptions& opt) {
  if (opt.matrix_type != DType::BF16 && opt.matrix_type != DType::F16 && opt.matrix_type != DType::F32 &&
      opt.matrix_type != DType::Q8_0)
    fail(ErrorCode::kUnsupported, "hf_to_gguf: matrix type {} (BF16, F16, F32 or Q8_0)", dtype_name(opt.matrix_type));
  const std::unique_ptr<Checkpoint> ck = open_checkpoint(hf_dir);
  if (ck->format() != "safetensors") fail(ErrorCode::kInvalidArgument, "{}: not a Hugging Face folder", hf_dir);
  const json& c = ck->metadata().at("config");
  const ArchInfo ai = arch_of(c, hf_dir);
  const int64_t L = need_int(c, {"num_hidden_layers"});
  const int64_t nextn = find(c, {"num_nextn_predict_layers"}) ? c["num_nextn_predict_layers"].get<int64_t>() : 0;
  const bool glm = ai.arch == Arch::kGlm4Moe;
  const int64_t block_count = glm ? L + nextn : L;  // glm.py counts the MTP blocks; deepseek.py drops them
  Out o(ai.gguf, opt);
  write_metadata(o, c, ai, block_count, opt);
  if (!opt.tokenizer_dir.empty()) write_tokenizer(o, c, opt);

  Source src(*ck);
  std::vector<int64_t> shape;
  {
    std::vector<float> v = src.take("model.embed_tokens.weight", &shape);
    o.tensor("token_embd.weight", v, shape);
    v = src.take("model.norm.weight", &shape);
    if (linear_arch(ai.arch))
      for (float& x : v) x += 1.0f;
    o.tensor("output_norm.weight", v, shape);
    if (src.has("lm_head.weight")) {
      v = src.take("lm_head.weight", &shape);
      if (!c.value("tie_word_embeddings", false)) o.tensor("output.weight", v, shape);
    }
  }
  for (int64_t l = 0; l < L; ++l) write_layer(o, src, c, ai, l, l, opt);
  for (int64_t l = L; l < L + nextn; ++l) {
    const bool present = src.has(fmt::format("model.layers.{}.input_layernorm.weight", l));
    if (!glm) {  // deepseek.py skip_mtp: layers >= num_hidden_layers are not written
      for (const std::string& n : std::set<std::string>(src.left()))
        if (n.starts_with(fmt::format("model.layers.{}.", l))) src.drop(n);
      continue;
    }
    if (present) {
      write_layer(o, src, c, ai, l, l, opt);
    } else if (opt.synth_mtp_block) {
      write_layer(o, src, c, ai, L - 1, l, opt);
      const int64_t H = need_int(c, {"hidden_size"});
      const std::string b = fmt::format("blk.{}.", l);
      o.tensor(b + "nextn.eh_proj.weight", pseudo_random(2 * H * H, 33 + static_cast<uint64_t>(l), 0.05f), {H, 2 * H});
      for (const char* n : {"nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"})
        o.tensor(b + n, std::vector<float>(static_cast<size_t>(H), 1.0f), {H});
    }
  }
  src.check_all_taken();
  o.write(out_path);
  return {ai.gguf, o.n_tensors(), block_count};
}

}  // namespace ft::testing
