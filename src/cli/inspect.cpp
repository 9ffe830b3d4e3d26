// `ft inspect PATH [--json] [--dump TENSOR --out FILE]`: what a checkpoint holds — architecture, key
// hyperparameters (GGUF `{arch}.*` keys or config.json), tokenizer summary, tensor table, bytes per
// dtype and total — as text or one JSON object; or one tensor dequantized to float32.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/format.h"

namespace ft::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Summary {
  std::string format;
  std::string architecture;
  int64_t block_count = 0, embedding_length = 0, feed_forward_length = 0, head_count = 0, head_count_kv = 0,
          head_dim = 0, vocab_size = 0, context_length = 0, expert_count = 0, expert_used_count = 0,
          expert_feed_forward_length = 0;
  int64_t leading_dense = 0, shared_experts = 0, nextn_layers = 0;  // DeepSeek-V3 family
  json mla;             // multi-head latent attention widths, or null
  json rope_freq_base;  // number, or null when the checkpoint does not say
  std::string rope_scaling;  // "yarn x32 (from 4096)", or "" without scaling
  int64_t sliding_window = 0;   // tokens (0: none)
  int64_t sliding_layers = -1;  // layers that slide (-1: not stated per layer)
  int64_t linear_layers = 0;    // linear-attention (Gated DeltaNet) layers
  std::vector<std::string> features;  // architecture-specific blocks in words (Qwen4-Exp's streams, PLE, QSA)
  std::string tokenizer_model;
  json bos_token_id, eos_token_id;  // id / list of ids, or null
};

// An integer metadata value; for a per-layer array, its largest element; 0 if absent or not integral.
int64_t int_of(const json& meta, const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_array()) {
    int64_t best = 0;
    for (const auto& x : *it)
      if (x.is_number_integer()) best = std::max(best, x.get<int64_t>());
    return best;
  }
  return 0;
}

json value_or_null(const json& meta, const std::string& key) {
  auto it = meta.find(key);
  return it == meta.end() ? json(nullptr) : *it;
}

