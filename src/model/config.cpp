#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "util/error.h"

namespace ft {
namespace {

using json = nlohmann::json;

// More layers than any checkpoint has: a count above it is a malformed file (per-layer tables are built from it).
constexpr int64_t kMaxLayers = 1 << 16;

// a * b, or fail naming `what` when it overflows int64 (sizes multiplied from a malformed file).
int64_t checked_mul(int64_t a, int64_t b, const char* src, const std::string& what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) fail(ErrorCode::kInvalidFile, "{}: {}: {} x {} overflows", src, what, a, b);
  return r;
}

int64_t checked_add(int64_t a, int64_t b, const char* src, const std::string& what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) fail(ErrorCode::kInvalidFile, "{}: {}: {} + {} overflows", src, what, a, b);
  return r;
}

void check_layer_count(int64_t n, const char* src, const std::string& key) {
  if (n > kMaxLayers) fail(ErrorCode::kInvalidFile, "{}: {}: {} layers (at most {})", src, key, n, kMaxLayers);
}

// A float that holds an integer exactly (and fits int64 without a cast's undefined behaviour).
bool integral(double d) { return std::isfinite(d) && std::fabs(d) < 9e15 && d == std::floor(d); }

// ---- typed field access with errors that name the source and field ----

const json* field(const json& obj, const std::string& key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& obj, const std::string& key, const char* src, std::optional<int64_t> def = std::nullopt) {
  const json* v = field(obj, key);
  if (!v) {
    if (def) return *def;
    fail(ErrorCode::kInvalidFile, "{}: {}: missing (required)", src, key);
  }
  if (!v->is_number_integer() && !(v->is_number_float() && integral(v->get<double>())))
    fail(ErrorCode::kInvalidFile, "{}: {}: expected an integer, got {}", src, key, v->dump());
  return v->is_number_integer() ? v->get<int64_t>() : static_cast<int64_t>(v->get<double>());
}

double get_num(const json& obj, const std::string& key, const char* src, std::optional<double> def = std::nullopt) {
  const json* v = field(obj, key);
  if (!v) {
    if (def) return *def;
    fail(ErrorCode::kInvalidFile, "{}: {}: missing (required)", src, key);
  }
  if (!v->is_number()) fail(ErrorCode::kInvalidFile, "{}: {}: expected a number, got {}", src, key, v->dump());
  return v->get<double>();
}

bool get_bool(const json& obj, const std::string& key, const char* src, bool def) {
  const json* v = field(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) fail(ErrorCode::kInvalidFile, "{}: {}: expected true/false, got {}", src, key, v->dump());
  return v->get<bool>();
}

std::string get_str(const json& obj, const std::string& key, const char* src, const std::string& def) {
  const json* v = field(obj, key);
  if (!v) return def;
  if (!v->is_string()) fail(ErrorCode::kInvalidFile, "{}: {}: expected a string, got {}", src, key, v->dump());
  return v->get<std::string>();
}

std::vector<int32_t> get_ids(const json& obj, const std::string& key, const char* src) {
  const json* v = field(obj, key);
  std::vector<int32_t> out;
  if (!v) return out;
  if (v->is_number_integer()) return {v->get<int32_t>()};
  if (!v->is_array()) fail(ErrorCode::kInvalidFile, "{}: {}: expected an id or a list of ids", src, key);
  for (const json& e : *v) {
    if (!e.is_number_integer()) fail(ErrorCode::kInvalidFile, "{}: {}: expected integer ids", src, key);
    out.push_back(e.get<int32_t>());
  }
  return out;
}

