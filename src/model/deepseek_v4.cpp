// DeepSeek-V4 (DeepSeek-AI, 2026; transformers' DeepseekV4ForCausalLM, modeling_deepseek_v4.py, the
// specification). Per token the residual is n = hc_mult streams [n, H] (manifold-constrained
// hyper-connections). Each layer runs two sub-blocks, attention then MoE FFN, each as
//   mix   = fn . rmsnorm(streams flattened)                        (F32, no weight)
//   pre, post, comb = sigmoid / 2 sigmoid / Sinkhorn(softmax) of mix * scale + base   (ops.h hc_pre)
//   y     = Block(RMSNorm(sum_j pre_j stream_j))
//   stream_k <- post_k y + sum_j comb[j, k] stream_j                                    (ops.h hc_post)
// and the model ends with a head collapse (sigmoid pre only), RMSNorm and the LM head ("head").
//
// Attention (layer_types "sliding_attention" (the window only, the "main" RoPE at rope_theta),
// "heavily_compressed_attention" (HCA, rate 128) or "compressed_sparse_attention" (CSA, rate 4); the
// compressed layers, their compressors and the indexer use the "compress" RoPE, compress_rope_theta
// with YaRN in the released checkpoints (model/deepseek_v4_rope.h: both kinds as transformers builds
// them, cos and sin times the kind's attention factor):
//   q_res = RMSNorm(wq_a h)  (q LoRA);  q = rmsnorm_per_head(wq_b q_res) (no weight)
//   kv    = RMSNorm(wkv h)   one K=V head of head_dim shared by all heads (MQA)
//   RoPE rotates the LAST n_rot = head_dim * partial_rotary_factor dims of a head as adjacent pairs.
//   Keys = the sliding window (the last sliding_window positions, self included) of rotated kv, plus
//   (compressed layers) compressed entries: entry w pools the projections (kv_j, gate_j) of window w's `rate` tokens
//   (CSA: also the previous window's first series, overlapping windows) with softmax(gate + ape)
//   weights per channel, then RMSNorm and RoPE at position w * rate. A query at p sees entries
//   w < (p + 1) / rate: all of them (HCA) or the index_topk the lightning indexer picks (CSA; the
//   indexer has its own compressor at index_head_dim and scores relu(q_idx . k_idx) per head, weighted
//   by weights_proj h). Softmax with a per-head sink; the output's RoPE is undone at -p (values are
//   rotated keys); then the grouped output LoRA: o_groups groups of heads, each projected to
//   o_lora_rank (wo_a, head_matmul), mixed to H by wo_b.
// FFN: MoE with sqrt(softplus) router scores; "hash_moe" layers take the experts from the frozen
//   tid2eid[token] table, "moe" layers the top-k of score + bias; weights normalised, times
//   routed_scaling_factor; experts and the shared expert use SwiGLU with gate <= swiglu_limit and
//   |up| <= swiglu_limit. MTP layers (num_nextn_predict_layers) are not loaded.
//
// State design (one layout for prefill, decode, chunked prefill and prefix-cache hits): everything a
// later step needs is in the paged KV cache, indexed by position. Per layer the key pages hold each
// token's normalised, un-rotated kv [1, head_dim] (the window reads them; rotation happens on read);
// the value pages hold each token's compressor projections (kv and gate of the compressor, then of
// the indexer's compressor: config.kv_v_width columns in heads of kv_v_head_dim, so that each is
// quantized alone under --kv-cache-dtype fp8 / q8_0; unused on sliding_attention layers, which read
// their key pages' window only). The compressed entries (and the CSA indexer's keys beside them) are
// persistent KV: the entry rows of the layer's pages (KvLayer::e, ceil(page_size / rate) rows a page
// of head_dim (+ index_head_dim) values, in the activation dtype; config.layer_entry_rate / _width).
// An entry is pooled once, by the step whose tokens close its window (ops.h compress_kv, paged), from
// the projections in the value pages, and stored in the page of the window's last position, so a
// prefix-cache page, the host tier and the prompt cache carry it; attention_compressed and the
// indexer read the rows. Entries are a pure function of the prefix: a prefix-cache hit or a decode
// step gives what a cold prefill gives. Cost a step and layer: the new entries' pooling (O(step
// tokens)); attention and the indexer still read every visible entry. The key and value pages are
// the engine's sliding-window pool (kv/kv_cache.h, as gpt-oss's sliding layers): a layer's window
// (config.layer_window) is what a later step still reads there, max(sliding_window, rate (HCA),
// 2 rate (CSA: a window's entry also pools the previous window's projections)), so a sequence keeps
// the kv and projections (4 (head_dim + index_head_dim) values a token and layer) of its last window
// only; the entry rows ((head_dim + index_head_dim) / rate a token) stay in the full pool's pages for
// the whole context (the ops address them with ctx.batch's tables: CompressParams::entry_tables).
// Step scratch beyond ForwardState (streams, hyper-connection weights) is a StepScratch, grown
// geometrically with the batch. The model is checked against its fixture on the
// CPU backend; an op a backend lacks is refused there (kUnsupported naming the op).
//
// Tensor parallelism (a WeightLoader shard, dist/tensor_parallel.h): each rank its query heads (wq_b
// rows, sinks) and the output LoRA groups over them (wo_a's groups, wo_b's columns; o_groups a multiple
// of the size), and the shared expert's columns; the attention output and the shared expert's output
// all-reduced. The q LoRA, the one K=V head, the compressors, the indexer, the hyper-connections, the
// router and the routed experts are whole on every rank (each computes them: the KV pages and the
// indexer's choices are the same on every rank).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <numeric>