Summary summarize_gguf(const Checkpoint& ck) {
  const json& m = ck.metadata();
  Summary s;
  s.format = "gguf";
  auto arch = m.find("general.architecture");
  s.architecture = arch != m.end() && arch->is_string() ? arch->get<std::string>() : "";
  const std::string p = s.architecture + ".";
  s.block_count = int_of(m, p + "block_count");
  s.embedding_length = int_of(m, p + "embedding_length");
  s.feed_forward_length = int_of(m, p + "feed_forward_length");
  s.head_count = int_of(m, p + "attention.head_count");
  s.head_count_kv = m.contains(p + "attention.head_count_kv") ? int_of(m, p + "attention.head_count_kv") : s.head_count;
  s.head_dim = int_of(m, p + "attention.key_length");
  if (s.head_dim == 0 && s.head_count > 0) s.head_dim = s.embedding_length / s.head_count;
  s.context_length = int_of(m, p + "context_length");
  s.expert_count = int_of(m, p + "expert_count");
  s.expert_used_count = int_of(m, p + "expert_used_count");
  s.expert_feed_forward_length = int_of(m, p + "expert_feed_forward_length");
  s.rope_freq_base = value_or_null(m, p + "rope.freq_base");
  if (auto t = m.find(p + "rope.scaling.type"); t != m.end() && t->is_string() && t->get<std::string>() != "none")
    s.rope_scaling = fmt::format("{} x{} (from {})", t->get<std::string>(),
                                 value_or_null(m, p + "rope.scaling.factor").dump(),
                                 int_of(m, p + "rope.scaling.original_context_length"));
  s.sliding_window = int_of(m, p + "attention.sliding_window");
  if (auto pat = m.find(p + "attention.sliding_window_pattern"); pat != m.end() && pat->is_array()) {
    s.sliding_layers = 0;
    for (const auto& x : *pat) s.sliding_layers += x.is_boolean() && x.get<bool>();
  }
  if (int_of(m, p + "ssm.time_step_rank") > 0) {  // llama.cpp's qwen3next / qwen35: every interval-th attends
    const int64_t every = std::max<int64_t>(1, m.contains(p + "full_attention_interval")
                                                   ? int_of(m, p + "full_attention_interval") : 4);
    for (int64_t l = 0; l < s.block_count; ++l) s.linear_layers += (l + 1) % every != 0;
  }
  s.leading_dense = int_of(m, p + "leading_dense_block_count");
  s.shared_experts = int_of(m, p + "expert_shared_count");
  s.nextn_layers = int_of(m, p + "nextn_predict_layers");
  if (const int64_t r = int_of(m, p + "attention.kv_lora_rank"); r > 0) {
    // key_length / value_length are the latent's here (kv_lora_rank + rope, kv_lora_rank); *_mla per head.
    const int64_t rope = int_of(m, p + "rope.dimension_count"), qk = int_of(m, p + "attention.key_length_mla");
    s.mla = {{"q_lora_rank", int_of(m, p + "attention.q_lora_rank")}, {"kv_lora_rank", r},
             {"qk_nope_head_dim", qk > 0 ? qk - rope : s.head_dim - rope}, {"qk_rope_head_dim", rope},
             {"v_head_dim", m.contains(p + "attention.value_length_mla") ? int_of(m, p + "attention.value_length_mla")
                                                                        : int_of(m, p + "attention.value_length")}};
    if (qk > 0) s.head_dim = qk;
  }
  s.vocab_size = int_of(m, p + "vocab_size");
  auto tokens = m.find("tokenizer.ggml.tokens");
  if (s.vocab_size == 0 && tokens != m.end() && tokens->is_array()) s.vocab_size = static_cast<int64_t>(tokens->size());
  auto model = m.find("tokenizer.ggml.model");
  s.tokenizer_model = model != m.end() && model->is_string() ? model->get<std::string>() : "none";
  if (auto pre = m.find("tokenizer.ggml.pre"); pre != m.end() && pre->is_string())
    s.tokenizer_model += " (pre " + pre->get<std::string>() + ")";
  s.bos_token_id = value_or_null(m, "tokenizer.ggml.bos_token_id");
  s.eos_token_id = value_or_null(m, "tokenizer.ggml.eos_token_id");
  return s;
}