void read_hf_rope(const json& c, ModelConfig& m) {
  const char* src = "config.json";
  // transformers 5 puts theta and scaling in rope_parameters; older configs use rope_theta + rope_scaling.
  const json* rp = field(c, "rope_parameters");
  const json* rs = field(c, "rope_scaling");
  const json& p = rp ? *rp : (rs ? *rs : c);
  m.rope_theta = get_num(rp ? *rp : c, "rope_theta", src, get_num(c, "rope_theta", src, 10000.0));
  RopeScaling& s = m.rope_scaling;
  s.type = get_str(p, "rope_type", src, get_str(p, "type", src, "default"));
  if (s.type == "dynamic") s.type = "default";  // identical below the original context length
  s.factor = get_num(p, "factor", src, 1.0);
  s.original_max_position = get_int(p, "original_max_position_embeddings", src, m.n_ctx_train);
  s.low_freq_factor = get_num(p, "low_freq_factor", src, 1.0);
  s.high_freq_factor = get_num(p, "high_freq_factor", src, 4.0);
  s.beta_fast = get_num(p, "beta_fast", src, 32.0);
  s.beta_slow = get_num(p, "beta_slow", src, 1.0);
  s.attention_factor = get_num(p, "attention_factor", src, 0.0);
  s.mscale = get_num(p, "mscale", src, 0.0);
  s.mscale_all_dim = get_num(p, "mscale_all_dim", src, 0.0);
  s.truncate = get_bool(p, "truncate", src, true);
  const double partial = get_num(rp ? *rp : c, "partial_rotary_factor", src, get_num(c, "partial_rotary_factor", src, 1.0));
  if (!(partial > 0.0 && partial <= 1.0))
    fail(ErrorCode::kInvalidFile, "{}: partial_rotary_factor {} must be in (0, 1]", src, partial);
  m.n_rot = static_cast<int64_t>(static_cast<double>(m.head_dim) * partial);
}

/** transformers 5's layer_types, when every entry is "sliding_attention" (sliding_window),
 *  "full_attention" (0) or "linear_attention" (0 and m.layer_linear): m.layer_window. Other layer
 *  kinds are the architecture file's to read; the list is then left alone. */
void read_hf_layer_types(const json& c, ModelConfig& m) {
  const char* src = "config.json";
  const json* lt = field(c, "layer_types");
  if (!lt || !lt->is_array()) return;
  std::vector<int32_t> windows;
  std::vector<uint8_t> linear;
  for (const json& t : *lt) {
    linear.push_back(t == "linear_attention" ? 1 : 0);
    if (t == "full_attention" || t == "linear_attention") windows.push_back(0);
    else if (t == "sliding_attention") windows.push_back(-1);
    else return;
  }
  if (std::find(linear.begin(), linear.end(), 1) != linear.end()) m.layer_linear = std::move(linear);
  const int32_t w = static_cast<int32_t>(get_int(c, "sliding_window", src, 0));
  for (int32_t& v : windows) {
    if (v >= 0) continue;
    if (w <= 0)
      fail(ErrorCode::kInvalidFile, "{}: layer_types names sliding_attention layers but sliding_window is {}", src,
           field(c, "sliding_window") ? std::to_string(w) : "missing");
    v = w;
  }
  m.layer_window = std::move(windows);
}

/** llama.cpp's attention.sliding_window_pattern (get_key_or_arr): a period (set_swa_period) or one
 *  bool per layer (true: sliding). Absent: m.layer_window stays empty. */
void read_gguf_swa_pattern(const json& meta, const std::string& key, ModelConfig& m) {
  const json* v = field(meta, key);
  if (!v) return;
  const char* src = "GGUF metadata";
  if (v->is_number_integer()) {
    const int64_t period = get_int(meta, key, src);
    if (period < 0) fail(ErrorCode::kInvalidFile, "{}: {}: period {} must be >= 0", src, key, period);
    return set_swa_period(m, period);
  }
  if (!v->is_array())
    fail(ErrorCode::kInvalidFile, "{}: {}: expected a period or one bool per layer, got {}", src, key, v->dump());
  m.layer_window.clear();
  for (const json& e : *v) {
    if (!e.is_boolean() && !e.is_number_integer())
      fail(ErrorCode::kInvalidFile, "{}: {}: expected bools, got {}", src, key, e.dump());
    const bool swa = e.is_boolean() ? e.get<bool>() : e.get<int64_t>() != 0;
    m.layer_window.push_back(swa ? m.sliding_window : 0);
  }
}

}  // namespace

