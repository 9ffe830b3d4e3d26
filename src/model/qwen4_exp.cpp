// Qwen3.8-Flash-Next preview, `qwen4_exp` (Qwen Team, 2026; transformers 5.17 Qwen4ExpForCausalLM,
// modeling_qwen4_exp.py, the specification; config model_type qwen4_exp_text). Per token the residual
// is n = hc_count streams [n, H]; the embedding starts every stream. No pre-norms: each sub-block reads
// its input through a gated residual (Qwen4ExpTextGatedResidual):
//   s   = RMSNorm_per_stream(streams) * (1 + w)                    [n H]
//   mix = sigmoid(W_up silu(W_down s / n))                         [n H]
//   x   = mean_k mix_k * s_k                                       [H]   the sub-block's input
//   stream_k += 2 sigmoid(W_inject s / n)_k * Block(x)                    (hc_post, identity comb)
// Blocks: Gated DeltaNet (model/gated_delta_net.h, layer_types "linear_attention") or QSA attention
// ("qwen_sparse_attention": gated attention with QK-norm and NeoX RoPE over the key blocks its indexer
// picks, see below), then a MoE FFN with a sigmoid-gated shared expert (softmax top-k routing). The
// model ends with a gated residual without injection and the LM head (no final norm).
// PLE (per-layer embeddings, the linear layers l with l + 1 in ple_layer_ids): hashed n-gram ids of
// the last ngram_size tokens (ops.h ngram_hash) index one table; the embedding e gives a key per
// stream and one value; each stream gates the value by sign-sqrt(key . RMSNorm(stream)) (ple_gate), a
// dilated causal depthwise conv (kernel ple_conv_kernel_size, dilation ngram_size) of the normalised
// gated values adds local context, and the sum joins every stream before the layer.
// QSA indexer: per token a key k (index_qk_proj); keys pooled by mean over blocks of
// indexer_compress_ratio positions, RMSNorm, RoPE at the block's first position; each query's score
// per complete visible block is sum_h relu(q_h . k_block) / sqrt(d) (q = RoPE(RMSNorm(q_h))); the
// indexer_budget / ratio best blocks plus the query's own incomplete block are what attention sees.
// Here the pooling is DeepSeek-V4's compress_kv with zero gates (a softmax of equal logits is the
// mean) and the scoring its indexer_topk (weights sqrt(n_heads), per-query candidates); both rotate
// adjacent pairs at the head's end, so the indexer's head dims are permuted at load (Qwen4Exp::load):
// dot products and RMS norms are unchanged.
// State: the DeltaNet's in the state slots; the PLE conv window and the last tokens there too
// (StateLayer::conv2, ::tokens); the attention's K in the key pages, V then the indexer's key in the
// value pages (kv_v_width), so prefix-cache hits and decode read what a cold prefill wrote.
// ngram_hash, ple_gate, stream_weighted_sum and attention_qsa (and V4's ops used here) exist on the
// CPU and CUDA backends: the model refuses other backends at load. Step scratch is a StepScratch
// (grown geometrically; a grown-out region stays allocated, since a recorded decode graph may use it).
// Tensor parallelism (a WeightLoader shard, dist/tensor_parallel.h): each rank its QSA query heads
// (q and gate rows, o columns) and its KV heads (V in its value pages, then the indexer's key), its Gated DeltaNet key heads with their value heads and recurrent state
// (load_gated_delta_net), its shared-expert columns; the attention, DeltaNet and shared-expert
// outputs all-reduced. The indexer, the hyper-connections, the PLE (n-gram tables, its conv state),
// the router and the routed experts are whole on every rank.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "model/architectures.h"
#include "model/blocks.h"
#include "model/gated_delta_net.h"
#include "model/qwen4_exp.h"
#include "model/step_scratch.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ft {

namespace {

using nlohmann::json;

struct GatedResidual {
  Tensor down;    // F32 [r, n H]: input_mix_weight_down * (1 + hc_norm) / n
  Tensor up;      // [n H, r]: input_mix_weight_up
  Tensor mean;    // F32 [n H]: (1 + hc_norm) / n (stream_weighted_sum)
  Tensor inject;  // F32 [n, n H]: block_inject_weight * (1 + hc_norm) / n (empty: the final mixer)
};

struct Ple {
  Tensor mult, sizes, offsets;  // I64 [ngram_size], [heads], [heads]
  Tensor table;                 // [rows, E / heads] the n-gram embedding (shards stacked)
  Tensor key, value;            // [n H, E], [H, E]
  Tensor kq;                    // F32 [n H]: (1 + norm_key)(1 + norm_query)
  Tensor conv;                  // F32 [n H, (K - 1) dilation + 1]: dilated taps times (1 + norm_conv)
};

struct Layer {
  bool linear = false, ple = false;
  GatedResidual hc_attn, hc_mlp;
  GatedDeltaNetWeights gdn;
  AttentionWeights attn;
  Tensor wv_row;               // F32 [kv_v_width, H]: v_proj rows, then zeros (the indexer's columns)
  Tensor idx_q, idx_k;         // F32 [ih id, H] permuted; [2 id, H] permuted key rows then zeros
  Tensor idx_qnorm, idx_knorm; // F32 [id] permuted 1 + w
  MoeWeights moe;
  Ple p;
};

int64_t num(const json& c, const char* key, int64_t def = -1) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (def >= 0) return def;
    fail(ErrorCode::kInvalidFile, "config.json: {}: missing (qwen4_exp needs it)", key);
  }
  if (!it->is_number_integer()) fail(ErrorCode::kInvalidFile, "config.json: {}: not an integer", key);
  return it->get<int64_t>();
}

std::vector<float> f32(WeightLoader& ld, const std::string& name, std::initializer_list<int64_t> shape,
                       WeightKind kind = WeightKind::kMatrix) {
  const Tensor t = ld.host(WeightName{"", name}, shape, kind);
  std::vector<float> v(static_cast<size_t>(t.numel()));
  dequantize_row(t.dtype, t.data, v.data(), t.numel());
  return v;
}

