#include "tools/hf_synthetic.h"

#include <fmt/format.h>

#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

int64_t need_int(const json& c, const char* key, const ModelPreset& p) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_number_integer())
    fail(ErrorCode::kInvalidArgument, "model preset {}: hf_config has no integer '{}'", p.name, key);
  return it->get<int64_t>();
}

json parse_config(const ModelPreset& p) {
  if (p.hf_config.empty())
    fail(ErrorCode::kInvalidArgument, "model preset {}: no Hugging Face config (a GGUF-layout preset)", p.name);
  json c = json::parse(p.hf_config, nullptr, false);
  if (!c.is_object()) fail(ErrorCode::kInvalidArgument, "model preset {}: hf_config is not a JSON object", p.name);
  return c;
}

/** DeepSeek-V4's tensors (model/deepseek_v4.cpp's names and shapes). */
std::vector<SynthTensor> deepseek_v4_tensors(const ModelPreset& p, const json& c, int64_t n_layer) {
  const int64_t H = need_int(c, "hidden_size", p), V = need_int(c, "vocab_size", p);
  const int64_t nh = need_int(c, "num_attention_heads", p), hd = need_int(c, "head_dim", p);
  const int64_t ql = need_int(c, "q_lora_rank", p), og = need_int(c, "o_groups", p), ol = need_int(c, "o_lora_rank", p);
  const int64_t ih = need_int(c, "index_n_heads", p), id = need_int(c, "index_head_dim", p);
  const int64_t n = need_int(c, "hc_mult", p), E = need_int(c, "n_routed_experts", p);
  const int64_t k = need_int(c, "num_experts_per_tok", p), F = need_int(c, "moe_intermediate_size", p);
  const int64_t Fs = F * need_int(c, "n_shared_experts", p);
  const json& rates = c.at("compress_rates");
  const int64_t csa = rates.at("compressed_sparse_attention").get<int64_t>();
  const int64_t hca = rates.at("heavily_compressed_attention").get<int64_t>();
  std::vector<SynthTensor> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, SynthFill fill, SynthStore store, int64_t layer) {
    t.push_back({std::move(name), std::move(shape), fill, store, static_cast<int32_t>(layer)});
  };
  auto matrix = [&](std::string name, std::vector<int64_t> shape, int64_t layer, SynthFill fill = SynthFill::kMatrix) {
    add(std::move(name), std::move(shape), fill, SynthStore::kWeight, layer);
  };
  auto f32 = [&](std::string name, std::vector<int64_t> shape, int64_t layer, SynthFill fill) {
    add(std::move(name), std::move(shape), fill, SynthStore::kF32, layer);
  };
  add("model.embed_tokens.weight", {V, H}, SynthFill::kEmbedding, SynthStore::kEmbedding, -1);
  matrix("model.hc_head.hc_fn", {n, n * H}, -1);
  f32("model.hc_head.hc_base", {n}, -1, SynthFill::kZeros);
  f32("model.hc_head.hc_scale", {1}, -1, SynthFill::kZeros);
  const json& lt = c.at("layer_types");
  const json& mt = c.at("mlp_layer_types");
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string b = fmt::format("model.layers.{}.", l);
    for (const char* sub : {"attn", "ffn"}) {
      matrix(b + fmt::format("hc_{}_fn", sub), {(2 + n) * n, n * H}, l);
      f32(b + fmt::format("hc_{}_base", sub), {(2 + n) * n}, l, SynthFill::kZeros);
      f32(b + fmt::format("hc_{}_scale", sub), {3}, l, SynthFill::kZeros);
    }
    f32(b + "attn_norm.weight", {H}, l, SynthFill::kOnes);
    f32(b + "ffn_norm.weight", {H}, l, SynthFill::kOnes);
    const std::string a = b + "attn.";
    matrix(a + "wq_a.weight", {ql, H}, l);
    f32(a + "q_norm.weight", {ql}, l, SynthFill::kOnes);
    matrix(a + "wq_b.weight", {nh * hd, ql}, l);
    matrix(a + "wkv.weight", {hd, H}, l);
    f32(a + "norm.weight", {hd}, l, SynthFill::kOnes);
    add(a + "wo_a.weight", {og * ol, nh * hd / og}, SynthFill::kMatrix, SynthStore::kFloat, l);  // head_matmul
    matrix(a + "wo_b.weight", {H, og * ol}, l, SynthFill::kOutProj);
    f32(a + "attn_sink", {nh}, l, SynthFill::kZeros);
    const bool is_csa = lt.at(static_cast<size_t>(l)) == "compressed_sparse_attention";
    auto compressor = [&](const std::string& pre, int64_t dim) {
      const int64_t width = is_csa ? 2 * dim : dim;
      matrix(pre + "wkv.weight", {width, H}, l);
      matrix(pre + "wgate.weight", {width, H}, l);
      f32(pre + "ape", {is_csa ? csa : hca, width}, l, SynthFill::kZeros);
      f32(pre + "norm.weight", {dim}, l, SynthFill::kOnes);
    };
    compressor(a + "compressor.", hd);
    if (is_csa) {
      compressor(a + "indexer.compressor.", id);
      matrix(a + "indexer.wq_b.weight", {ih * id, ql}, l);
      matrix(a + "indexer.weights_proj.weight", {ih, H}, l);
    }
    const std::string f = b + "ffn.";
    f32(f + "gate.weight", {E, H}, l, SynthFill::kRouter);
    if (mt.at(static_cast<size_t>(l)) == "hash_moe") add(f + "gate.tid2eid", {V, k}, SynthFill::kHashRoutes, SynthStore::kI32, l);
    else f32(f + "gate.bias", {E}, l, SynthFill::kZeros);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = f + fmt::format("experts.{}.", e);
      add(x + "w1.weight", {F, H}, SynthFill::kMatrix, SynthStore::kExpert, l);
      add(x + "w3.weight", {F, H}, SynthFill::kMatrix, SynthStore::kExpert, l);
      add(x + "w2.weight", {H, F}, SynthFill::kOutProj, SynthStore::kExpert, l);
    }
    matrix(f + "shared_experts.w1.weight", {Fs, H}, l);
    matrix(f + "shared_experts.w3.weight", {Fs, H}, l);
    matrix(f + "shared_experts.w2.weight", {H, Fs}, l, SynthFill::kOutProj);
  }
  f32("model.norm.weight", {H}, -1, SynthFill::kOnes);
  matrix("head.weight", {V, H}, -1);
  return t;
}

}  // namespace