#include <fmt/format.h>

#include "model/architectures.h"
#include "model/blocks.h"
#include "model/deepseek_v4_rope.h"
#include "model/deepseek_v4_schedule.h"
#include "model/step_scratch.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {
namespace {

using nlohmann::json;

constexpr int kHca = 0, kCsa = 1, kSliding = 2;

struct Compressor {
  Tensor proj;   // [2 width, H]: wkv then wgate stacked
  Tensor ape;    // F32 [rate, width]
  Tensor norm;   // F32 [head_dim]
  CompressParams p;
};

struct HyperConn {
  Tensor fn;     // [(2 + n) n, n H] (head: [n, n H])
  Tensor base;   // F32
  Tensor scale;  // F32 [3] (head: [1])
};

struct Layer {
  int type = kHca;
  HyperConn hc_attn, hc_ffn;
  Tensor attn_norm, ffn_norm;  // [H]
  Tensor wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b, sinks;
  Compressor comp, idx_comp;
  Tensor idx_wq_b, idx_w;      // CSA indexer: [ih id, q_lora], [ih, H]
  bool hash = false;
  Tensor gate, bias, tid2eid;  // router [E, H]; F32 [E] (moe); I32 [V, k] (hash_moe)
  Tensor sh_gate, sh_up, sh_down;
};

int64_t num(const json& c, const char* key) {
  auto it = c.find(key);
  if (it == c.end() || !it->is_number())
    fail(ErrorCode::kInvalidFile, "config.json: {}: missing or not a number (deepseek_v4 needs it)", key);
  return it->get<int64_t>();
}

class DeepseekV4 final : public Model {
 public:
  DeepseekV4(ModelConfig c, WeightLoader& ld, Ops& ops) : Model(std::move(c)) {
    const json& cfg = ld.checkpoint().metadata().at("config");
    read_config(cfg);
    load(ld, ops);
  }

  bool move_embeddings_to_host(WeightLoader& ld) override {
    (void)ld;
    return false;  // the table is small next to the rest; kept resident
  }

  void forward(ForwardContext& ctx) const override;

 private:
  void read_config(const json& cfg);
  void load(WeightLoader& ld, Ops& ops);
  Compressor load_compressor(WeightLoader& ld, const std::string& pre, int64_t rate, int64_t hd, bool overlap,
                             int32_t col);
  HyperConn load_hc(WeightLoader& ld, const std::string& fn, const std::string& base, const std::string& scale,
                    int64_t rows, int64_t n_scale);
  /** h_q8: h's int8 form as its norm wrote it (ActQ8), for the projections of h. */
  void attention(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out, const ActQ8* h_q8) const;
  void ffn(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out, const ActQ8* h_q8) const;

  struct Scratch {
    StepScratch mem;
    Tensor streams, streams2, flat, mixes, post, comb, coll, qa, kv, proj, iproj, iq, iw, sel, attn, oa, rep, sh_out;
  };
  Scratch& scratch(Ops& ops, int64_t T) const;

  /** config_ made tensor-parallel rank tp_'s: n_head, o_groups_ and n_ff_shexp divided by the size
   *  (full_n_head_, full_o_groups_, full_ff_shexp_ keep the checkpoint's). Throws ft::Error(kUnsupported)
   *  naming what the size does not divide (dist::tp_split). */
  void shard_config();