class Qwen4Exp final : public Model {
 public:
  Qwen4Exp(ModelConfig c, WeightLoader& ld, Ops& ops) : Model(std::move(c)) {
    if (const std::string b = ops.name(); b != "cpu" && b != "cuda")  // the ops named below exist on these only
      fail(ErrorCode::kUnsupported, "qwen4_exp: the {} backend has no kernels for ngram_hash, ple_gate, "
           "stream_weighted_sum, attention_qsa, hc_post, compress_kv and indexer_topk yet; run it on the CPU or "
           "CUDA backend", b);
    if (ld.is_gguf()) fail(ErrorCode::kUnsupported, "qwen4_exp: GGUF checkpoints are not supported (safetensors)");
    read_config(ld.checkpoint().metadata().at("config"));
    load(ld, ops);
  }

  /** The token table (unless the LM head is tied to it) and every PLE layer's n-gram table to host
   *  memory the backend reads a row per token from (as the decoder's token table), freeing their
   *  device copies. */
  bool move_embeddings_to_host(WeightLoader& ld) override {
    if (host_mapped_bytes_ > 0 || movable_embedding_bytes() == 0) return host_mapped_bytes_ > 0;
    auto drop = [&](const void* device_copy) {  // CPU: none (the tables are views of the file or host copies)
      std::erase_if(storage_, [&](const Buffer& b) { return b.data() == device_copy; });
    };
    if (!embeddings_tied_) {
      const void* device_copy = tok_embd_.data;
      tok_embd_ = ld.get_host_mapped({"", "model.embed_tokens.weight"}, {config_.n_vocab, config_.n_embd});
      drop(device_copy);
      host_mapped_bytes_ += tok_embd_.bytes();
    }
    for (size_t l = 0; l < layers_.size(); ++l) {
      Tensor& table = layers_[l].p.table;
      if (!layers_[l].ple) continue;
      const void* device_copy = table.data;
      table = ngram_table_host_mapped(ld, fmt::format("model.layers.{}.ple.ple_embedding.", l), table.dim(1));
      drop(device_copy);
      host_mapped_bytes_ += table.bytes();
    }
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
    return true;
  }
  int64_t unplaced_bytes() const override {
    int64_t n = tok_embd_.data ? 0 : tok_embd_.bytes();
    for (const Layer& L : layers_) n += L.ple && !L.p.table.data ? L.p.table.bytes() : 0;
    return n;
  }
  /** Uploads the tables move_embeddings_to_host did not move (loaded as metadata only). */
  void place_deferred(WeightLoader& ld, Ops& ops) override {
    if (!tok_embd_.data) tok_embd_ = ld.get({"", "model.embed_tokens.weight"}, {config_.n_vocab, config_.n_embd});
    for (size_t l = 0; l < layers_.size(); ++l) {
      Tensor& table = layers_[l].p.table;
      if (!layers_[l].ple || table.data) continue;
      table = ngram_table(ld, ops, fmt::format("model.layers.{}.ple.ple_embedding.", l), table.dim(1));
    }
    for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  }
  /** The token table's bytes unless the LM head is tied to it, plus every n-gram table's. */
  int64_t movable_embedding_bytes() const override {
    int64_t n = embeddings_tied_ ? 0 : tok_embd_.bytes();
    for (const Layer& L : layers_) n += L.ple ? L.p.table.bytes() : 0;
    return n;
  }
  void forward(ForwardContext& ctx) const override;

 private:
  void read_config(const json& cfg);
  void load(WeightLoader& ld, Ops& ops);
  /** config_ (the whole model's, `full`) made tensor-parallel rank tp_'s: n_head, n_head_kv (KV heads
   *  split, not replicated: dist::tp_kv_heads) and the value pages' width with them, the DeltaNet's key and value
   *  heads, the shared expert's width divided by the size. Throws ft::Error(kUnsupported) naming what
   *  the size does not divide (dist::tp_split). */
  void shard_config(const ModelConfig& full);
  GatedResidual load_gr(WeightLoader& ld, Ops& ops, const std::string& pre, bool inject);
  Tensor upload_i64(WeightLoader& ld, Ops& ops, const std::string& name, const std::vector<int64_t>& want);
  /** The n-gram table of PLE module `t` ("model.layers.N.ple.ple_embedding."), [rows, hdim]: its
   *  `ngram_embedding.weight`, or the split_ngram_parts row shards `ngram_embedding.shard_<i>.weight`
   *  stacked in order (transformers concatenates them at load). Resident: adjacent plain-dtype shards
   *  as one view of the mapped file, others as a stacked copy. Throws kNotFound for a missing shard,
   *  kInvalidFile for shards of different dtypes, what the loader throws. */
  Tensor ngram_table(WeightLoader& ld, Ops& ops, const std::string& t, int64_t hdim);
  /** The n-gram table's dtype and shape [rows, hdim] with no data (placed by the plan: place_deferred
   *  or move_embeddings_to_host), its tensors validated as ngram_table does. */
  Tensor ngram_table_unplaced(WeightLoader& ld, const std::string& t, int64_t hdim);
  /** ngram_table in host memory the backend reads over the bus (WeightLoader::get_host_mapped,
   *  get_stacked_host_mapped). Throws as ngram_table does. */
  Tensor ngram_table_host_mapped(WeightLoader& ld, const std::string& t, int64_t hdim);
  /** The shards of a split table (names and rows, in order), each validated (dtype, width `hdim`).
   *  Throws kNotFound for a missing shard, kInvalidFile for split_ngram_parts < 1. */
  void ngram_shards(WeightLoader& ld, const std::string& t, int64_t hdim, std::vector<WeightName>& names,
                    std::vector<int64_t>& rows) const;
  void gated_residual(ForwardContext& ctx, const GatedResidual& g, const Tensor& streams, Tensor x) const;
  void ple(ForwardContext& ctx, int64_t l, Tensor streams) const;
  void attention(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out) const;