bool ModelConfig::is_moe_layer(int64_t l) const {
  if (n_expert == 0 || l < first_k_dense) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), l) != mlp_only_layers.end()) return false;
  return decoder_sparse_step <= 1 || (l + 1) % decoder_sparse_step == 0;
}

void ModelConfig::validate() const {
  auto need = [&](int64_t v, const char* what) {
    if (v <= 0) fail(ErrorCode::kInvalidFile, "{} model config: {} is {} (must be > 0)", arch, what, v);
  };
  need(n_vocab, "vocab size");
  need(n_embd, "hidden size");
  need(n_layer, "layer count");
  need(n_head, "attention head count");
  need(n_head_kv, "key/value head count");
  need(head_dim, "head dim");
  if (n_head % n_head_kv != 0)
    fail(ErrorCode::kInvalidFile, "{} model config: {} attention heads are not a multiple of {} key/value heads", arch,
         n_head, n_head_kv);
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0)
    fail(ErrorCode::kInvalidFile, "{} model config: rotary dims {} must be even and in (0, head_dim {}]", arch, n_rot,
         head_dim);
  if (n_expert > 0 && n_group > 1) {
    const char* keys = format == "gguf" ? "expert_group_count / expert_group_used_count" : "n_group / topk_group";
    if (n_expert % n_group != 0 || n_expert / n_group < 2)
      fail(ErrorCode::kInvalidFile, "{} model config: {} router groups ({}) do not split the {} experts into groups of "
           "2 or more", arch, n_group, keys, n_expert);
    if (topk_group < 1 || topk_group > n_group)
      fail(ErrorCode::kInvalidFile, "{} model config: {} kept groups ({}) must be in [1, {}]", arch, topk_group, keys,
           n_group);
    int64_t kept = 0;  // experts in the kept groups (a product past int64 exceeds any count)
    if (!__builtin_mul_overflow(topk_group, n_expert / n_group, &kept) && n_expert_used > kept)
      fail(ErrorCode::kInvalidFile, "{} model config: {} experts per token exceed the {} experts of {} kept groups ({})",
           arch, n_expert_used, kept, topk_group, keys);
  }
  if (!layer_window.empty() && static_cast<int64_t>(layer_window.size()) != n_layer)
    fail(ErrorCode::kInvalidFile, "{} model config: {} per-layer attention types (layer_types / "
         "sliding_window_pattern) for {} layers", arch, layer_window.size(), n_layer);
  if (!layer_linear.empty()) {
    if (static_cast<int64_t>(layer_linear.size()) != n_layer)
      fail(ErrorCode::kInvalidFile, "{} model config: {} layer types for {} layers", arch, layer_linear.size(), n_layer);
    need(lin_n_k_heads, "linear-attention key head count (linear_num_key_heads)");
    need(lin_n_v_heads, "linear-attention value head count (linear_num_value_heads)");
    need(lin_k_dim, "linear-attention key head dim (linear_key_head_dim)");
    need(lin_v_dim, "linear-attention value head dim (linear_value_head_dim)");
    if (lin_conv_kernel < 2)
      fail(ErrorCode::kInvalidFile, "{} model config: linear_conv_kernel_dim {} must be >= 2", arch, lin_conv_kernel);
    if (lin_n_v_heads % lin_n_k_heads != 0)
      fail(ErrorCode::kInvalidFile, "{} model config: {} linear-attention value heads are not a multiple of {} key heads",
           arch, lin_n_v_heads, lin_n_k_heads);
  }
  if (n_expert > 0) {
    need(n_expert_used, "experts per token");
    need(n_ff_exp, "expert FFN width");
    if (n_expert_used > n_expert)
      fail(ErrorCode::kInvalidFile, "{} model config: {} experts per token but only {} experts", arch, n_expert_used,
           n_expert);
  }
}

void set_swa_period(ModelConfig& c, int64_t period) {
  c.layer_window.assign(static_cast<size_t>(std::max<int64_t>(c.n_layer, 0)), 0);
  for (int64_t l = 0; l < c.n_layer; ++l)
    if (period == 0 || l % period < period - 1) c.layer_window[static_cast<size_t>(l)] = c.sliding_window;
}