  // Hyperparameters (config.json). o_groups_: the rank's output LoRA groups.
  int64_t full_n_head_ = 0, full_o_groups_ = 0, full_ff_shexp_ = 0;
  int64_t n_hc_ = 0, sinkhorn_ = 0, q_lora_ = 0, o_groups_ = 0, o_lora_ = 0, ih_ = 0, id_ = 0, topk_ = 0;
  int64_t window_ = 0, rate_hca_ = 0, rate_csa_ = 0;
  double hc_eps_ = 1e-6, swiglu_limit_ = 0.0;
  DeepseekV4Rope rope_kinds_;
  std::vector<int> types_;
  std::vector<bool> hash_;

  Tensor tok_embd_, output_norm_, output_;
  HyperConn hc_head_;
  Tensor ones_flat_, ones_head_;  // F32 [n H], [head_dim]: weights of the unweighted RMSNorms
  RopeParams rope_, idx_rope_, main_rope_;  // compress (layers, entries), indexer queries, main (sliding layers)
  std::vector<Layer> layers_;
  mutable std::mutex mu_;
  mutable Scratch scratch_;
};

void DeepseekV4::read_config(const json& cfg) {
  ModelConfig& c = config_;
  n_hc_ = num(cfg, "hc_mult");
  sinkhorn_ = num(cfg, "hc_sinkhorn_iters");
  hc_eps_ = cfg.value("hc_eps", 1e-6);
  q_lora_ = num(cfg, "q_lora_rank");
  o_groups_ = num(cfg, "o_groups");
  o_lora_ = num(cfg, "o_lora_rank");
  ih_ = num(cfg, "index_n_heads");
  id_ = num(cfg, "index_head_dim");
  topk_ = num(cfg, "index_topk");
  window_ = num(cfg, "sliding_window");
  swiglu_limit_ = cfg.value("swiglu_limit", 10.0);
  const DeepseekV4Schedule sched = deepseek_v4_schedule(cfg, c.n_layer);
  rate_hca_ = sched.rate_hca;
  rate_csa_ = sched.rate_csa;
  rope_kinds_ = deepseek_v4_rope(cfg);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string& t = sched.layer_types[static_cast<size_t>(l)];
    types_.push_back(t == "heavily_compressed_attention" ? kHca : t == "compressed_sparse_attention" ? kCsa : kSliding);
    hash_.push_back(sched.mlp_layer_types[static_cast<size_t>(l)] == "hash_moe");
  }
  if (const std::string sf = cfg.value("scoring_func", "sqrtsoftplus"); sf != "sqrtsoftplus")
    fail(ErrorCode::kUnsupported, "config.json: scoring_func '{}': deepseek_v4 supports sqrtsoftplus", sf);
  // The engine-facing shape: one shared KV head; the key and value pages (kv, compressor projections)
  // kept for each layer's window only (its sliding window, and the positions of the windows its
  // compressor has not pooled yet: rate, or 2 rate for CSA's overlapping windows), in the
  // sliding-window pool; the entry rows hold the compressed entries for the whole context.
  const bool any_csa = std::find(types_.begin(), types_.end(), kCsa) != types_.end();
  c.n_head_kv = 1;
  c.n_rot = rope_kinds_.compress.n_rot;
  c.sliding_window = 0;
  c.layer_window.clear();
  for (int t : types_)
    c.layer_window.push_back(static_cast<int32_t>(
        std::max<int64_t>(window_, t == kHca ? rate_hca_ : t == kCsa ? 2 * rate_csa_ : 0)));
  c.kv_v_width = any_csa ? 4 * c.head_dim + 4 * id_ : 2 * c.head_dim;
  c.kv_v_head_dim = any_csa ? std::gcd(c.head_dim, id_) : c.head_dim;  // kv and gate: whole heads each
  for (int t : types_) {  // entry rows: the entry, then (CSA) the indexer's key
    c.layer_entry_rate.push_back(static_cast<int32_t>(t == kHca ? rate_hca_ : t == kCsa ? rate_csa_ : 0));
    c.layer_entry_width.push_back(static_cast<int32_t>(t == kHca ? c.head_dim : t == kCsa ? c.head_dim + id_ : 0));
  }
  c.norm_topk_prob = true;
  const int64_t n_rot = rope_kinds_.compress.n_rot;
  if (any_csa && n_rot > id_)
    fail(ErrorCode::kInvalidFile, "config.json: the compressed layers' rotary dims {} (head_dim x partial_rotary_factor) "
         "must fit index_head_dim {}", n_rot, id_);
  if ((c.n_head * c.head_dim) % o_groups_ != 0)
    fail(ErrorCode::kInvalidFile, "config.json: o_groups {} must divide num_attention_heads x head_dim", o_groups_);
  full_n_head_ = c.n_head, full_o_groups_ = o_groups_, full_ff_shexp_ = c.n_ff_shexp;
}