  struct Scratch {
    StepScratch mem;
    Tensor streams, streams2, flat, low, up, post, comb, rep, ids, emb, key, value, gv, gvn, conv, vrow, iq, iproj, iw,
        sel, ent;
  };
  Scratch& scratch(Ops& ops, int64_t T, int64_t entries) const;

  int64_t n_hc_ = 0, r_hc_ = 0, ple_dim_ = 0, ple_kernel_ = 0, ngram_ = 0, heads_per_ = 0, shards_ = 0;
  int64_t ih_ = 0, ikv_ = 0, id_ = 0, budget_ = 0, ratio_ = 0, eos_ = 0, ngram_base_ = 0, ngram_div_ = 0, seed_ = 0;
  bool sigmoid_gate_ = false;  // output_gate_type "sigmoid": the Gated DeltaNet norm's gate (else silu)
  std::vector<int64_t> ple_layers_;

  Tensor tok_embd_, output_, ones_;
  Tensor zero_ape_;  // F32 [ratio, id]: the pooling's position biases (none: a plain mean)
  GatedResidual mixer_;
  AttentionSpec spec_;
  RopeParams idx_rope_;
  GatedDeltaParams gdn_;
  RouterParams router_;
  std::vector<Layer> layers_;
  mutable std::mutex mu_;
  mutable Scratch scratch_;
};

void Qwen4Exp::read_config(const json& cfg) {
  ModelConfig& c = config_;
  n_hc_ = num(cfg, "hc_count", 4);
  r_hc_ = num(cfg, "hc_lowrank", 320);
  ple_kernel_ = num(cfg, "ple_conv_kernel_size", 4);
  ngram_ = num(cfg, "ngram_size", 3);
  heads_per_ = num(cfg, "heads_per_ngram", 8);
  shards_ = num(cfg, "split_ngram_parts", 512);
  ngram_base_ = num(cfg, "ngram_vocab_size_base", 20000000);
  ngram_div_ = num(cfg, "make_ngram_vocab_size_divisible_by", 128);
  seed_ = num(cfg, "seed", 1234);
  ple_dim_ = num(cfg, "ple_embed_dim", c.n_embd);
  ih_ = num(cfg, "indexer_n_heads");
  ikv_ = num(cfg, "indexer_kv_heads");
  id_ = num(cfg, "indexer_head_dim");
  budget_ = num(cfg, "indexer_budget");
  ratio_ = num(cfg, "indexer_compress_ratio");
  if (auto it = cfg.find("ple_layer_ids"); it != cfg.end() && it->is_array())
    for (const json& v : *it) ple_layers_.push_back(v.get<int64_t>());
  eos_ = c.eos_ids.empty() ? 0 : c.eos_ids[0];
  if (n_hc_ < 2 || r_hc_ < 1) fail(ErrorCode::kInvalidFile, "config.json: hc_count {} must be > 1, hc_lowrank {} > 0", n_hc_, r_hc_);
  if (ikv_ != 1 || ih_ < 1 || id_ < c.n_rot || id_ % 2 != 0 || ratio_ < 1 || budget_ < ratio_)
    fail(ErrorCode::kUnsupported, "config.json: qwen4_exp supports indexer_kv_heads 1, an even indexer_head_dim of at least "
         "the rotary dims ({}), indexer_budget >= indexer_compress_ratio >= 1 (got {}, {}, {}, {})", c.n_rot, ikv_, id_,
         budget_, ratio_);
  if (cfg.value("hidden_act", std::string("silu")) != "silu")
    fail(ErrorCode::kUnsupported, "config.json: hidden_act must be silu for qwen4_exp");
  // transformers Qwen4ExpTextConfig: the linear-attention output gate is ACT2FN[output_gate_type or
  // hidden_act], sigmoid or silu (Qwen3.8-Flash-Next's config says sigmoid).
  if (const auto it = cfg.find("output_gate_type"); it != cfg.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "silu" && *it != "sigmoid"))
      fail(ErrorCode::kUnsupported, "config.json: output_gate_type {}: qwen4_exp supports \"sigmoid\" and \"silu\"",
           it->dump());
    sigmoid_gate_ = *it == "sigmoid";
  }
  const json& lt = cfg.at("layer_types");
  if (!lt.is_array() || static_cast<int64_t>(lt.size()) < c.n_layer)
    fail(ErrorCode::kInvalidFile, "config.json: layer_types must list {} layers", c.n_layer);
  c.layer_linear.clear();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string t = lt[static_cast<size_t>(l)].get<std::string>();
    if (t != "linear_attention" && t != "qwen_sparse_attention" && t != "full_attention")
      fail(ErrorCode::kUnsupported, "config.json: layer_types[{}] '{}' is not a qwen4_exp layer type", l, t);
    c.layer_linear.push_back(t == "linear_attention" ? 1 : 0);
  }
  for (int64_t id : ple_layers_)
    if (id < 1 || id > c.n_layer || !c.is_linear_layer(id - 1))
      fail(ErrorCode::kInvalidFile, "config.json: ple_layer_ids entry {} must name a linear_attention layer (1-based)", id);
  if (!ple_layers_.empty() && (ngram_ < 2 || heads_per_ < 1 || ple_dim_ % ((ngram_ - 1) * heads_per_) != 0))
    fail(ErrorCode::kInvalidFile, "config.json: ple_embed_dim {} must divide into (ngram_size - 1) x heads_per_ngram",
         ple_dim_);
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kPerHead;
  c.norm_weight_offset = 1.0f;
  c.attn_output_gate = true;
  c.norm_topk_prob = cfg.value("norm_topk_prob", true);
  c.sliding_window = 0;
  c.layer_window.clear();
  c.kv_v_width = c.n_head_kv * c.head_dim + 2 * id_;  // V, then the indexer's key (and zero gates)
  c.kv_v_head_dim = std::gcd(c.head_dim, id_);          // V's heads and the indexer's key: whole heads each
  if (!ple_layers_.empty()) {
    c.lin_conv2_rows = (ple_kernel_ - 1) * ngram_;
    c.lin_conv2_dim = n_hc_ * c.n_embd;
    c.lin_token_history = ngram_ - 1;
  }
  c.validate();
}