KvCacheConfig kv_layout(const ModelConfig& c) {
  KvCacheConfig k;
  k.n_layer = static_cast<int32_t>(c.n_layer);
  if (c.is_mla()) {
    k.n_head_kv = 1, k.head_dim = static_cast<int32_t>(c.kv_lora_rank);
    k.v_n_head = 1, k.v_head_dim = static_cast<int32_t>(c.qk_rope_dim);
  } else {
    k.n_head_kv = static_cast<int32_t>(c.n_head_kv), k.head_dim = static_cast<int32_t>(c.head_dim);
    if (c.kv_v_width > 0) {
      const int64_t d = c.kv_v_head_dim > 0 ? c.kv_v_head_dim : c.kv_v_width;
      if (c.kv_v_width % d != 0)
        fail(ErrorCode::kInternal, "{}: value pages of width {} do not split into heads of {}", c.arch, c.kv_v_width, d);
      k.v_n_head = static_cast<int32_t>(c.kv_v_width / d), k.v_head_dim = static_cast<int32_t>(d);
    }
  }
  if (!c.layer_linear.empty()) {
    k.layer_recurrent = c.layer_linear;
    k.conv_dim = static_cast<int32_t>(c.lin_conv_dim());
    k.conv_kernel = static_cast<int32_t>(c.lin_conv_kernel);
    k.ssm_v_heads = static_cast<int32_t>(c.lin_n_v_heads);
    k.ssm_k_dim = static_cast<int32_t>(c.lin_k_dim);
    k.ssm_v_dim = static_cast<int32_t>(c.lin_v_dim);
    k.conv2_rows = static_cast<int32_t>(c.lin_conv2_rows);
    k.conv2_dim = static_cast<int32_t>(c.lin_conv2_dim);
    k.token_history = static_cast<int32_t>(c.lin_token_history);
  }
  k.layer_entry_rate = c.layer_entry_rate;
  k.layer_entry_width = c.layer_entry_width;
  bool slides = false;
  for (int64_t l = 0; l < c.n_layer; ++l) slides = slides || c.window(l) > 0;
  if (slides)
    for (int64_t l = 0; l < c.n_layer; ++l) k.layer_window.push_back(c.window(l));
  return k;
}

