#pragma once
// End-to-end helpers for the moe tests on the HF fixtures: teacher-forced logits of a model with a
// given ExpertCompute, and the relative L2 distance the comparisons use.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "dist/tensor_parallel.h"
#include "formats/checkpoint.h"
#include "kv/kv_cache.h"
#include "model/config.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"
#include "moe/expert_compute.h"
#include "test_util.h"

namespace ft::testing {

/** ||a - b|| / ||b|| in double (a and b the same length). */
inline double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += std::pow(double(a[i]) - b[i], 2), den += std::pow(double(b[i]), 2);
  return std::sqrt(num / std::max(den, 1e-30));
}

/** Logits [n, V] of `tokens` through `model`: the first `prefill` tokens in one forward, the rest
 *  one decode step each (teacher-forced), with `experts` (and `tp`, ForwardContext::tp, for a model
 *  loaded as a tensor-parallel shard). */
inline std::vector<float> run_model(const Model& model, Ops& ops, ExpertCompute& experts,
                                    const std::vector<int32_t>& tokens, int64_t prefill,
                                    dist::Collective* tp = nullptr) {
  const ModelConfig& c = model.config();
  const int64_t n = static_cast<int64_t>(tokens.size()), page = 16, n_pages = (n + page - 1) / page;
  KvCacheConfig kc = kv_layout(c);
  kc.page_size = static_cast<int32_t>(page), kc.token_budget = n_pages * page, kc.dtype = DType::F32;
  if (kc.has_recurrent()) kc.n_state_slots = 1;  // linear-attention layers: the one sequence's state
  KvCache kv(ops, kc);
  int32_t state_slot = 0;
  ForwardState state(ops, c, prefill);
  std::vector<int32_t> table(static_cast<size_t>(n_pages));
  for (int64_t p = 0; p < n_pages; ++p) table[static_cast<size_t>(p)] = static_cast<int32_t>(p);
  std::vector<float> all;
  for (int64_t start = 0; start < n;) {
    const int64_t T = start == 0 ? prefill : 1;
    std::vector<int32_t> ids(tokens.begin() + start, tokens.begin() + start + T), pos(T), seq(T, 0), rows(T);
    for (int64_t i = 0; i < T; ++i) pos[i] = static_cast<int32_t>(start + i), rows[i] = static_cast<int32_t>(i);
    std::vector<int32_t> seq_start = {0, static_cast<int32_t>(T)};
    BatchInfo b;
    b.n_tokens = static_cast<int32_t>(T), b.n_seqs = 1, b.max_blocks = static_cast<int32_t>(n_pages);
    b.max_kv_len = static_cast<int32_t>(start + T);
    b.positions = Tensor(pos.data(), DType::I32, {T});
    b.seq_index = Tensor(seq.data(), DType::I32, {T});
    b.seq_start = Tensor(seq_start.data(), DType::I32, {2});
    b.block_tables = Tensor(table.data(), DType::I32, {1, n_pages});
    if (kc.has_recurrent()) b.state_slots = Tensor(&state_slot, DType::I32, {1});
    std::vector<float> logits(static_cast<size_t>(T * c.n_vocab));
    ForwardContext ctx{ops, b, Tensor(ids.data(), DType::I32, {T}), Tensor(rows.data(), DType::I32, {T}),
                       Tensor(logits.data(), DType::F32, {T, c.n_vocab}), kv, &experts, state};
    ctx.tp = tp;
    model.forward(ctx);
    all.insert(all.end(), logits.begin(), logits.end());
    start += T;
  }
  return all;
}

/** A checkpoint and the model loaded from it (the model reads the checkpoint's mapped file). */
struct LoadedModel {
  std::unique_ptr<Checkpoint> ckpt;
  std::unique_ptr<Model> model;
};

/** `dir`'s model (rank `tp`'s shard of it) with its tables placed on `ops`' device, as an engine's
 *  memory plan would place them (Model::place_deferred): ready for run_model. */
inline LoadedModel load_for_run(const std::string& dir, Ops& ops, dist::TpShard tp = {}) {
  LoadedModel m;
  m.ckpt = open_checkpoint(dir);
  m.model = load_model(*m.ckpt, ops, tp);
  WeightLoader ld(*m.ckpt, ops);
  m.model->place_deferred(ld, ops);
  return m;
}

/** The first reference case's prompt of fixture folder `dir` (reference.json). */
inline std::vector<int32_t> fixture_tokens(const std::string& dir) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(dir + "/reference.json"));
  return ref.at("cases")[0].at("input_ids").get<std::vector<int32_t>>();
}

}  // namespace ft::testing