Tensor Qwen4Exp::upload_i64(WeightLoader& ld, Ops& ops, const std::string& name, const std::vector<int64_t>& want) {
  // transformers stores these buffers with the weights; a checkpoint without them gets the computed ones.
  const int64_t n = static_cast<int64_t>(want.size());
  const TensorInfo* t = ld.checkpoint().find(name);
  if (t && (t->dtype != DType::I64 || t->shape != std::vector<int64_t>{n}))
    fail(ErrorCode::kInvalidFile, "qwen4_exp: {} must be I64 [{}]", name, n);
  if (t && std::memcmp(t->data, want.data(), static_cast<size_t>(n) * 8) != 0)
    fail(ErrorCode::kInvalidFile, "qwen4_exp: {} differs from the values the config gives (seed, ngram_vocab_size_base, "
         "ple_layer_ids)", name);
  storage_.push_back(ops.alloc(n * 8));
  Tensor dev(storage_.back().data(), DType::I64, {n}, ops.device());
  ops.copy(Tensor(const_cast<int64_t*>(want.data()), DType::I64, {n}), dev);
  return dev;
}

GatedResidual Qwen4Exp::load_gr(WeightLoader& ld, Ops& ops, const std::string& pre, bool inject) {
  const int64_t n = n_hc_, H = config_.n_embd, nH = n * H, r = r_hc_;
  const std::vector<float> w = f32(ld, pre + "hc_norm.weight", {nH}, WeightKind::kVector);
  GatedResidual g;
  std::vector<float> down = f32(ld, pre + "input_mix_weight_down.weight", {r, nH});
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < nH; ++j) down[static_cast<size_t>(i * nH + j)] *= (1.0f + w[static_cast<size_t>(j)]) / n;
  g.down = upload_f32(ops, down, storage_).reshape({r, nH});
  g.up = ld.get({"", pre + "input_mix_weight_up.weight"}, {nH, r});
  std::vector<float> mean(static_cast<size_t>(nH));
  for (int64_t j = 0; j < nH; ++j) mean[static_cast<size_t>(j)] = (1.0f + w[static_cast<size_t>(j)]) / n;
  g.mean = upload_f32(ops, mean, storage_);
  if (inject) {
    std::vector<float> inj = f32(ld, pre + "block_inject_weight.weight", {n, nH});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < nH; ++j) inj[static_cast<size_t>(i * nH + j)] *= (1.0f + w[static_cast<size_t>(j)]) / n;
    g.inject = upload_f32(ops, inj, storage_).reshape({n, nH});
  }
  return g;
}

void Qwen4Exp::ngram_shards(WeightLoader& ld, const std::string& t, int64_t hdim, std::vector<WeightName>& names,
                            std::vector<int64_t>& rows) const {
  if (shards_ < 1)
    fail(ErrorCode::kInvalidFile, "qwen4_exp: no {}ngram_embedding.weight, and split_ngram_parts is {}", t, shards_);
  for (int64_t i = 0; i < shards_; ++i) {
    const std::string sn = fmt::format("{}ngram_embedding.shard_{}.weight", t, i);
    const TensorInfo* ti = ld.checkpoint().find(sn);
    if (!ti || ti->shape.size() != 2)
      fail(ErrorCode::kNotFound, "qwen4_exp: missing n-gram table shard {} ({} of split_ngram_parts {})", sn, i, shards_);
    (void)ld.host({"", sn}, {ti->shape[0], hdim}, WeightKind::kMatrix);  // validates its dtype and width
    names.push_back({"", sn});
    rows.push_back(ti->shape[0]);
  }
}

Tensor Qwen4Exp::ngram_table(WeightLoader& ld, Ops& ops, const std::string& t, int64_t hdim) {
  if (ld.has({"", t + "ngram_embedding.weight"})) {
    const TensorInfo* ti = ld.checkpoint().find(t + "ngram_embedding.weight");
    return ld.get({"", t + "ngram_embedding.weight"}, {ti->shape.empty() ? 0 : ti->shape[0], hdim});
  }
  std::vector<WeightName> names;
  std::vector<int64_t> rows;
  ngram_shards(ld, t, hdim, names, rows);
  bool adjacent = true;  // each shard's bytes follow the previous one's in the mapped file
  int64_t total = 0;
  const TensorInfo* prev = nullptr;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo* ti = ld.checkpoint().find(names[i].hf);
    adjacent = adjacent && (!prev || (ti->dtype == prev->dtype && ti->data == prev->data + prev->bytes));
    prev = ti;
    total += rows[i];
  }
  const bool plain = prev->dtype == DType::BF16 || prev->dtype == DType::F16 || prev->dtype == DType::F32;
  if (adjacent && plain) {  // one view of the mapped file: no copy of a table this large
    const TensorInfo* first = ld.checkpoint().find(names[0].hf);
    Buffer b;
    Tensor table = ops.make_resident(Tensor(const_cast<uint8_t*>(first->data), first->dtype, {total, hdim}), b);
    if (!b.empty()) storage_.push_back(std::move(b));
    return table;
  }
  Tensor table = ld.get_stacked(names, rows, hdim);
  if (table.empty()) fail(ErrorCode::kInvalidFile, "qwen4_exp: {}ngram_embedding shards differ in dtype", t);
  return table;
}

Tensor Qwen4Exp::ngram_table_unplaced(WeightLoader& ld, const std::string& t, int64_t hdim) {
  Tensor meta;
  if (ld.has({"", t + "ngram_embedding.weight"})) {
    const TensorInfo* ti = ld.checkpoint().find(t + "ngram_embedding.weight");
    meta = ld.host({"", t + "ngram_embedding.weight"}, {ti->shape.empty() ? 0 : ti->shape[0], hdim});
  } else {
    std::vector<WeightName> names;
    std::vector<int64_t> rows;
    ngram_shards(ld, t, hdim, names, rows);
    int64_t total = 0;
    for (size_t i = 0; i < names.size(); ++i) {
      if (ld.checkpoint().find(names[i].hf)->dtype != ld.checkpoint().find(names[0].hf)->dtype)
        fail(ErrorCode::kInvalidFile, "qwen4_exp: {}ngram_embedding shards differ in dtype", t);
      total += rows[i];
    }
    meta = Tensor(nullptr, ld.host(names[0], {rows[0], hdim}).dtype, {total, hdim});
  }
  meta.data = nullptr;
  return meta;
}