json hf_synthetic_config(const ModelPreset& p, int64_t n_layer) {
  json c = parse_config(p);
  const std::string type = c.value("model_type", "");
  c["num_hidden_layers"] = n_layer;
  if (type == "deepseek_v4") {
    const int64_t n_hash = c.value("num_hash_layers", int64_t{3});
    c.erase("num_hash_layers");
    json lt = json::array(), mt = json::array();
    for (int64_t l = 0; l < n_layer; ++l) {
      // upstream compress_ratios: 0, 0 (sliding window only: built as HCA here), then 4 (CSA) and 128 (HCA)
      lt.push_back(l >= 2 && l % 2 == 0 ? "compressed_sparse_attention" : "heavily_compressed_attention");
      mt.push_back(l < n_hash ? "hash_moe" : "moe");
    }
    c["layer_types"] = std::move(lt);
    c["mlp_layer_types"] = std::move(mt);
    return c;
  }
  fail(ErrorCode::kUnsupported, "model preset {}: no synthetic Hugging Face layout for model_type '{}'", p.name, type);
}

std::vector<SynthTensor> hf_synthetic_tensors(const ModelPreset& p, int64_t n_layer) {
  const json c = hf_synthetic_config(p, n_layer);
  return deepseek_v4_tensors(p, c, n_layer);  // hf_synthetic_config refused every other model_type
}

int64_t hf_synthetic_params(const ModelPreset& p, int64_t n_layer, bool active) {
  const int64_t L = n_layer > 0 ? n_layer : p.n_layer;
  int64_t total = 0, experts = 0;
  for (const SynthTensor& t : hf_synthetic_tensors(p, L)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (active && t.store == SynthStore::kEmbedding) continue;
    (t.store == SynthStore::kExpert ? experts : total) += n;
  }
  return total + (active ? experts / p.n_expert * p.n_expert_used : experts);
}

}  // namespace ft
