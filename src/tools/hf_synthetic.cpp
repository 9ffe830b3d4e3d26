#include "tools/hf_synthetic.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/qwen4_exp.h"
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
    const bool is_sliding = lt.at(static_cast<size_t>(l)) == "sliding_attention";
    auto compressor = [&](const std::string& pre, int64_t dim) {
      const int64_t width = is_csa ? 2 * dim : dim;
      matrix(pre + "wkv.weight", {width, H}, l);
      matrix(pre + "wgate.weight", {width, H}, l);
      f32(pre + "ape", {is_csa ? csa : hca, width}, l, SynthFill::kZeros);
      f32(pre + "norm.weight", {dim}, l, SynthFill::kOnes);
    };
    if (!is_sliding) compressor(a + "compressor.", hd);
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

/** Qwen4-Exp's tensors (model/qwen4_exp.cpp, model/gated_delta_net.cpp and model/blocks.cpp's names). */
std::vector<SynthTensor> qwen4_exp_tensors(const ModelPreset& p, const json& c, int64_t n_layer) {
  const int64_t H = need_int(c, "hidden_size", p), V = need_int(c, "vocab_size", p);
  const int64_t nh = need_int(c, "num_attention_heads", p), kvh = need_int(c, "num_key_value_heads", p);
  const int64_t hd = need_int(c, "head_dim", p), n = need_int(c, "hc_count", p), r = need_int(c, "hc_lowrank", p);
  const int64_t Hk = need_int(c, "linear_num_key_heads", p), Hv = need_int(c, "linear_num_value_heads", p);
  const int64_t dk = need_int(c, "linear_key_head_dim", p), dv = need_int(c, "linear_value_head_dim", p);
  const int64_t K = need_int(c, "linear_conv_kernel_dim", p), E = need_int(c, "num_experts", p);
  const int64_t F = need_int(c, "moe_intermediate_size", p), Fs = need_int(c, "shared_expert_intermediate_size", p);
  const int64_t ih = need_int(c, "indexer_n_heads", p), id = need_int(c, "indexer_head_dim", p);
  const int64_t ple_dim = need_int(c, "ple_embed_dim", p), pk = need_int(c, "ple_conv_kernel_size", p);
  const int64_t ngram = need_int(c, "ngram_size", p), heads_per = need_int(c, "heads_per_ngram", p);
  const int64_t base = need_int(c, "ngram_vocab_size_base", p), div = need_int(c, "make_ngram_vocab_size_divisible_by", p);
  const int64_t seed = c.value("seed", int64_t{1234});
  const int64_t nH = n * H, C = 2 * Hk * dk + Hv * dv;
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
  auto gated_residual = [&](const std::string& pre, bool inject, int64_t layer) {
    f32(pre + "hc_norm.weight", {nH}, layer, SynthFill::kZeros);
    matrix(pre + "input_mix_weight_down.weight", {r, nH}, layer);
    matrix(pre + "input_mix_weight_up.weight", {nH, r}, layer);
    if (inject) matrix(pre + "block_inject_weight.weight", {n, nH}, layer);
  };
  std::vector<int64_t> ple_ids;
  for (const json& v : c.value("ple_layer_ids", json::array())) ple_ids.push_back(v.get<int64_t>());
  add("model.embed_tokens.weight", {V, H}, SynthFill::kEmbedding, SynthStore::kEmbedding, -1);
  gated_residual("model.hyper_connection_mixer.", false, -1);
  const json& lt = c.at("layer_types");
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string b = fmt::format("model.layers.{}.", l);
    gated_residual(b + "attn_hyper_connection.", true, l);
    gated_residual(b + "mlp_hyper_connection.", true, l);
    if (lt.at(static_cast<size_t>(l)) == "linear_attention") {
      const std::string a = b + "linear_attn.";
      matrix(a + "in_proj_qkv.weight", {C, H}, l);
      matrix(a + "in_proj_z.weight", {Hv * dv, H}, l);
      matrix(a + "in_proj_b.weight", {Hv, H}, l);
      matrix(a + "in_proj_a.weight", {Hv, H}, l);
      f32(a + "conv1d.weight", {C, 1, K}, l, SynthFill::kMatrix);
      f32(a + "A_log", {Hv}, l, SynthFill::kZeros);
      f32(a + "dt_bias", {Hv}, l, SynthFill::kZeros);
      f32(a + "norm.weight", {dv}, l, SynthFill::kOnes);
      matrix(a + "out_proj.weight", {H, Hv * dv}, l, SynthFill::kOutProj);
    } else {
      const std::string a = b + "self_attn.";
      matrix(a + "q_proj.weight", {2 * nh * hd, H}, l);  // query and output-gate rows per head
      matrix(a + "k_proj.weight", {kvh * hd, H}, l);
      matrix(a + "v_proj.weight", {kvh * hd, H}, l);
      matrix(a + "o_proj.weight", {H, nh * hd}, l, SynthFill::kOutProj);
      f32(a + "q_norm.weight", {hd}, l, SynthFill::kZeros);
      f32(a + "k_norm.weight", {hd}, l, SynthFill::kZeros);
      matrix(a + "indexer.index_qk_proj.weight", {(ih + 1) * id, H}, l);
      f32(a + "indexer.q_layernorm.weight", {id}, l, SynthFill::kZeros);
      f32(a + "indexer.k_layernorm.weight", {id}, l, SynthFill::kZeros);
    }
    const std::string m = b + "mlp.";
    f32(m + "gate.weight", {E, H}, l, SynthFill::kRouter);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = m + fmt::format("experts.{}.", e);
      add(x + "gate_proj.weight", {F, H}, SynthFill::kMatrix, SynthStore::kExpert, l);
      add(x + "up_proj.weight", {F, H}, SynthFill::kMatrix, SynthStore::kExpert, l);
      add(x + "down_proj.weight", {H, F}, SynthFill::kOutProj, SynthStore::kExpert, l);
    }
    matrix(m + "shared_expert.gate_proj.weight", {Fs, H}, l);
    matrix(m + "shared_expert.up_proj.weight", {Fs, H}, l);
    matrix(m + "shared_expert.down_proj.weight", {H, Fs}, l, SynthFill::kOutProj);
    f32(m + "shared_expert_gate.weight", {1, H}, l, SynthFill::kZeros);
    const auto ple = std::find(ple_ids.begin(), ple_ids.end(), l + 1);
    if (ple == ple_ids.end()) continue;
    const std::string e = b + "ple.";
    const int64_t heads = (ngram - 1) * heads_per;
    const NgramTables nt = qwen4_ngram_tables(V, ngram, heads_per, base, div, ple - ple_ids.begin(), seed);
    // Stored as the token embedding is (a gathered table: --weight-type's embedding form), never written.
    add(e + "ple_embedding.ngram_embedding.weight", {nt.rows, ple_dim / heads}, SynthFill::kLazyZeros,
        SynthStore::kEmbedding, l);
    matrix(e + "key_proj.weight", {nH, ple_dim}, l);
    matrix(e + "value_proj.weight", {H, ple_dim}, l, SynthFill::kOutProj);
    f32(e + "conv1d.weight", {nH, 1, pk}, l, SynthFill::kMatrix);
    for (const char* nm : {"norm_key", "norm_query", "norm_conv"}) f32(e + nm + ".weight", {nH}, l, SynthFill::kZeros);
  }
  matrix("lm_head.weight", {V, H}, -1);
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
      // upstream compress_ratios: 0, 0 (sliding window only), then 4 (CSA) and 128 (HCA) alternating
      lt.push_back(l < 2 ? "sliding_attention" : l % 2 == 0 ? "compressed_sparse_attention" : "heavily_compressed_attention");
      mt.push_back(l < n_hash ? "hash_moe" : "moe");
    }
    c["layer_types"] = std::move(lt);
    c["mlp_layer_types"] = std::move(mt);
    return c;
  }
  if (type == "qwen4_exp_text") {
    const int64_t every = c.value("full_attention_interval", int64_t{4});
    json lt = json::array(), ple = json::array();
    for (int64_t l = 0; l < n_layer; ++l) lt.push_back((l + 1) % every == 0 ? "full_attention" : "linear_attention");
    for (const json& v : c.value("ple_layer_ids", json::array()))  // 1-based; those within the layer count
      if (v.get<int64_t>() <= n_layer) ple.push_back(v);
    c["layer_types"] = std::move(lt);
    c["ple_layer_ids"] = std::move(ple);
    return c;
  }
  fail(ErrorCode::kUnsupported, "model preset {}: no synthetic Hugging Face layout for model_type '{}'", p.name, type);
}

std::vector<SynthTensor> hf_synthetic_tensors(const ModelPreset& p, int64_t n_layer) {
  const json c = hf_synthetic_config(p, n_layer);  // refuses a model_type without a layout here
  return c["model_type"] == "deepseek_v4" ? deepseek_v4_tensors(p, c, n_layer) : qwen4_exp_tensors(p, c, n_layer);
}

int64_t hf_synthetic_params(const ModelPreset& p, int64_t n_layer, bool active) {
  const int64_t L = n_layer > 0 ? n_layer : p.n_layer;
  int64_t total = 0, experts = 0;
  for (const SynthTensor& t : hf_synthetic_tensors(p, L)) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (active && (t.store == SynthStore::kEmbedding || t.fill == SynthFill::kLazyZeros)) continue;  // tables: a row a token
    (t.store == SynthStore::kExpert ? experts : total) += n;
  }
  return total + (active ? experts / p.n_expert * p.n_expert_used : experts);
}

}  // namespace ft