Tensor Qwen4Exp::ngram_table_host_mapped(WeightLoader& ld, const std::string& t, int64_t hdim) {
  if (ld.has({"", t + "ngram_embedding.weight"})) {
    const TensorInfo* ti = ld.checkpoint().find(t + "ngram_embedding.weight");
    return ld.get_host_mapped({"", t + "ngram_embedding.weight"}, {ti->shape.empty() ? 0 : ti->shape[0], hdim});
  }
  std::vector<WeightName> names;
  std::vector<int64_t> rows;
  ngram_shards(ld, t, hdim, names, rows);
  Tensor table = ld.get_stacked_host_mapped(names, rows, hdim);
  if (table.empty()) fail(ErrorCode::kInvalidFile, "qwen4_exp: {}ngram_embedding shards differ in dtype", t);
  return table;
}

void Qwen4Exp::shard_config(const ModelConfig& full) {
  ModelConfig& c = config_;
  if (full.lin_v_tiled) fail(ErrorCode::kUnsupported, "tensor parallelism of qwen4_exp: linear-attention value heads "
                             "tiled over the key heads are not split yet");
  c.n_head = dist::tp_heads(full.n_head, tp_).count;
  c.n_head_kv = dist::tp_kv_heads(full.n_head_kv, tp_).count;
  c.kv_v_width = c.n_head_kv * c.head_dim + 2 * id_;  // the rank's V, then the indexer's key (whole)
  c.lin_n_k_heads = dist::tp_split(full.lin_n_k_heads, tp_, "linear-attention key heads").count;
  c.lin_n_v_heads = c.lin_n_k_heads * (full.lin_n_v_heads / full.lin_n_k_heads);
  c.n_ff_shexp = dist::tp_split(full.n_ff_shexp, tp_, "shared expert FFN width").count;
}