void DeepseekV4::shard_config() {
  config_.n_head = dist::tp_heads(full_n_head_, tp_).count;
  o_groups_ = dist::tp_split(full_o_groups_, tp_, "output LoRA groups (o_groups)").count;
  config_.n_ff_shexp = dist::tp_split(full_ff_shexp_, tp_, "shared expert FFN width").count;
}

Compressor DeepseekV4::load_compressor(WeightLoader& ld, const std::string& pre, int64_t rate, int64_t hd, bool overlap,
                                       int32_t col) {
  const int64_t H = config_.n_embd, width = overlap ? 2 * hd : hd;
  Compressor k;
  k.proj = ld.get_stacked({{"", pre + ".wkv.weight"}, {"", pre + ".wgate.weight"}}, {width, width}, H);
  if (k.proj.empty())
    fail(ErrorCode::kInvalidFile, "{}.wkv / .wgate: deepseek_v4 needs the two projections in one dtype", pre);
  k.ape = ld.get_f32({"", pre + ".ape"}, {rate, width}, WeightKind::kMatrix);
  k.norm = ld.get_f32({"", pre + ".norm.weight"}, {hd});
  k.p.rate = static_cast<int32_t>(rate);
  k.p.head_dim = static_cast<int32_t>(hd);
  k.p.overlap = overlap;
  k.p.col = col;
  k.p.eps = static_cast<float>(config_.rms_eps);
  k.p.rope = rope_;
  k.p.rope.head_dim = static_cast<int32_t>(hd);
  return k;
}

HyperConn DeepseekV4::load_hc(WeightLoader& ld, const std::string& fn, const std::string& base,
                              const std::string& scale, int64_t rows, int64_t n_scale) {
  HyperConn h;
  h.fn = ld.get({"", fn}, {rows, n_hc_ * config_.n_embd});
  h.base = ld.get_f32({"", base}, {rows});
  h.scale = ld.get_f32({"", scale}, {n_scale});
  return h;
}