Summary summarize_hf(const Checkpoint& ck) {
  HfConfig c = read_hf_config(ck.path());
  Summary s;
  s.format = "safetensors";
  s.architecture = c.model_type;
  s.block_count = c.num_hidden_layers;
  s.embedding_length = c.hidden_size;
  s.feed_forward_length = c.intermediate_size;
  s.head_count = c.num_attention_heads;
  s.head_count_kv = c.num_key_value_heads;
  s.head_dim = c.head_dim;
  s.vocab_size = c.vocab_size;
  s.context_length = c.max_position_embeddings;
  s.expert_count = c.n_experts;
  s.expert_used_count = c.n_experts_used;
  // Mixtral-style configs (Mixtral, MiniMax-M2) give their experts intermediate_size, as the loader reads them.
  s.expert_feed_forward_length = c.moe_intermediate_size > 0 || c.n_experts == 0 ? c.moe_intermediate_size
                                                                                  : c.intermediate_size;
  s.rope_freq_base = c.rope_theta > 0 ? json(c.rope_theta) : json(nullptr);
  const json& r = c.raw;
  if (auto rs = r.find("rope_scaling"); rs != r.end() && rs->is_object()) {
    const std::string type = rs->value("rope_type", rs->value("type", std::string("?")));
    if (type != "default")
      s.rope_scaling = fmt::format("{} x{} (from {})", type, rs->value("factor", json(nullptr)).dump(),
                                   int_of(*rs, "original_max_position_embeddings"));
  }
  s.sliding_window = int_of(r, "sliding_window");
  if (auto lt = r.find("layer_types"); lt != r.end() && lt->is_array()) {
    s.sliding_layers = 0;
    for (const auto& x : *lt) s.sliding_layers += x == "sliding_attention";
    for (const auto& x : *lt) s.linear_layers += x == "linear_attention";
  }
  if (s.sliding_layers == 0 || (r.contains("use_sliding_window") && !r.value("use_sliding_window", true)))
    s.sliding_window = 0;
  if (const int64_t hc = int_of(r, "hc_count"); hc > 0 && r.contains("hc_lowrank"))
    s.features.push_back(fmt::format("{} residual streams (gated hyper-connections)", hc));
  if (auto pl = r.find("ple_layer_ids"); pl != r.end() && pl->is_array() && !pl->empty())
    s.features.push_back(fmt::format("per-layer n-gram embeddings on layers {} (up to {}-grams)", pl->dump(),
                                     int_of(r, "ngram_size")));
  if (const int64_t b = int_of(r, "indexer_budget"); b > 0)
    s.features.push_back(fmt::format("sparse attention: {} indexed tokens a query in blocks of {}, plus its own block", b,
                                     int_of(r, "indexer_compress_ratio")));
  s.leading_dense = int_of(r, "first_k_dense_replace");
  s.shared_experts = int_of(r, "n_shared_experts");
  // Qwen2-MoE, Qwen3-Next, Qwen3.5-MoE: one shared expert of its own width.
  if (s.shared_experts == 0 && s.expert_count > 0 && int_of(r, "shared_expert_intermediate_size") > 0) s.shared_experts = 1;
  s.nextn_layers = int_of(r, "num_nextn_predict_layers");
  if (int_of(r, "kv_lora_rank") > 0) {
    s.mla = {{"q_lora_rank", int_of(r, "q_lora_rank")}, {"kv_lora_rank", int_of(r, "kv_lora_rank")},
             {"qk_nope_head_dim", int_of(r, "qk_nope_head_dim")}, {"qk_rope_head_dim", int_of(r, "qk_rope_head_dim")},
             {"v_head_dim", int_of(r, "v_head_dim")}};
    s.head_dim = int_of(r, "qk_nope_head_dim") + int_of(r, "qk_rope_head_dim");
  }
  s.tokenizer_model = "none";
  fs::path tok = fs::path(ck.path()) / "tokenizer.json";
  if (fs::exists(tok)) {
    json t = read_json_file(tok.string());
    s.tokenizer_model = "tokenizer.json";
    if (t.is_object() && t.contains("model") && t["model"].is_object() && t["model"].contains("type") &&
        t["model"]["type"].is_string())
      s.tokenizer_model = t["model"]["type"].get<std::string>();
  }
  if (c.bos_token_id >= 0) s.bos_token_id = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) s.eos_token_id = c.eos_token_ids[0];
  else if (!c.eos_token_ids.empty()) s.eos_token_id = c.eos_token_ids;
  return s;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  return "[" + fmt::format("{}", fmt::join(shape, ", ")) + "]";
}

json to_json(const Checkpoint& ck, const Summary& s) {
  json tensors = json::array();
  std::map<std::string, int64_t> per_dtype;
  int64_t total = 0;
  for (const TensorInfo& t : ck.tensors()) {
    tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"bytes", t.bytes}});
    per_dtype[dtype_name(t.dtype)] += t.bytes;
    total += t.bytes;
  }
  return {
      {"path", ck.path()},
      {"format", s.format},
      {"architecture", s.architecture},
      {"block_count", s.block_count},
      {"embedding_length", s.embedding_length},
      {"feed_forward_length", s.feed_forward_length},
      {"head_count", s.head_count},
      {"head_count_kv", s.head_count_kv},
      {"head_dim", s.head_dim},
      {"vocab_size", s.vocab_size},
      {"context_length", s.context_length},
      {"expert_count", s.expert_count},
      {"expert_used_count", s.expert_used_count},
      {"expert_feed_forward_length", s.expert_feed_forward_length},
      {"leading_dense_block_count", s.leading_dense},
      {"expert_shared_count", s.shared_experts},
      {"nextn_predict_layers", s.nextn_layers},
      {"mla", s.mla},
      {"rope_freq_base", s.rope_freq_base},
      {"rope_scaling", s.rope_scaling},
      {"sliding_window", s.sliding_window},
      {"sliding_layers", s.sliding_layers},
      {"linear_attention_layers", s.linear_layers},
      {"features", s.features},
      {"tokenizer",
       {{"model", s.tokenizer_model}, {"vocab_size", s.vocab_size}, {"bos_token_id", s.bos_token_id},
        {"eos_token_id", s.eos_token_id}}},
      {"tensors", tensors},
      {"bytes_per_dtype", per_dtype},
      {"total_bytes", total},
  };
}