void Qwen4Exp::load(WeightLoader& ld, Ops& ops) {
  ModelConfig& c = config_;  // the rank's sizes after shard_config; the checkpoint's: full
  const int64_t H = c.n_embd, V = c.n_vocab, n = n_hc_, nH = n * H, E = c.n_expert, hd = c.head_dim;
  if (E < 1 || c.n_expert_used < 1 || c.n_ff_exp < 1 || c.n_ff_shexp < 1)
    fail(ErrorCode::kInvalidFile, "config.json: qwen4_exp needs num_experts, num_experts_per_tok, moe_intermediate_size "
         "and shared_expert_intermediate_size > 0");
  const ModelConfig full = c;
  tp_ = ld.tensor_parallel();
  if (tp_.size > 1) shard_config(full);
  const dist::TpRange kvr =
      tp_.size == 1 ? dist::TpRange{0, full.n_head_kv} : dist::tp_kv_heads(full.n_head_kv, tp_);
  // Untied: the table is placed by the memory plan (place_deferred / move_embeddings_to_host).
  embeddings_tied_ = c.tie_embeddings && !ld.has({"", "lm_head.weight"});
  tok_embd_ = embeddings_tied_ ? ld.get({"", "model.embed_tokens.weight"}, {V, H})
                               : ld.unplaced({"", "model.embed_tokens.weight"}, {V, H});
  output_ = embeddings_tied_ ? tok_embd_ : ld.get({"", "lm_head.weight"}, {V, H});
  ones_ = upload_f32(ops, std::vector<float>(static_cast<size_t>(std::max(H, id_)), 1.0f), storage_);
  spec_ = load_attention_spec(ld, ops, c, storage_);
  zero_ape_ = upload_f32(ops, std::vector<float>(static_cast<size_t>(ratio_ * id_), 0.0f), storage_).reshape({ratio_, id_});
  idx_rope_.mode = RopeMode::kNormal;  // on the permuted head (see the top)
  idx_rope_.head_dim = static_cast<int32_t>(id_);
  idx_rope_.n_rot = static_cast<int32_t>(c.n_rot);
  idx_rope_.inv_freq = spec_.rope.inv_freq;
  idx_rope_.attn_factor = spec_.rope.attn_factor;
  gdn_ = gated_delta_params(c);
  router_.n_expert_used = static_cast<int32_t>(c.n_expert_used);
  router_.scoring = RouterScoring::kSoftmax;
  router_.norm_topk_prob = c.norm_topk_prob;
  mixer_ = load_gr(ld, ops, "model.hyper_connection_mixer.", false);
  // perm[j]: the indexer head's dim that lands at j. transformers rotates its first n_rot dims as NeoX
  // pairs (i, i + n_rot/2); rope_tail rotates the last n_rot as adjacent pairs: the unrotated dims go
  // first, then pair i at (p + 2i, p + 2i + 1), p = id - n_rot.
  const int64_t nr = c.n_rot, pass = id_ - nr;
  std::vector<int64_t> perm(static_cast<size_t>(id_));
  for (int64_t j = 0; j < pass; ++j) perm[static_cast<size_t>(j)] = nr + j;
  for (int64_t i = 0; i < nr / 2; ++i)
    perm[static_cast<size_t>(pass + 2 * i)] = i, perm[static_cast<size_t>(pass + 2 * i + 1)] = i + nr / 2;
  const int64_t heads = (ngram_ - 1) * heads_per_;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    Layer L;
    L.linear = c.is_linear_layer(l);
    L.hc_attn = load_gr(ld, ops, p + "attn_hyper_connection.", true);
    L.hc_mlp = load_gr(ld, ops, p + "mlp_hyper_connection.", true);
    if (L.linear) {
      L.gdn = load_gated_delta_net(ld, ops, full, l, storage_, tp_);  // the rank's heads
      L.gdn.sigmoid_gate = sigmoid_gate_;
    } else {
      // q (with the per-head gate rows), k, o, q_norm, k_norm: the rank's heads (v_proj: wv_row below)
      L.attn = load_attention(ld, full, l, tp_);
      const int64_t kvd = full.n_head_kv * hd, vw = c.kv_v_width;
      std::vector<float> v = f32(ld, p + "self_attn.v_proj.weight", {kvd, H});
      v.erase(v.begin(), v.begin() + kvr.begin * hd * H);  // the rank's KV heads' rows, then zeros
      v.resize(static_cast<size_t>(kvr.count * hd * H));
      v.resize(static_cast<size_t>(vw * H), 0.0f);
      L.wv_row = upload_f32(ops, v, storage_).reshape({vw, H});
      const std::string x = p + "self_attn.indexer.";
      const std::vector<float> qk = f32(ld, x + "index_qk_proj.weight", {(ih_ + 1) * id_, H});
      std::vector<float> q(static_cast<size_t>(ih_ * id_ * H)), k(static_cast<size_t>(2 * id_ * H), 0.0f);
      for (int64_t h = 0; h < ih_ + 1; ++h)
        for (int64_t j = 0; j < id_; ++j) {
          const float* src = qk.data() + (h * id_ + perm[static_cast<size_t>(j)]) * H;
          float* dst = h < ih_ ? q.data() + (h * id_ + j) * H : k.data() + j * H;
          std::memcpy(dst, src, static_cast<size_t>(H) * 4);
        }
      L.idx_q = upload_f32(ops, q, storage_).reshape({ih_ * id_, H});
      L.idx_k = upload_f32(ops, k, storage_).reshape({2 * id_, H});
      for (auto [name, dst] : {std::pair<const char*, Tensor*>{"q_layernorm", &L.idx_qnorm}, {"k_layernorm", &L.idx_knorm}}) {
        const std::vector<float> w = f32(ld, x + name + ".weight", {id_}, WeightKind::kVector);
        std::vector<float> pw(static_cast<size_t>(id_));
        for (int64_t j = 0; j < id_; ++j) pw[static_cast<size_t>(j)] = 1.0f + w[static_cast<size_t>(perm[static_cast<size_t>(j)])];
        *dst = upload_f32(ops, pw, storage_);
      }
    }
    const std::string m = p + "mlp.";
    L.moe.gate_inp = ld.get({"", m + "gate.weight"}, {E, H});
    const MlpWeights sh = load_mlp_shard(ld, {"", m + "shared_expert.gate_proj.weight"},
                                         {"", m + "shared_expert.up_proj.weight"},
                                         {"", m + "shared_expert.down_proj.weight"}, H, full.n_ff_shexp, tp_);
    L.moe.shexp_gate = sh.gate, L.moe.shexp_up = sh.up, L.moe.shexp_down = sh.down;
    L.moe.shexp_gate_inp = ld.get({"", m + "shared_expert_gate.weight"}, {1, H});
    host_experts_.push_back(load_host_experts(ld, c, l, ExpertNames()));
    L.ple = std::find(ple_layers_.begin(), ple_layers_.end(), l + 1) != ple_layers_.end();
    if (L.ple) {
      const std::string e = p + "ple.";
      const std::string t = e + "ple_embedding.";
      const int64_t ple_index = std::find(ple_layers_.begin(), ple_layers_.end(), l + 1) - ple_layers_.begin();
      const NgramTables nt = qwen4_ngram_tables(V, ngram_, heads_per_, ngram_base_, ngram_div_, ple_index, seed_);
      L.p.mult = upload_i64(ld, ops, t + "layer_multipliers", nt.mult);
      L.p.sizes = upload_i64(ld, ops, t + "ngram_heads_vocab_sizes", nt.sizes);
      L.p.offsets = upload_i64(ld, ops, t + "ngram_heads_offsets", nt.offsets);
      const int64_t hdim = ple_dim_ / heads;
      L.p.table = ngram_table_unplaced(ld, t, hdim);  // placed by the memory plan (place_deferred)
      if (L.p.table.dim(0) < nt.offsets.back() + nt.sizes.back())
        fail(ErrorCode::kInvalidFile, "qwen4_exp: {}ngram_embedding has {} rows, its heads need {}", t, L.p.table.dim(0),
             nt.offsets.back() + nt.sizes.back());
      L.p.key = ld.get({"", e + "key_proj.weight"}, {nH, ple_dim_});
      L.p.value = ld.get({"", e + "value_proj.weight"}, {H, ple_dim_});
      const std::vector<float> nk = f32(ld, e + "norm_key.weight", {nH}, WeightKind::kVector);
      const std::vector<float> nq = f32(ld, e + "norm_query.weight", {nH}, WeightKind::kVector);
      const std::vector<float> nc = f32(ld, e + "norm_conv.weight", {nH}, WeightKind::kVector);
      std::vector<float> kq(static_cast<size_t>(nH));
      for (size_t i = 0; i < kq.size(); ++i) kq[i] = (1.0f + nk[i]) * (1.0f + nq[i]);
      L.p.kq = upload_f32(ops, kq, storage_);
      const std::vector<float> w = f32(ld, e + "conv1d.weight", {nH, 1, ple_kernel_});
      const int64_t taps = (ple_kernel_ - 1) * ngram_ + 1;
      std::vector<float> conv(static_cast<size_t>(nH * taps), 0.0f);
      for (int64_t ch = 0; ch < nH; ++ch)
        for (int64_t j = 0; j < ple_kernel_; ++j)
          conv[static_cast<size_t>(ch * taps + j * ngram_)] = w[static_cast<size_t>(ch * ple_kernel_ + j)] * (1.0f + nc[static_cast<size_t>(ch)]);
      L.p.conv = upload_f32(ops, conv, storage_).reshape({nH, taps});
    }
    layers_.push_back(std::move(L));
  }
  for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  for (Buffer& b : ld.take_host_storage()) host_storage_.push_back(std::move(b));
}