void DeepseekV4::load(WeightLoader& ld, Ops& ops) {
  ModelConfig& c = config_;
  if (ld.is_gguf()) fail(ErrorCode::kUnsupported, "deepseek_v4: GGUF checkpoints are not supported yet (safetensors)");
  if (c.n_nextn_layers > 0)
    spdlog::info("deepseek_v4: {} multi-token-prediction layer(s) not loaded", c.n_nextn_layers);
  const int64_t H = c.n_embd, V = c.n_vocab, hd = c.head_dim, E = c.n_expert, k = c.n_expert_used;
  const int64_t F = c.n_ff_exp, Fs = c.n_ff_shexp;  // the checkpoint's
  if (E < 1 || k < 1 || F < 1 || Fs < 1)
    fail(ErrorCode::kInvalidFile, "config.json: deepseek_v4 needs n_routed_experts, num_experts_per_tok, "
         "moe_intermediate_size and n_shared_experts > 0");
  tp_ = ld.tensor_parallel();
  if (tp_.size > 1) shard_config();
  const int64_t nh = full_n_head_;  // the checkpoint's heads; the rank's: heads below
  const dist::TpRange heads = dist::tp_heads(nh, tp_), groups = dist::TpRange{
      tp_.size == 1 ? 0 : dist::tp_split(full_o_groups_, tp_, "output LoRA groups (o_groups)").begin, o_groups_};
  auto rows_of = [&](const std::string& name, int64_t rows, int64_t cols, int64_t begin, int64_t n) {
    return tp_.size == 1 ? ld.get({"", name}, {rows, cols}) : ld.get_rows({"", name}, {rows, cols}, index_range(begin, n));
  };
  auto cols_of = [&](const std::string& name, int64_t rows, int64_t cols, int64_t begin, int64_t n) {
    return tp_.size == 1 ? ld.get({"", name}, {rows, cols}) : ld.get_cols({"", name}, {rows, cols}, begin, n);
  };
  tok_embd_ = ld.get({"", "model.embed_tokens.weight"}, {V, H});
  output_norm_ = ld.get({"", "model.norm.weight"}, {H}, WeightKind::kVector);
  output_ = ld.get({"", "head.weight"}, {V, H});
  // RoPE of the compressed layers ("compress") and of the sliding-only layers ("main").
  auto rope_of = [&](const DeepseekV4RopeKind& k) {
    RopeParams r;
    r.mode = RopeMode::kNormal;
    r.head_dim = static_cast<int32_t>(hd);
    r.n_rot = static_cast<int32_t>(k.n_rot);
    r.inv_freq = upload_f32(ops, k.table.inv_freq, storage_);
    r.attn_factor = k.table.attn_factor;
    return r;
  };
  rope_ = rope_of(rope_kinds_.compress);
  main_rope_ = rope_of(rope_kinds_.main);
  idx_rope_ = rope_;
  idx_rope_.head_dim = static_cast<int32_t>(id_);
  ones_flat_ = upload_f32(ops, std::vector<float>(static_cast<size_t>(n_hc_ * H), 1.0f), storage_);
  ones_head_ = upload_f32(ops, std::vector<float>(static_cast<size_t>(hd), 1.0f), storage_);
  hc_head_ = load_hc(ld, "model.hc_head.hc_fn", "model.hc_head.hc_base", "model.hc_head.hc_scale", n_hc_, 1);
  const int64_t mix = (2 + n_hc_) * n_hc_;
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    Layer L;
    L.type = types_[static_cast<size_t>(l)];
    L.hc_attn = load_hc(ld, p + "hc_attn_fn", p + "hc_attn_base", p + "hc_attn_scale", mix, 3);
    L.hc_ffn = load_hc(ld, p + "hc_ffn_fn", p + "hc_ffn_base", p + "hc_ffn_scale", mix, 3);
    L.attn_norm = ld.get({"", p + "attn_norm.weight"}, {H}, WeightKind::kVector);
    L.ffn_norm = ld.get({"", p + "ffn_norm.weight"}, {H}, WeightKind::kVector);
    const std::string a = p + "attn.";
    L.wq_a = ld.get({"", a + "wq_a.weight"}, {q_lora_, H});
    L.q_norm = ld.get({"", a + "q_norm.weight"}, {q_lora_}, WeightKind::kVector);
    L.wq_b = rows_of(a + "wq_b.weight", nh * hd, q_lora_, heads.begin * hd, heads.count * hd);  // the rank's heads
    L.wkv = ld.get({"", a + "wkv.weight"}, {hd, H});
    L.kv_norm = ld.get({"", a + "norm.weight"}, {hd}, WeightKind::kVector);
    const int64_t in_g = nh * hd / full_o_groups_;  // the rank's groups read its heads' dims
    L.wo_a = rows_of(a + "wo_a.weight", full_o_groups_ * o_lora_, in_g, groups.begin * o_lora_, groups.count * o_lora_)
                 .reshape({groups.count, o_lora_, in_g});
    L.wo_b = cols_of(a + "wo_b.weight", H, full_o_groups_ * o_lora_, groups.begin * o_lora_, groups.count * o_lora_);
    L.sinks = ld.get_f32({"", a + "attn_sink"}, {nh}).slice(heads.begin, heads.count);
    if (L.type == kHca) {
      L.comp = load_compressor(ld, a + "compressor", rate_hca_, hd, false, 0);
    } else if (L.type == kCsa) {
      L.comp = load_compressor(ld, a + "compressor", rate_csa_, hd, true, 0);
      L.idx_comp = load_compressor(ld, a + "indexer.compressor", rate_csa_, id_, true, static_cast<int32_t>(4 * hd));
      L.idx_comp.p.rope = idx_rope_;
      L.idx_comp.p.entry_col = static_cast<int32_t>(hd);  // the indexer's keys follow the entry in its row
      L.idx_wq_b = ld.get({"", a + "indexer.wq_b.weight"}, {ih_ * id_, q_lora_});
      L.idx_w = ld.get({"", a + "indexer.weights_proj.weight"}, {ih_, H});
    }
    const std::string f = p + "ffn.";
    L.hash = hash_[static_cast<size_t>(l)];
    L.gate = ld.get({"", f + "gate.weight"}, {E, H});
    if (L.hash) {  // I64 [V, k] in the checkpoint: an I32 copy
      const TensorInfo* t = ld.checkpoint().find(f + "gate.tid2eid");
      if (!t || t->shape != std::vector<int64_t>{V, k} || (t->dtype != DType::I64 && t->dtype != DType::I32))
        fail(ErrorCode::kInvalidFile, "deepseek_v4: {}gate.tid2eid must be I64 or I32 [{}, {}] (hash_moe layer)", f, V, k);
      Buffer host = Buffer::host(V * k * 4);
      int32_t* dst = static_cast<int32_t*>(host.data());
      for (int64_t i = 0; i < V * k; ++i) {
        int64_t v = 0;
        if (t->dtype == DType::I64) std::memcpy(&v, t->data + i * 8, 8);
        else {
          int32_t v32 = 0;
          std::memcpy(&v32, t->data + i * 4, 4);
          v = v32;
        }
        if (v < 0 || v >= E) fail(ErrorCode::kInvalidFile, "deepseek_v4: {}gate.tid2eid names expert {} (E = {})", f, v, E);
        dst[i] = static_cast<int32_t>(v);
      }
      Tensor h(host.data(), DType::I32, {V, k});
      storage_.push_back(ops.alloc(h.bytes()));
      L.tid2eid = Tensor(storage_.back().data(), DType::I32, {V, k}, ops.device());
      ops.copy(h, L.tid2eid);
    } else {
      L.bias = ld.get_f32({"", f + "gate.bias"}, {E});
    }
    ExpertNames names;
    names.gate = "ffn.experts.{}.w1";
    names.up = "ffn.experts.{}.w3";
    names.down = "ffn.experts.{}.w2";
    ExpertBank bank = load_host_experts(ld, c, l, names);
    bank.glu = ExpertGlu::kSwigluClamp;
    bank.glu_limit = static_cast<float>(swiglu_limit_);
    host_experts_.push_back(std::move(bank));
    const MlpWeights sh = load_mlp_shard(ld, {"", f + "shared_experts.w1.weight"}, {"", f + "shared_experts.w3.weight"},
                                         {"", f + "shared_experts.w2.weight"}, H, Fs, tp_);  // the rank's columns
    L.sh_gate = sh.gate, L.sh_up = sh.up, L.sh_down = sh.down;
    layers_.push_back(std::move(L));
  }
  for (Buffer& b : ld.take_storage()) storage_.push_back(std::move(b));
  for (Buffer& b : ld.take_host_storage()) host_storage_.push_back(std::move(b));
}