std::string id_str(const json& v) { return v.is_null() ? "not set" : v.dump(); }

void print_text(const json& j) {
  auto row = [](const char* k, const std::string& v) { std::printf("%-26s %s\n", k, v.c_str()); };
  auto num = [&](const char* k, const char* key) { row(k, std::to_string(j[key].get<int64_t>())); };
  row("path", j["path"].get<std::string>());
  row("format", j["format"].get<std::string>());
  row("architecture", j["architecture"].get<std::string>().empty() ? "-" : j["architecture"].get<std::string>());
  const int64_t nextn = j["nextn_predict_layers"].get<int64_t>();
  if (nextn == 0) num("layers", "block_count");
  else  // GGUF counts the MTP blocks in block_count (llama.cpp's glm4moe); config.json does not
    row("layers", fmt::format("{} ({} {} MTP)", j["block_count"].get<int64_t>(),
                              j["format"] == "gguf" ? "incl." : "+", nextn));
  num("hidden size", "embedding_length");
  num("feed-forward size", "feed_forward_length");
  num("attention heads", "head_count");
  num("KV heads", "head_count_kv");
  num("head dim", "head_dim");
  if (const json& m = j["mla"]; !m.is_null())
    row("MLA", fmt::format("q_lora {}, kv_lora {}, qk {} nope + {} rope, v {}", m["q_lora_rank"].get<int64_t>(),
                           m["kv_lora_rank"].get<int64_t>(), m["qk_nope_head_dim"].get<int64_t>(),
                           m["qk_rope_head_dim"].get<int64_t>(), m["v_head_dim"].get<int64_t>()));
  num("experts", "expert_count");
  num("experts per token", "expert_used_count");
  num("expert feed-forward size", "expert_feed_forward_length");
  if (j["expert_shared_count"].get<int64_t>() > 0) num("shared experts", "expert_shared_count");
  if (j["leading_dense_block_count"].get<int64_t>() > 0) num("leading dense layers", "leading_dense_block_count");
  num("context length", "context_length");
  row("RoPE base", id_str(j["rope_freq_base"]));
  if (!j["rope_scaling"].get<std::string>().empty()) row("RoPE scaling", j["rope_scaling"].get<std::string>());
  if (const int64_t w = j["sliding_window"].get<int64_t>(); w > 0) {
    const int64_t n = j["sliding_layers"].get<int64_t>();
    row("sliding window", n >= 0 ? fmt::format("{} tokens on {} of {} layers", w, n, j["block_count"].get<int64_t>())
                                 : fmt::format("{} tokens", w));
  }
  if (const int64_t n = j["linear_attention_layers"].get<int64_t>(); n > 0)
    row("linear attention", fmt::format("{} of {} layers (Gated DeltaNet: a recurrent state per request, no KV)", n,
                                        j["block_count"].get<int64_t>()));
  for (const json& f : j["features"]) row("features", f.get<std::string>());
  const json& t = j["tokenizer"];
  row("tokenizer", fmt::format("{}, vocab {}, BOS {}, EOS {}", t["model"].get<std::string>(), j["vocab_size"].get<int64_t>(),
                               id_str(t["bos_token_id"]), id_str(t["eos_token_id"])));
  size_t name_w = 4;
  for (const auto& x : j["tensors"]) name_w = std::max(name_w, x["name"].get<std::string>().size());
  std::printf("\n%-*s  %-7s  %-22s  %s\n", static_cast<int>(name_w), "name", "dtype", "shape", "bytes");
  for (const auto& x : j["tensors"])
    std::printf("%-*s  %-7s  %-22s  %lld\n", static_cast<int>(name_w), x["name"].get<std::string>().c_str(),
                x["dtype"].get<std::string>().c_str(), shape_str(x["shape"].get<std::vector<int64_t>>()).c_str(),
                static_cast<long long>(x["bytes"].get<int64_t>()));
  std::printf("\nbytes per dtype\n");
  for (const auto& [name, b] : j["bytes_per_dtype"].items())
    std::printf("  %-8s %14lld  %s\n", name.c_str(), static_cast<long long>(b.get<int64_t>()), format_bytes(b.get<int64_t>()).c_str());
  int64_t total = j["total_bytes"].get<int64_t>();
  std::printf("  %-8s %14lld  %s  (%zu tensors)\n", "total", static_cast<long long>(total), format_bytes(total).c_str(),
              j["tensors"].size());
}