Qwen4Exp::Scratch& Qwen4Exp::scratch(Ops& ops, int64_t T, int64_t entries) const {
  Scratch& s = scratch_;
  if (s.mem.covers(T, entries)) return s;
  const ModelConfig& c = config_;
  s.mem.regrow(T, entries);
  const int64_t n = n_hc_, H = c.n_embd, R = s.mem.tokens(), heads = std::max<int64_t>(1, (ngram_ - 1) * heads_per_);
  auto make = [&](DType dt, std::initializer_list<int64_t> shape) { return s.mem.make(ops, dt, shape); };
  const DType act = ops.activation_dtype();
  for (Tensor* t : {&s.streams, &s.streams2, &s.flat, &s.up, &s.key, &s.gv, &s.gvn, &s.conv}) *t = make(act, {R, n * H});
  s.low = make(act, {R, r_hc_});
  s.post = make(DType::F32, {R, n});
  s.comb = make(DType::F32, {R, n * n});
  s.rep = s.mem.repeat_index(ops, R, n);
  s.ids = make(DType::I32, {R, heads});
  s.emb = make(act, {R, std::max<int64_t>(ple_dim_, 1)});
  s.value = make(act, {R, H});
  s.vrow = make(act, {R, c.kv_v_width});
  s.iq = make(act, {R, ih_ * id_});
  s.iproj = make(act, {R, 2 * id_});
  s.iw = make(act, {R, ih_});
  s.sel = make(DType::I32, {R, budget_ / ratio_});
  s.ent = make(act, {s.mem.entries() * id_});
  std::vector<float> comb(static_cast<size_t>(R * n * n), 0.0f), iw(static_cast<size_t>(R * ih_),
                                                                        std::sqrt(static_cast<float>(ih_)));
  for (int64_t t = 0; t < R; ++t)
    for (int64_t k = 0; k < n; ++k) comb[static_cast<size_t>(t * n * n + k * n + k)] = 1.0f;  // identity: streams kept
  ops.copy(Tensor(comb.data(), DType::F32, {R, n * n}), s.comb);
  ops.copy(Tensor(iw.data(), DType::F32, {R, ih_}), s.iw);  // sqrt(heads) cancels indexer_topk's 1/sqrt(heads)
  ops.synchronize();
  return s;
}

void Qwen4Exp::gated_residual(ForwardContext& ctx, const GatedResidual& g, const Tensor& streams, Tensor x) const {
  Ops& ops = ctx.ops;
  Scratch& s = scratch_;
  const int64_t T = ctx.batch.n_tokens, H = config_.n_embd, n = n_hc_;
  const RmsNormParams unit{static_cast<float>(config_.rms_eps), 0.0f};
  Tensor flat = s.flat.slice(0, T), low = s.low.slice(0, T), up = s.up.slice(0, T);
  ops.rms_norm(unit, streams.reshape({T * n, H}), ones_.slice(0, H), flat.reshape({T * n, H}));
  ops.matmul(flat, g.down, low, Tensor());
  ops.sigmoid_mul(low, low, low);  // silu
  ops.matmul(low, g.up, up, Tensor());
  ops.sigmoid_mul(up, flat, up);   // flat * sigmoid(mix)
  ops.stream_weighted_sum(up, g.mean, x);
  if (g.inject.empty()) return;
  Tensor post = s.post.slice(0, T);
  ops.matmul(flat, g.inject, post, Tensor());
  ops.sigmoid(post, post);
  ops.scale(post, 2.0f, post);
}

void Qwen4Exp::ple(ForwardContext& ctx, int64_t l, Tensor streams) const {
  Ops& ops = ctx.ops;
  Scratch& s = scratch_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  const int64_t T = ctx.batch.n_tokens, H = config_.n_embd, n = n_hc_, heads = (ngram_ - 1) * heads_per_;
  const RmsNormParams unit{static_cast<float>(config_.rms_eps), 0.0f};
  const StateLayer st = ctx.kv.state(static_cast<int32_t>(l));
  if (!L.p.table.data)
    fail(ErrorCode::kInternal, "qwen4_exp: layer {}'s n-gram table was not placed (Model::place_deferred)", l);
  Tensor ids = s.ids.slice(0, T), emb = s.emb.slice(0, T), key = s.key.slice(0, T), value = s.value.slice(0, T);
  Tensor flat = s.flat.slice(0, T), gv = s.gv.slice(0, T), gvn = s.gvn.slice(0, T), conv = s.conv.slice(0, T);
  const NgramHashParams np{static_cast<int32_t>(ngram_), static_cast<int32_t>(heads_per_), static_cast<int32_t>(eos_)};
  ops.ngram_hash(np, ctx.batch, ctx.token_ids, L.p.mult, L.p.sizes, L.p.offsets, st.tokens, ids);
  ops.embedding(L.p.table, ids.reshape({T * heads}), emb.reshape({T * heads, ple_dim_ / heads}));
  ops.matmul(emb, L.p.key, key, Tensor());
  ops.rms_norm(unit, key.reshape({T * n, H}), ones_.slice(0, H), key.reshape({T * n, H}));
  ops.matmul(emb, L.p.value, value, Tensor());
  ops.rms_norm(unit, streams.reshape({T * n, H}), ones_.slice(0, H), flat.reshape({T * n, H}));
  ops.ple_gate(key, flat, L.p.kq, value, gv);
  ops.rms_norm(unit, gv.reshape({T * n, H}), ones_.slice(0, H), gvn.reshape({T * n, H}));
  ops.ssm_conv(ctx.batch, gvn, L.p.conv, st.conv2, conv);
  ops.add(gv, conv, gv);
  ops.add(streams, gv, streams);
}