DeepseekV4::Scratch& DeepseekV4::scratch(Ops& ops, int64_t T) const {
  Scratch& s = scratch_;
  if (s.mem.covers(T, 0)) return s;
  const ModelConfig& c = config_;
  s.mem.regrow(T, 0);
  const int64_t n = n_hc_, H = c.n_embd, hd = c.head_dim;
  auto make = [&](DType dt, std::initializer_list<int64_t> shape) { return s.mem.make(ops, dt, shape); };
  const DType act = ops.activation_dtype();
  const int64_t R = s.mem.tokens();
  s.streams = make(act, {R, n * H});
  s.streams2 = make(act, {R, n * H});
  s.flat = make(act, {R, n * H});
  s.mixes = make(DType::F32, {R, (2 + n) * n});
  s.post = make(DType::F32, {R, n});
  s.comb = make(DType::F32, {R, n * n});
  s.coll = make(act, {R, H});
  s.qa = make(act, {R, q_lora_});
  s.kv = make(act, {R, hd});
  s.proj = make(act, {R, 4 * hd});
  s.iproj = make(act, {R, 4 * id_});
  s.iq = make(act, {R, ih_ * id_});
  s.iw = make(act, {R, ih_});
  s.sel = make(DType::I32, {R, topk_});
  s.attn = make(act, {R, c.n_head * hd});
  s.oa = make(act, {R, o_groups_ * o_lora_});
  s.sh_out = make(act, {R, H});
  // rep[i] = i / n: embedding() gathers each token's row n times to start its streams.
  s.rep = s.mem.repeat_index(ops, R, n);
  ops.synchronize();
  return s;
}