// Writes `t` as little-endian float32, row-major, dequantizing one row (last dim) at a time.
void dump_tensor(const TensorInfo& t, const std::string& out) {
  if (!can_dequantize(t.dtype)) fail(ErrorCode::kUnsupported, "{}: cannot convert {} to float32", t.name, dtype_name(t.dtype));
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  const int64_t rows = cols == 0 ? 0 : t.numel() / cols;
  const int64_t row_bytes = dtype_bytes(t.dtype, cols);
  std::ofstream f(out, std::ios::binary | std::ios::trunc);
  if (!f) fail(ErrorCode::kIo, "{}: cannot open for writing", out);
  std::vector<float> buf(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t.dtype, t.data + r * row_bytes, buf.data(), cols);
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(cols * 4));
  }
  f.close();
  if (!f) fail(ErrorCode::kIo, "{}: write failed", out);
}

// Errors reach the user as one line: control characters from file contents (tensor names, keys) are escaped.
std::string one_line(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

struct Options {
  std::string path;
  bool json = false;
  std::string dump;
  std::string out;
};

int run(const Options& o) {
  try {
    std::unique_ptr<Checkpoint> ck = open_checkpoint(o.path);
    if (!o.dump.empty()) {
      const TensorInfo& t = ck->get(o.dump);
      dump_tensor(t, o.out);
      std::printf("%s: %s %s -> %s (float32, %lld values)\n", t.name.c_str(), dtype_name(t.dtype),
                  shape_str(t.shape).c_str(), o.out.c_str(), static_cast<long long>(t.numel()));
      return 0;
    }
    Summary s = ck->format() == "gguf" ? summarize_gguf(*ck) : summarize_hf(*ck);
    json j = to_json(*ck, s);
    if (o.json) std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    else print_text(j);
    return 0;
  } catch (const Error& e) {
    throw Error(e.code(), one_line(e.what()));
  }
}

}  // namespace

void add_inspect_command(CLI::App& app, Action& action) {
  auto opts = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show what a GGUF file or Hugging Face folder holds");
  cmd->add_option("path", opts->path, "GGUF file (first split of a split set too) or Hugging Face folder")->required();
  cmd->add_flag("--json", opts->json, "Print one JSON object");
  CLI::Option* dump = cmd->add_option("--dump", opts->dump, "Write this tensor dequantized to float32 (needs --out)");
  CLI::Option* out = cmd->add_option("--out", opts->out, "Output file for --dump (little-endian float32, row-major)");
  dump->needs(out);
  out->needs(dump);
  cmd->callback([&action, opts] { action = [opts] { return run(*opts); }; });
}

}  // namespace ft::cli