void Qwen4Exp::attention(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out) const {
  Ops& ops = ctx.ops;
  const ModelConfig& c = config_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  const BatchInfo& b = ctx.batch;
  Scratch& s = scratch_;
  const int64_t T = b.n_tokens, hd = c.head_dim, S = b.n_seqs;
  Tensor q = ctx.state.q.slice(0, T), k = ctx.state.k.slice(0, T), att = ctx.state.attn.slice(0, T);
  Tensor gate = ctx.state.attn_gate.slice(0, T), vrow = s.vrow.slice(0, T);
  ops.matmul(h, L.attn.wq, q, Tensor());
  ops.matmul(h, L.attn.wgate, gate, Tensor());
  ops.matmul(h, L.attn.wk, k, Tensor());
  ops.matmul(h, L.wv_row, vrow, Tensor());
  ops.norm_rope(spec_.qk_norm_params, L.attn.q_norm, spec_.rope, q, b.positions);
  ops.norm_rope(spec_.qk_norm_params, L.attn.k_norm, spec_.rope, k, b.positions);
  const KvLayer pages = ctx.kv.layer(static_cast<int32_t>(l));
  ops.kv_write(b, k, vrow, pages);
  // The indexer: pooled keys (compress_kv with zero gates: the mean), then its top blocks per query.
  const int64_t M = std::max<int64_t>(1, b.max_kv_len / ratio_);
  CompressParams cp;
  cp.rate = static_cast<int32_t>(ratio_);
  cp.head_dim = static_cast<int32_t>(id_);
  cp.col = static_cast<int32_t>(c.n_head_kv * hd);
  cp.eps = static_cast<float>(c.rms_eps);
  cp.rope = idx_rope_;
  Tensor iproj = s.iproj.slice(0, T), iq = s.iq.slice(0, T);
  ops.matmul(h, L.idx_k, iproj, Tensor());
  Tensor ent(s.ent.data, s.ent.dtype, {S, M, id_}, s.ent.device);
  ops.compress_kv(cp, b, iproj, pages, zero_ape_, L.idx_knorm, ent);
  ops.matmul(h, L.idx_q, iq, Tensor());
  const RmsNormParams plain{static_cast<float>(c.rms_eps), 0.0f};
  ops.rms_norm(plain, iq.reshape({T * ih_, id_}), L.idx_qnorm, iq.reshape({T * ih_, id_}));
  IndexerParams ip;
  ip.n_head = static_cast<int32_t>(ih_);
  ip.head_dim = static_cast<int32_t>(id_);
  ip.rate = static_cast<int32_t>(ratio_);
  ip.top_k = static_cast<int32_t>(budget_ / ratio_);
  ip.rope = idx_rope_;
  ip.per_query = true;
  Tensor sel = s.sel.slice(0, T);
  ops.indexer_topk(ip, b, iq, s.iw.slice(0, T), ent, sel);
  AttentionParams ap;
  ap.n_head = static_cast<int32_t>(c.n_head);
  ap.n_head_kv = static_cast<int32_t>(c.n_head_kv);
  ap.head_dim = static_cast<int32_t>(hd);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ops.attention_qsa(ap, static_cast<int32_t>(ratio_), b, q, pages, sel, att);
  ops.sigmoid_mul(gate, att, att);
  ops.matmul(att, L.attn.wo, out, Tensor());
  tp_all_reduce(ctx, out);  // tensor parallel: the heads' partial sums
}

void Qwen4Exp::forward(ForwardContext& ctx) const {
  check_tp_group(ctx, tp_);
  std::lock_guard<std::mutex> lock(mu_);
  Ops& ops = ctx.ops;
  const ModelConfig& c = config_;
  const int64_t T = ctx.batch.n_tokens, n = n_hc_, H = c.n_embd;
  Scratch& s = scratch(ops, T, int64_t{ctx.batch.n_seqs} * std::max<int64_t>(1, ctx.batch.max_kv_len / ratio_));
  const HyperConnParams hp{static_cast<int32_t>(n), 0, 0.0f};
  const RmsNormParams gdn_norm{static_cast<float>(c.rms_eps), 0.0f};
  Tensor x = embed(ctx, tok_embd_);  // [T, H]
  Tensor streams = s.streams.slice(0, T), next = s.streams2.slice(0, T);
  ops.embedding(x, s.rep.slice(0, T * n), streams.reshape({T * n, H}));  // every stream starts as the embedding
  Tensor h = ctx.state.h.slice(0, T), o = ctx.state.sub_out.slice(0, T), post = s.post.slice(0, T);
  Tensor comb = s.comb.slice(0, T);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    if (L.ple) ple(ctx, l, streams);
    gated_residual(ctx, L.hc_attn, streams, h);
    ctx.dump_if("attn_norm", l, h);
    if (L.linear) gated_delta_net_block(ctx, l, gdn_, gdn_norm, L.gdn, h, o);
    else attention(ctx, l, h, o);
    ctx.dump_if("attn_out", l, o);
    ops.hc_post(hp, streams, o, post, comb, next);
    std::swap(streams, next);
    gated_residual(ctx, L.hc_mlp, streams, h);
    ctx.dump_if("ffn_norm", l, h);
    if (!ctx.experts) fail(ErrorCode::kInvalidArgument, "layer {}: a MoE layer needs an expert executor", l);
    ActQ8 h_q8;  // the router writes h's int8 form (h's producer wrote none) for the experts
    moe_block(ctx, l, router_, L.moe, h, o, MoePrefetch(), ctx.q8(h_q8));
    ctx.dump_if("ffn_moe_out", l, o);
    ops.hc_post(hp, streams, o, post, comb, next);
    std::swap(streams, next);
    ctx.dump_if("l_out", l, streams);
  }
  gated_residual(ctx, mixer_, streams, h);
  if (ctx.logit_rows.empty()) return;
  Tensor rows = ctx.state.out_rows.slice(0, ctx.logit_rows.numel());  // [R, H]
  ops.embedding(h, ctx.logit_rows, rows);
  ctx.dump_if("result_norm", -1, rows);
  ops.matmul(rows, output_, ctx.logits, Tensor());
  ctx.dump_if("result_output", -1, ctx.logits);
}

}  // namespace

std::unique_ptr<Model> build_qwen4_exp(ModelConfig config, WeightLoader& ld, Ops& ops) {
  return std::make_unique<Qwen4Exp>(std::move(config), ld, ops);
}

}  // namespace ft