void DeepseekV4::forward(ForwardContext& ctx) const {
  check_tp_group(ctx, tp_);
  std::lock_guard<std::mutex> lock(mu_);
  Ops& ops = ctx.ops;
  const ModelConfig& c = config_;
  const int64_t T = ctx.batch.n_tokens, n = n_hc_, H = c.n_embd;
  Scratch& s = scratch(ops, T);
  const RmsNormParams norm{static_cast<float>(c.rms_eps), 0.0f};
  const HyperConnParams hp{static_cast<int32_t>(n), static_cast<int32_t>(sinkhorn_), static_cast<float>(hc_eps_)};
  Tensor x = embed(ctx, tok_embd_);  // [T, H]
  Tensor streams = s.streams.slice(0, T), next = s.streams2.slice(0, T), flat = s.flat.slice(0, T);
  ops.embedding(x, s.rep.slice(0, T * n), streams.reshape({T * n, H}));  // every stream starts as the embedding
  Tensor mixes = s.mixes.slice(0, T), post = s.post.slice(0, T), comb = s.comb.slice(0, T), coll = s.coll.slice(0, T);
  Tensor h = ctx.state.h.slice(0, T), o = ctx.state.sub_out.slice(0, T);
  auto sub_block = [&](int64_t l, const HyperConn& hc, const Tensor& norm_w, bool attn) {
    ActQ8 flat_q8;  // flat's int8 form when its norm wrote it (rows up to 8192 wide)
    ops.rms_norm(norm, streams, ones_flat_, flat, ctx.q8(flat_q8));
    ops.matmul(flat, hc.fn, mixes, Tensor(), ctx.q8(flat_q8));
    ops.hc_pre(hp, streams, mixes, hc.base, hc.scale, coll, post, comb);
    ActQ8 h_q8;  // h's int8 form as its norm wrote it, for the projections of h
    ops.rms_norm(norm, coll, norm_w, h, ctx.q8(h_q8));
    ctx.dump_if(attn ? "attn_norm" : "ffn_norm", l, h);
    if (attn) attention(ctx, l, h, o, ctx.q8(h_q8));
    else ffn(ctx, l, h, o, ctx.q8(h_q8));
    ctx.dump_if(attn ? "attn_out" : "ffn_moe_out", l, o);
    ops.hc_post(hp, streams, o, post, comb, next);
    std::swap(streams, next);
  };
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    sub_block(l, L.hc_attn, L.attn_norm, true);
    sub_block(l, L.hc_ffn, L.ffn_norm, false);
    ctx.dump_if("l_out", l, streams);
  }
  ActQ8 flat_q8;
  ops.rms_norm(norm, streams, ones_flat_, flat, ctx.q8(flat_q8));
  Tensor head_mix = s.mixes.slice(0, T).reshape({T * (2 + n), n}).slice(0, T);
  ops.matmul(flat, hc_head_.fn, head_mix, Tensor(), ctx.q8(flat_q8));
  ops.hc_pre(hp, streams, head_mix, hc_head_.base, hc_head_.scale, coll, Tensor(), Tensor());
  OutputWeights io;
  io.tok_embd = tok_embd_, io.output_norm = output_norm_, io.output = output_;
  lm_head(ctx, io, norm, coll);
}

void DeepseekV4::attention(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out, const ActQ8* h_q8) const {
  Ops& ops = ctx.ops;
  const ModelConfig& c = config_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  const BatchInfo& b = ctx.batch;
  Scratch& s = scratch_;
  const int64_t T = b.n_tokens, nh = c.n_head, hd = c.head_dim;
  const RmsNormParams norm{static_cast<float>(c.rms_eps), 0.0f};
  Tensor qa = s.qa.slice(0, T), q = ctx.state.q.slice(0, T), kv = s.kv.slice(0, T), att = s.attn.slice(0, T);
  ActQ8 qa_q8;  // qa's form from its norm (h's then goes stale: later projections of h quantize)
  ops.matmul(h, L.wq_a, qa, Tensor(), h_q8);
  ops.rms_norm(norm, qa, L.q_norm, qa, ctx.q8(qa_q8));
  ops.matmul(qa, L.wq_b, q, Tensor(), ctx.q8(qa_q8));
  Tensor heads = q.reshape({T * nh, hd});
  ops.rms_norm(norm, heads, ones_head_, heads);
  ops.matmul(h, L.wkv, kv, Tensor(), h_q8);
  ops.rms_norm(norm, kv, L.kv_norm, kv);
  const KvLayer pages = ctx.kv.layer(static_cast<int32_t>(l));
  const BatchInfo& kb = ctx.kv_batch(l);  // the key and value pages' tables (the sliding-window pool's)
  ops.kv_write(kb, kv, kv, KvLayer{pages.k, pages.k, pages.k_scale, pages.k_scale});  // the key pages hold K = V
  CompressedAttentionParams ap;
  ap.n_head = static_cast<int32_t>(nh);
  ap.head_dim = static_cast<int32_t>(hd);
  ap.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  ap.window = static_cast<int32_t>(window_);
  ap.sinks = L.sinks;
  ap.entry_tables = b.block_tables;  // the entry rows: the full pool's pages
  Tensor oa = s.oa.slice(0, T);
  if (L.type == kSliding) {  // the window alone, at the main RoPE (no compressor, no entries)
    ap.rate = 1;
    ap.rope = main_rope_;
    ops.attention_compressed(ap, kb, q, pages, Tensor(), Tensor(), att);
    ops.head_matmul(att, L.wo_a, oa);
    ops.matmul(oa, L.wo_b, out, Tensor());
    tp_all_reduce(ctx, out);  // tensor parallel: the heads' (groups') partial sums
    return;
  }
  const int64_t rate = L.comp.p.rate;
  const int64_t width = L.comp.p.overlap ? 2 * hd : hd;
  if (pages.e.empty())
    fail(ErrorCode::kInternal, "deepseek_v4 layer {}: the KV cache has no compressed-entry rows (kv_layout)", l);
  Tensor proj = s.proj.slice(0, T).reshape({T * 4 * hd}).slice(0, T * 2 * width).reshape({T, 2 * width});
  ops.matmul(h, L.comp.proj, proj, Tensor(), h_q8);
  CompressParams cp = L.comp.p;
  cp.entry_tables = b.block_tables;
  ops.compress_kv(cp, kb, proj, pages, L.comp.ape, L.comp.norm, pages.e);  // this step's new entries
  ap.rate = static_cast<int32_t>(rate);
  ap.rope = rope_;
  Tensor sel;
  if (L.type == kCsa) {
    Tensor iproj = s.iproj.slice(0, T);
    ops.matmul(h, L.idx_comp.proj, iproj, Tensor(), h_q8);
    CompressParams icp = L.idx_comp.p;
    icp.entry_tables = b.block_tables;
    ops.compress_kv(icp, kb, iproj, pages, L.idx_comp.ape, L.idx_comp.norm, pages.e);  // keys at column hd
    Tensor iq = s.iq.slice(0, T), iw = s.iw.slice(0, T);
    ops.matmul(qa, L.idx_wq_b, iq, Tensor(), ctx.q8(qa_q8));
    ops.matmul(h, L.idx_w, iw, Tensor(), h_q8);
    IndexerParams ip;
    ip.n_head = static_cast<int32_t>(ih_);
    ip.head_dim = static_cast<int32_t>(id_);
    ip.rate = static_cast<int32_t>(rate);
    ip.top_k = static_cast<int32_t>(topk_);
    ip.rope = idx_rope_;
    ip.key_col = static_cast<int32_t>(hd);
    ip.page_size = static_cast<int32_t>(pages.k.dim(1));
    sel = s.sel.slice(0, T);
    ops.indexer_topk(ip, b, iq, iw, pages.e, sel);
    ctx.dump_if("indexer_ids", l, sel);  // I32 [T, index_topk], -1 past the visible entries
  }
  ops.attention_compressed(ap, kb, q, pages, pages.e, sel, att);
  ops.head_matmul(att, L.wo_a, oa);
  ops.matmul(oa, L.wo_b, out, Tensor());
  tp_all_reduce(ctx, out);  // tensor parallel: the heads' (groups') partial sums
}