ModelConfig config_from_hf(const nlohmann::json& c, const std::string& arch) {
  const char* src = "config.json";
  ModelConfig m;
  m.arch = arch;
  m.format = "safetensors";
  m.n_vocab = get_int(c, "vocab_size", src);
  m.n_embd = get_int(c, "hidden_size", src);
  m.n_layer = get_int(c, "num_hidden_layers", src);
  check_layer_count(m.n_layer, src, "num_hidden_layers");
  m.n_head = get_int(c, "num_attention_heads", src);
  m.n_head_kv = get_int(c, "num_key_value_heads", src, m.n_head);
  m.head_dim = get_int(c, "head_dim", src, m.n_head > 0 ? m.n_embd / m.n_head : 0);
  m.n_ff = get_int(c, "intermediate_size", src, 0);
  m.rms_eps = get_num(c, "rms_norm_eps", src, 1e-6);
  m.n_ctx_train = get_int(c, "max_position_embeddings", src, 0);
  read_hf_rope(c, m);
  m.tie_embeddings = get_bool(c, "tie_word_embeddings", src, false);
  m.attn_bias = get_bool(c, "attention_bias", src, false);
  if (get_bool(c, "use_qk_norm", src, false)) m.qk_norm = QkNorm::kPerHead;  // GLM-4.5
  m.rope_interleave = get_bool(c, "rope_interleave", src, true);
  if (get_bool(c, "use_sliding_window", src, field(c, "use_sliding_window") == nullptr))
    m.sliding_window = static_cast<int32_t>(get_int(c, "sliding_window", src, 0));
  read_hf_layer_types(c, m);
  m.n_expert = get_int(c, "num_experts", src, get_int(c, "num_local_experts", src, get_int(c, "n_routed_experts", src, 0)));
  m.n_expert_used = get_int(c, "num_experts_per_tok", src, 0);
  m.n_ff_exp = get_int(c, "moe_intermediate_size", src, m.n_ff);
  // Qwen2-MoE names the shared expert's width; DeepSeek-V3 and GLM-4.5 count shared experts of the
  // routed experts' width.
  m.n_ff_shexp = get_int(c, "shared_expert_intermediate_size", src,
                         checked_mul(m.n_ff_exp, get_int(c, "n_shared_experts", src, 0), src, "n_shared_experts"));
  m.swiglu_alpha = get_num(c, "swiglu_alpha", src, m.swiglu_alpha);
  m.swiglu_limit = get_num(c, "swiglu_limit", src, m.swiglu_limit);
  m.q_lora_rank = get_int(c, "q_lora_rank", src, 0);
  m.kv_lora_rank = get_int(c, "kv_lora_rank", src, 0);
  m.qk_nope_dim = get_int(c, "qk_nope_head_dim", src, 0);
  m.qk_rope_dim = get_int(c, "qk_rope_head_dim", src, 0);
  m.v_head_dim = get_int(c, "v_head_dim", src, 0);
  if (const json* rd = field(c, "rotary_dim"); rd && field(c, "partial_rotary_factor") == nullptr)
    m.n_rot = get_int(c, "rotary_dim", src);  // MiniMax-M2 names the rotated dims
  m.norm_topk_prob = get_bool(c, "norm_topk_prob", src, false);
  m.decoder_sparse_step = get_int(c, "decoder_sparse_step", src, 1);
  if (const json* v = field(c, "mlp_only_layers"); v && v->is_array())
    for (const json& e : *v) {
      if (!e.is_number_integer()) fail(ErrorCode::kInvalidFile, "{}: mlp_only_layers: expected integers, got {}", src, e.dump());
      m.mlp_only_layers.push_back(e.get<int64_t>());
    }
  if (const std::string sf = get_str(c, "scoring_func", src, ""); !sf.empty()) {
    if (sf != "sigmoid" && sf != "softmax" && !(sf == "sqrtsoftplus" && arch == "deepseek_v4"))
      fail(ErrorCode::kUnsupported, "{}: scoring_func: '{}' is not supported (sigmoid or softmax)", src, sf);
    m.router_scoring = sf == "sigmoid" ? RouterScoring::kSigmoid : RouterScoring::kSoftmax;
    m.router_scoring_given = true;
  }
  if (const std::string tm = get_str(c, "topk_method", src, ""); tm == "greedy" || tm == "group_limited_greedy") {
    m.router_scoring = RouterScoring::kSoftmax;  // DeepSeek-V2's softmax routing (V3's is noaux_tc)
    m.router_scoring_given = true;
  }
  m.first_k_dense = get_int(c, "first_k_dense_replace", src, 0);
  m.routed_scaling = get_num(c, "routed_scaling_factor", src, 1.0);
  m.n_group = get_int(c, "n_group", src, 1);
  m.topk_group = get_int(c, "topk_group", src, 1);
  m.n_nextn_layers = get_int(c, "num_nextn_predict_layers", src, 0);
  m.lin_n_k_heads = get_int(c, "linear_num_key_heads", src, 0);
  m.lin_n_v_heads = get_int(c, "linear_num_value_heads", src, 0);
  m.lin_k_dim = get_int(c, "linear_key_head_dim", src, 0);
  m.lin_v_dim = get_int(c, "linear_value_head_dim", src, 0);
  m.lin_conv_kernel = get_int(c, "linear_conv_kernel_dim", src, 0);
  if (m.layer_linear.empty() && m.lin_n_v_heads > 0) {  // Qwen3-Next without layer_types: every interval-th attends
    const int64_t every = get_int(c, "full_attention_interval", src, 4);
    if (every < 1) fail(ErrorCode::kInvalidFile, "{}: full_attention_interval {} must be >= 1", src, every);
    for (int64_t l = 0; l < m.n_layer; ++l) m.layer_linear.push_back((l + 1) % every == 0 ? 0 : 1);
  }
  m.bos_id = static_cast<int32_t>(get_int(c, "bos_token_id", src, -1));
  m.eos_ids = get_ids(c, "eos_token_id", src);
  return m;
}

