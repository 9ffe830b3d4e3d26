// Tensor parallelism on the CPU build (dist/tensor_parallel.h; loading in model/decoder.cpp and
// model/blocks.cpp, model/mla.cpp, model/gated_delta_net.cpp, and the architectures with their own
// loaders: model/gemma4.cpp, model/deepseek_v4.cpp, model/qwen4_exp.cpp): N ranks, each a thread over the
// in-process collective with its own shard of the model (attention, MLA and linear-attention heads,
// FFN columns), its own CpuOps, KV cache and recurrent state, give the one-rank logits within float
// order on the dense and MoE fixtures (prefill, then 4 decode steps), bit-identical across ranks; one
// rank is bit-identical to the normal load; what is not split yet is refused, named.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "dist/in_process_collective.h"
#include "dist/tensor_parallel.h"
#include "formats/checkpoint.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"
#include "moe/expert_parallel_experts.h"
#include "moe/model_run.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

TEST(TensorParallelSplit, EvenBlocksInRankOrder) {
  const dist::TpRange r = dist::tp_heads(8, {3, 4});
  EXPECT_EQ(r.begin, 6);
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(dist::tp_ffn(96, {1, 2}).begin, 48);
  EXPECT_EQ(dist::tp_kv_heads(2, {0, 1}).count, 2);
  try {
    dist::tp_kv_heads(2, {0, 4});
    FAIL() << "2 KV heads over 4 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("KV heads (2) is not a multiple of the tensor-parallel size (4)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(dist::tp_ffn(96, {2, 2}), Error);
}

using Loaded = LoadedModel;

Loaded load(const std::string& dir, Ops& ops, dist::TpShard tp = {}) { return load_for_run(dir, ops, tp); }

/** Loading `path` as rank `tp` is refused with kUnsupported and a message containing `message`. */
void expect_load_refused(const std::string& path, dist::TpShard tp, const std::string& message) {
  CpuOps ops(1);
  try {
    load(path, ops, tp);
    ADD_FAILURE() << path << " loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

std::string fixture(const char* name) { return shared_dir() + "/fixtures/hf/" + name; }

/** Every rank's logits within 1e-5 relative L2 of one rank's `want`, and bit-identical to rank 0's;
 *  prints rank 0's error under `label`. */
void expect_ranks_match(const std::vector<std::vector<float>>& got, const std::vector<float>& want,
                        const std::string& label) {
  for (size_t r = 0; r < got.size(); ++r) {
    const auto& g = got[r];
    ASSERT_EQ(g.size(), want.size()) << "rank " << r;
    const double err = rel_l2(g, want);
    EXPECT_LT(err, 1e-5) << "rank " << r;
    if (r == 0) std::printf("%s rel L2 %.3g\n", label.c_str(), err);
    EXPECT_EQ(std::memcmp(g.data(), got[0].data(), g.size() * 4), 0) << "rank " << r;
  }
}

/** One rank's reference run: `path`'s model on its own CPU backend over `tokens_dir`'s prompt (all
 *  but the last 4 tokens prefilled, then 4 decode steps), its logits in `want`. */
struct OneRank {
  std::vector<int32_t> tokens;
  int64_t prefill = 0;
  CpuOps ops{1};
  Loaded one;
  std::vector<float> want;
};

std::unique_ptr<OneRank> one_rank(const std::string& path, const std::string& tokens_dir) {
  auto r = std::make_unique<OneRank>();
  r->tokens = fixture_tokens(tokens_dir);
  r->prefill = static_cast<int64_t>(r->tokens.size()) - 4;
  r->one = load(path, r->ops);
  ResidentExperts experts(r->ops, r->one.model->host_experts());
  r->want = run_model(*r->one.model, r->ops, experts, r->tokens, r->prefill);
  return r;
}
std::unique_ptr<OneRank> one_rank(const std::string& dir) { return one_rank(dir, dir); }

/** `path` loaded as rank 0 of a group of one gives `ref`'s bits (the normal path, unchanged). */
void expect_group_of_one_is_plain(const std::string& path, OneRank& ref) {
  const auto group = dist::make_in_process_group(1);
  Loaded m = load(path, ref.ops, {0, 1});
  ResidentExperts e(ref.ops, m.model->host_experts());
  const std::vector<float> got = run_model(*m.model, ref.ops, e, ref.tokens, ref.prefill, group[0].get());
  ASSERT_EQ(got.size(), ref.want.size());
  EXPECT_EQ(std::memcmp(got.data(), ref.want.data(), ref.want.size() * 4), 0) << rel_l2(got, ref.want);
}

TEST(TensorParallel, SameLogitsAsOneRankOnFixtures) {
  for (const char* name : {"llama", "qwen2", "qwen3", "qwen3_tied", "qwen3_moe", "qwen3_moe_64e", "mixtral",
                           "qwen2_moe", "glm4_moe", "gpt_oss", "olmoe", "minimax_m2", "deepseek_v3",
                           "qwen3_next", "qwen3_5", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    const std::string dir = fixture(name);
    const auto ref = one_rank(dir);
    const std::vector<int32_t>& tokens = ref->tokens;
    const int64_t prefill = ref->prefill;
    const std::vector<float>& want = ref->want;
    expect_group_of_one_is_plain(dir, *ref);  // one rank over a group of one: the same bits as the normal path
    const ModelConfig& c = ref->one.model->config();
    for (int n : {2, 4}) {
      if (c.n_head_kv % n != 0) continue;
      SCOPED_TRACE("ranks " + std::to_string(n));
      const auto group = dist::make_in_process_group(n);
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      dist::run_ranks(group, [&](dist::Collective& comm) {
        CpuOps rank_ops(1);
        Loaded m = load(dir, rank_ops, {comm.rank(), n});  // each rank its own shard, KV and experts
        EXPECT_EQ(m.model->config().n_head, c.n_head / n);
        EXPECT_EQ(m.model->config().n_head_kv, c.n_head_kv / n);
        ResidentExperts e(rank_ops, m.model->host_experts());
        got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, e, tokens, prefill, &comm);
      });
      char label[160];
      std::snprintf(label, sizeof label, "[ tp ] %s TP%d", name, n);
      expect_ranks_match(got, want, label);
    }
  }
}

// TP2+EP2 on two ranks, as on two GPUs: attention, the dense FFN and the shared expert split by
// heads / columns over the group, the routed experts owned half by each rank of the same group
// (ExpertParallelExperts), every collective in the same order on both ranks.
TEST(TensorParallel, WithExpertParallelSameLogitsAsOneRankOnMoeFixtures) {
  for (const char* name : {"qwen3_moe", "qwen3_moe_64e", "mixtral", "qwen2_moe", "glm4_moe", "gpt_oss", "olmoe",
                           "minimax_m2", "deepseek_v3", "qwen3_next", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    const std::string dir = fixture(name);
    const auto ref = one_rank(dir);
    const std::vector<int32_t>& tokens = ref->tokens;
    const int64_t prefill = ref->prefill;
    const std::vector<float>& want = ref->want;
    const Loaded& one = ref->one;
    const int n = 2;
    const auto group = dist::make_in_process_group(n);
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    std::vector<int> owned(static_cast<size_t>(n));
    dist::run_ranks(group, [&](dist::Collective& comm) {
      CpuOps rank_ops(1);
      Loaded m = load(dir, rank_ops, {comm.rank(), n});
      ExpertParallelExperts ep(comm, rank_ops, m.model->host_experts());
      for (int64_t l = 0; l < static_cast<int64_t>(m.model->host_experts().size()); ++l)
        if (ep.owned(l).end > 0) owned[static_cast<size_t>(comm.rank())] = ep.owned(l).end - ep.owned(l).begin;
      got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, ep, tokens, prefill, &comm);
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(owned[static_cast<size_t>(r)], one.model->config().n_expert / n) << "rank " << r;
    expect_ranks_match(got, want, std::string("[ tp+ep ] ") + name + " TP2+EP2");
  }
}

// TP2 x EP2 over 4 ranks (Collective::split): the TP pairs {0, 1}, {2, 3} split heads and FFN
// columns; the EP pairs {0, 2}, {1, 3} split the routed experts, so each rank holds half of them
// and every TP pair has both halves.
TEST(TensorParallel, TimesExpertParallelOverFourRanksMatchesOneRank) {
  for (const char* name : {"qwen3_moe", "qwen2_moe", "gpt_oss", "deepseek_v3"}) {
    SCOPED_TRACE(name);
    const std::string dir = fixture(name);
    const auto ref = one_rank(dir);
    const std::vector<int32_t>& tokens = ref->tokens;
    const int64_t prefill = ref->prefill;
    const std::vector<float>& want = ref->want;
    const Loaded& one = ref->one;
    const auto group = dist::make_in_process_group(4);
    std::vector<std::vector<float>> got(4);
    std::vector<int> first_expert(4);
    dist::run_ranks(group, [&](dist::Collective& comm) {
      const int r = comm.rank();
      std::unique_ptr<dist::Collective> tp = comm.split(r / 2, r), ep = comm.split(r % 2, r);
      CpuOps rank_ops(1);
      Loaded m = load(dir, rank_ops, {tp->rank(), tp->group_size()});
      ExpertParallelExperts e(*ep, rank_ops, m.model->host_experts());
      for (int64_t l = 0; l < static_cast<int64_t>(m.model->host_experts().size()); ++l)
        if (e.owned(l).end > 0) first_expert[static_cast<size_t>(r)] = e.owned(l).begin;
      got[static_cast<size_t>(r)] = run_model(*m.model, rank_ops, e, tokens, prefill, tp.get());
    });
    const int half = static_cast<int>(one.model->config().n_expert / 2);
    EXPECT_EQ(first_expert, (std::vector<int>{0, 0, half, half}));
    char label[160];
    std::snprintf(label, sizeof label, "[ tp x ep ] %s TP2 x EP2 (4 ranks)", name);
    expect_ranks_match(got, want, label);
  }
}

// GGUF files (llama.cpp's names and types; olmoe's full-width QK-norm weights as GGUF vectors): the
// splits of Q8_0 matrices fall on its 32-value blocks (O [64, 64] and the shared expert's down
// [64, 64] split in 32 columns a rank), or are refused.
TEST(TensorParallel, SameLogitsAsOneRankOnGgufFixtures) {
  for (const auto& [name, file] : {std::pair{"qwen3", "qwen3-bf16.gguf"}, std::pair{"llama", "llama-f32.gguf"},
                                   std::pair{"qwen3_moe", "qwen3_moe-q8_0.gguf"},
                                   std::pair{"qwen2_moe", "qwen2_moe-q8_0.gguf"}, std::pair{"mixtral", "mixtral-q8_0.gguf"},
                                   std::pair{"olmoe", "olmoe-q8_0.gguf"}}) {
    SCOPED_TRACE(file);
    const std::string path = shared_dir() + "/fixtures/gguf/" + name + "/" + file;
    const auto ref = one_rank(path, fixture(name));
    const std::vector<int32_t>& tokens = ref->tokens;
    const int64_t prefill = ref->prefill;
    const std::vector<float>& want = ref->want;
    const int n = 2;
    const auto group = dist::make_in_process_group(n);
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    dist::run_ranks(group, [&](dist::Collective& comm) {
      CpuOps rank_ops(1);
      Loaded m = load(path, rank_ops, {comm.rank(), n});
      ResidentExperts e(rank_ops, m.model->host_experts());
      got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, e, tokens, prefill, &comm);
    });
    char label[160];
    std::snprintf(label, sizeof label, "[ tp ] %s TP2", file);
    expect_ranks_match(got, want, label);
  }
  // the dense FFN's down [64, 96] would split at column 48, inside a Q8_0 block
  expect_load_refused(shared_dir() + "/fixtures/gguf/qwen3/qwen3-q8_0.gguf", {1, 2},
                      "blk.0.ffn_down.weight: columns [48, 96) do not fall on Q8_0 blocks of 32");
}

/** TP n of `dir` (with `ep`, its routed experts split over the same group, ExpertParallelExperts)
 *  gives one rank's logits within 1e-5, bit-identical across ranks; TP1 gives the plain load's bits. */
void expect_tp_matches_one_rank(const std::string& dir, int n, bool ep, const std::string& label) {
  SCOPED_TRACE(label);
  const auto ref = one_rank(dir);
  const std::vector<int32_t>& tokens = ref->tokens;
  const int64_t prefill = ref->prefill;
  const std::vector<float>& want = ref->want;
  const Loaded& one = ref->one;
  expect_group_of_one_is_plain(dir, *ref);
  const auto group = dist::make_in_process_group(n);
  std::vector<std::vector<float>> got(static_cast<size_t>(n));
  dist::run_ranks(group, [&](dist::Collective& comm) {
    CpuOps rank_ops(1);
    Loaded m = load(dir, rank_ops, {comm.rank(), n});
    EXPECT_EQ(m.model->config().n_head, one.model->config().n_head / n);
    std::unique_ptr<ExpertCompute> e;
    if (ep) e = std::make_unique<ExpertParallelExperts>(comm, rank_ops, m.model->host_experts());
    else e = std::make_unique<ResidentExperts>(rank_ops, m.model->host_experts());
    got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, *e, tokens, prefill, &comm);
  });
  expect_ranks_match(got, want, label);
}

// Architectures with their own loaders (not build_decoder): Gemma 4 (attention heads, per-layer KV
// heads split or, where a layer has fewer KV heads than ranks, replicated on the ranks that read them;
// MLP columns; per-layer inputs, router and experts whole), DeepSeek-V4 (query heads, sinks and the
// output LoRA groups over them, shared expert columns; q LoRA, the one K=V head, compressors, indexer,
// hyper-connections and routed experts whole), Qwen4-Exp (QSA query and KV heads, Gated DeltaNet key and
// value heads with their state, shared expert columns; indexer, hyper-connections, n-gram PLE and
// routed experts whole).
TEST(TensorParallel, OwnLoadersSameLogitsAsOneRank) {
  const std::string repo = source_dir() + "/tests/model/fixtures/";
  expect_tp_matches_one_rank(fixture("gemma4"), 2, false, "[ tp ] gemma4 TP2");
  expect_tp_matches_one_rank(fixture("gemma4"), 4, false, "[ tp ] gemma4 TP4 (KV heads replicated)");
  expect_tp_matches_one_rank(repo + "gemma4_moe", 2, false, "[ tp ] gemma4_moe TP2");
  expect_tp_matches_one_rank(repo + "gemma4_moe", 2, true, "[ tp+ep ] gemma4_moe TP2+EP2");
  expect_tp_matches_one_rank(repo + "gemma4_moe", 4, false, "[ tp ] gemma4_moe TP4 (KV heads replicated)");
  expect_tp_matches_one_rank(fixture("deepseek_v4"), 2, false, "[ tp ] deepseek_v4 TP2");
  expect_tp_matches_one_rank(fixture("deepseek_v4"), 4, false, "[ tp ] deepseek_v4 TP4");
  expect_tp_matches_one_rank(fixture("deepseek_v4"), 2, true, "[ tp+ep ] deepseek_v4 TP2+EP2");
  expect_tp_matches_one_rank(repo + "deepseek_v4_yarn", 2, false, "[ tp ] deepseek_v4_yarn TP2");
  expect_tp_matches_one_rank(repo + "deepseek_v4_yarn", 2, true, "[ tp+ep ] deepseek_v4_yarn TP2+EP2");
  expect_tp_matches_one_rank(fixture("qwen4_exp"), 2, false, "[ tp ] qwen4_exp TP2");
  expect_tp_matches_one_rank(fixture("qwen4_exp"), 2, true, "[ tp+ep ] qwen4_exp TP2+EP2");
}

TEST(TensorParallel, ShardRunWithoutItsGroupIsRefused) {
  const std::string dir = fixture("qwen3");
  CpuOps ops(1);
  Loaded m = load(dir, ops, {1, 2});
  ResidentExperts e(ops, m.model->host_experts());
  try {
    run_model(*m.model, ops, e, fixture_tokens(dir), 4);
    FAIL() << "a shard ran without its group";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(err.what()).find("loaded as tensor-parallel rank 1 of 2, but runs with a group of 1"),
              std::string::npos)
        << err.what();
  }
}

TEST(TensorParallel, WhatIsNotSplitYetIsRefused) {
  expect_load_refused(fixture("qwen3"), {0, 4}, "KV heads (2) is not a multiple");  // 2 KV heads over 4 ranks
  expect_load_refused(fixture("gemma4"), {0, 3}, "attention heads (4) is not a multiple of the tensor-parallel size (3)");
  expect_load_refused(source_dir() + "/tests/model/fixtures/deepseek_v4_yarn", {0, 4},  // o_groups 2 over 4 ranks
                      "output LoRA groups (o_groups) (2) is not a multiple of the tensor-parallel size (4)");
  expect_load_refused(fixture("qwen4_exp"), {0, 4},  // 2 KV heads (and 2 linear-attention key heads) over 4 ranks
                      "KV heads (2) is not a multiple of the tensor-parallel size (4)");
  expect_load_refused(fixture("qwen3_next"), {0, 4},  // 2 linear-attention key heads over 4 ranks
                      "linear-attention key heads (2) is not a multiple of the tensor-parallel size (4)");
}

}  // namespace
}  // namespace ft::testing