void DeepseekV4::ffn(ForwardContext& ctx, int64_t l, const Tensor& h, Tensor out, const ActQ8* h_q8) const {
  Ops& ops = ctx.ops;
  const ModelConfig& c = config_;
  const Layer& L = layers_[static_cast<size_t>(l)];
  const int64_t T = ctx.batch.n_tokens;
  if (!ctx.experts) fail(ErrorCode::kInvalidArgument, "layer {}: a MoE layer needs an expert executor", l);
  MoeScratch& m = ctx.state.moe;
  Tensor logits = m.router_logits.slice(0, T), ids = m.ids.slice(0, T), weights = m.weights.slice(0, T);
  ops.matmul(h, L.gate, logits, Tensor(), h_q8);
  RouterParams rp;
  rp.n_expert_used = static_cast<int32_t>(c.n_expert_used);
  rp.norm_topk_prob = true;
  rp.scaling = static_cast<float>(c.routed_scaling);
  rp.bias = L.bias;
  ops.moe_route_sqrtsoftplus(rp, logits, ctx.token_ids, L.tid2eid, ids, weights);
  if (!ctx.batch.n_valid.empty()) ops.moe_mask_rows(ctx.batch.n_valid, ids);
  ctx.experts->compute(l, h, ids, weights, out, h_q8);
  Tensor g = m.sh_gate.slice(0, T), u = m.sh_up.slice(0, T), y = m.sh_out.slice(0, T);
  ops.matmul(h, L.sh_gate, g, Tensor(), h_q8);
  ops.matmul(h, L.sh_up, u, Tensor(), h_q8);
  ops.swiglu_clamp(g, u, static_cast<float>(swiglu_limit_), g);
  ops.matmul(g, L.sh_down, y, Tensor());
  tp_all_reduce(ctx, y);  // tensor parallel: the shared expert's columns' partial sums (out is whole)
  ops.add(out, y, out);
}

}  // namespace

std::unique_ptr<Model> build_deepseek_v4(ModelConfig config, WeightLoader& ld, Ops& ops) {
  return std::make_unique<DeepseekV4>(std::move(config), ld, ops);
}

}  // namespace ft