ModelConfig config_from_gguf(const nlohmann::json& meta, const std::string& ga, const std::string& arch) {
  const char* src = "GGUF metadata";
  auto key = [&](const char* k) { return ga + "." + k; };
  ModelConfig m;
  m.arch = arch;
  m.format = "gguf";
  m.n_embd = get_int(meta, key("embedding_length"), src);
  m.n_layer = get_int(meta, key("block_count"), src);
  check_layer_count(m.n_layer, src, key("block_count"));
  m.n_head = get_int(meta, key("attention.head_count"), src);
  m.n_head_kv = get_int(meta, key("attention.head_count_kv"), src, m.n_head);
  m.head_dim = get_int(meta, key("attention.key_length"), src, m.n_head > 0 ? m.n_embd / m.n_head : 0);
  m.n_ff = get_int(meta, key("feed_forward_length"), src, 0);
  m.rms_eps = get_num(meta, key("attention.layer_norm_rms_epsilon"), src, 1e-5);
  m.n_ctx_train = get_int(meta, key("context_length"), src, 0);
  m.rope_theta = get_num(meta, key("rope.freq_base"), src, 10000.0);
  m.n_rot = get_int(meta, key("rope.dimension_count"), src, m.head_dim);
  RopeScaling& s = m.rope_scaling;
  s.type = get_str(meta, key("rope.scaling.type"), src, "none");
  if (s.type == "none") s.type = "default";
  s.factor = get_num(meta, key("rope.scaling.factor"), src, 1.0);
  s.original_max_position = get_int(meta, key("rope.scaling.original_context_length"), src, m.n_ctx_train);
  s.attention_factor = get_num(meta, key("rope.scaling.attn_factor"), src, 0.0);
  s.beta_fast = get_num(meta, key("rope.scaling.yarn_beta_fast"), src, 32.0);
  s.beta_slow = get_num(meta, key("rope.scaling.yarn_beta_slow"), src, 1.0);
  m.sliding_window = static_cast<int32_t>(get_int(meta, key("attention.sliding_window"), src, 0));
  read_gguf_swa_pattern(meta, key("attention.sliding_window_pattern"), m);
  m.n_expert = get_int(meta, key("expert_count"), src, 0);
  m.n_expert_used = get_int(meta, key("expert_used_count"), src, 0);
  m.n_ff_exp = get_int(meta, key("expert_feed_forward_length"), src, m.n_ff);
  m.n_ff_shexp = get_int(meta, key("expert_shared_feed_forward_length"), src, 0);
  m.norm_topk_prob = get_bool(meta, key("expert_weights_norm"), src, false);
  // DeepSeek-V3 family (llama.cpp's keys): leading dense layers, shared experts counted in routed
  // widths, sigmoid gating (expert_gating_func 2), weight scale, group-limited routing, MTP layers.
  m.first_k_dense = get_int(meta, key("leading_dense_block_count"), src, 0);
  if (m.n_ff_shexp == 0)
    m.n_ff_shexp = checked_mul(m.n_ff_exp, get_int(meta, key("expert_shared_count"), src, 0), src, key("expert_shared_count"));
  const int64_t gating = get_int(meta, key("expert_gating_func"), src, 0);
  m.router_scoring_given = gating != 0;
  if (gating == 2) m.router_scoring = RouterScoring::kSigmoid;
  else if (gating != 0 && gating != 1)
    fail(ErrorCode::kUnsupported, "{}: {}: expert gating function {} is not supported (1 softmax, 2 sigmoid)", src,
         key("expert_gating_func"), gating);
  m.routed_scaling = get_num(meta, key("expert_weights_scale"), src, 1.0);
  m.n_group = get_int(meta, key("expert_group_count"), src, 1);
  m.topk_group = get_int(meta, key("expert_group_used_count"), src, 1);
  m.n_nextn_layers = get_int(meta, key("nextn_predict_layers"), src, 0);
  if (m.n_nextn_layers > 0 && m.n_nextn_layers < m.n_layer) m.n_layer -= m.n_nextn_layers;  // MTP blocks come last
  // Linear attention (llama.cpp's qwen3next keys): ssm.group_count key heads of ssm.state_size dims,
  // ssm.time_step_rank value heads of ssm.inner_size in all, ssm.conv_kernel taps; every
  // full_attention_interval-th layer attends.
  if (const int64_t hv = get_int(meta, key("ssm.time_step_rank"), src, 0); hv > 0) {
    m.lin_n_v_heads = hv;
    m.lin_n_k_heads = get_int(meta, key("ssm.group_count"), src);
    m.lin_k_dim = get_int(meta, key("ssm.state_size"), src);
    m.lin_v_dim = get_int(meta, key("ssm.inner_size"), src) / hv;
    m.lin_conv_kernel = get_int(meta, key("ssm.conv_kernel"), src);
    const int64_t every = get_int(meta, key("full_attention_interval"), src, 4);
    if (every < 1) fail(ErrorCode::kInvalidFile, "{}: {} {} must be >= 1", src, key("full_attention_interval"), every);
    for (int64_t l = 0; l < m.n_layer; ++l) m.layer_linear.push_back((l + 1) % every == 0 ? 0 : 1);
    // llama.cpp's Qwen3.5 converter reorders the value heads from grouped (by key head) to tiled.
    m.lin_v_tiled = ga == "qwen35" || ga == "qwen35moe";
  }
  // MLA: llama.cpp's converters since its absorbed-MLA support write the latent's widths in
  // key_length / value_length (kv_lora_rank + qk_rope = 576 / kv_lora_rank = 512, head_count_kv 1)
  // and the per-head ones in *_mla, which such a file then must have; older files hold the per-head
  // widths in key_length / value_length and no *_mla keys. The RoPE width is always
  // rope.dimension_count (key_length is no head's RoPE width here).
  m.q_lora_rank = get_int(meta, key("attention.q_lora_rank"), src, 0);
  m.kv_lora_rank = get_int(meta, key("attention.kv_lora_rank"), src, 0);
  if (m.kv_lora_rank > 0) {
    m.qk_rope_dim = m.n_rot = get_int(meta, key("rope.dimension_count"), src);
    const bool latent = m.head_dim == checked_add(m.kv_lora_rank, m.qk_rope_dim, src, key("attention.kv_lora_rank"));
    auto per_head = [&](const char* mla, int64_t legacy) {
      return latent ? get_int(meta, key(mla), src) : get_int(meta, key(mla), src, legacy);
    };
    m.qk_nope_dim = checked_add(per_head("attention.key_length_mla", m.head_dim), -m.qk_rope_dim, src,
                                key("attention.key_length_mla"));
    m.v_head_dim = per_head("attention.value_length_mla", get_int(meta, key("attention.value_length"), src, 0));
    const double log_mul = get_num(meta, key("rope.scaling.yarn_log_multiplier"), src, 0.0);
    if (log_mul > 0.0) s.mscale = s.mscale_all_dim = log_mul / 0.1;  // the converter writes 0.1 * mscale_all_dim
  }
  m.n_vocab = get_int(meta, key("vocab_size"), src, 0);
  if (m.n_vocab == 0)
    if (const json* toks = field(meta, "tokenizer.ggml.tokens"); toks && toks->is_array())
      m.n_vocab = static_cast<int64_t>(toks->size());
  m.bos_id = static_cast<int32_t>(get_int(meta, "tokenizer.ggml.bos_token_id", src, -1));
  m.eos_ids = get_ids(meta, "tokenizer.ggml.eos_token_id", src);
  for (int32_t id : get_ids(meta, "tokenizer.ggml.eot_token_id", src))
    if (std::find(m.eos_ids.begin(), m.eos_ids.end(), id) == m.eos_ids.end()) m.eos_ids.push_back(id);
  return m;
}

}  // namespace ft
