// Expert parallelism behind ExpertCompute (moe/expert_parallel_experts.h) on the CPU build: N ranks,
// each a thread over the in-process collective, each holding only its block of experts, give the
// single-rank (ResidentExperts) result within float order, bit-identical across ranks; one rank is
// bit-identical to ResidentExperts. Checked on synthetic layers (with per-expert biases) and end to
// end on whole-model logits of the MoE fixtures.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "dist/in_process_collective.h"
#include "formats/checkpoint.h"
#include "model/model.h"
#include "model/registry.h"
#include "model/weights.h"
#include "moe/expert_parallel_experts.h"
#include "model_run.h"
#include "moe_test_util.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

/** Per-expert biases [E, n] F32, random in [-0.1, 0.1], the values owned by `store`. */
Tensor random_bias(std::vector<std::vector<float>>& store, int64_t E, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  store.emplace_back(static_cast<size_t>(E * n));
  for (float& f : store.back()) f = d(rng);
  return Tensor(store.back().data(), DType::F32, {E, n});
}

TEST(SliceBanks, TakesTheOwnedExpertsAndTheirBiasRows) {
  SyntheticExperts s;
  s.add_layer(8, 64, 32, DType::F32, DType::F32, 1);
  s.add_dense_layer();
  std::vector<std::vector<float>> store;
  std::mt19937 rng(3);
  s.banks[0].gate_bias = random_bias(store, 8, 64, rng);
  s.banks[0].down_bias = random_bias(store, 8, 32, rng);
  std::vector<dist::ExpertRange> ranges;
  const HostExpertBanks part = slice_banks(s.banks, 1, 4, &ranges);
  ASSERT_EQ(part.size(), 2u);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].begin, 2);
  EXPECT_EQ(ranges[0].end, 4);
  EXPECT_EQ(ranges[1].end, 0);
  ASSERT_EQ(part[0].n_expert(), 2);
  EXPECT_EQ(part[1].n_expert(), 0);
  EXPECT_EQ(part[0].gate[0].data, s.banks[0].gate[2].data);
  EXPECT_EQ(part[0].down[1].data, s.banks[0].down[3].data);
  EXPECT_TRUE(part[0].gate_bias.has_shape({2, 64}));
  EXPECT_EQ(part[0].gate_bias.ptr<float>(), s.banks[0].gate_bias.ptr<float>() + 2 * 64);
  EXPECT_EQ(part[0].down_bias.ptr<float>(), s.banks[0].down_bias.ptr<float>() + 2 * 32);
  EXPECT_TRUE(part[0].up_bias.empty());
}

TEST(ExpertParallelExperts, RefusesExpertsNotAMultipleOfTheRanks) {
  SyntheticExperts s;
  s.add_layer(6, 64, 32, DType::F32, DType::F32, 1);
  CpuOps ops(1);
  const auto group = dist::make_in_process_group(4);
  try {
    ExpertParallelExperts ep(*group[0], ops, s.banks);
    FAIL() << "6 experts over 4 ranks was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("MoE layer 0 has 6 experts, not a positive multiple of 4"), std::string::npos)
        << e.what();
  }
  const auto two = dist::make_in_process_group(2);
  EXPECT_NO_THROW(ExpertParallelExperts(*two[1], ops, s.banks));  // 6 = 2 x 3
}

TEST(ExpertParallelExperts, EveryRankRefusesBeforeAnyCollective) {
  SyntheticExperts s;
  s.add_layer(8, 64, 32, DType::F32, DType::F32, 1);
  s.add_dense_layer();
  s.add_layer(6, 64, 32, DType::F32, DType::F32, 2);  // 6 experts: 4 ranks do not divide them
  const auto group = dist::make_in_process_group(4);
  std::vector<int> refused(4, 0);
  dist::run_ranks(group, [&](dist::Collective& comm) {  // none may wait in a collective
    CpuOps ops(1);
    try {
      ExpertParallelExperts ep(comm, ops, s.banks);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("MoE layer 2 has 6 experts"), std::string::npos) << e.what();
      refused[static_cast<size_t>(comm.rank())] = 1;
    }
  });
  EXPECT_EQ(refused, std::vector<int>(4, 1));
}

TEST(ExpertParallelExperts, RefusesBadRoutesAndShapes) {
  const int64_t T = 3, k = 2, H = 32;
  SyntheticExperts s;
  s.add_layer(8, 64, H, DType::F32, DType::F32, 1);
  s.add_dense_layer();
  CpuOps ops(1);
  const auto group = dist::make_in_process_group(1);
  ExpertParallelExperts ep(*group[0], ops, s.banks);
  std::vector<float> x(T * H, 0.5f), w(T * k, 0.5f), out(T * H);
  std::vector<int32_t> ids = {0, 1, 2, 8, 4, 5};  // token 1, slot 1: expert 8 of 8
  const Tensor tx(x.data(), DType::F32, {T, H}), tw(w.data(), DType::F32, {T, k}), to(out.data(), DType::F32, {T, H});
  auto expect_refused = [&](int64_t layer, const Tensor& i, const Tensor& wt, const char* what) {
    try {
      ep.compute(layer, tx, i, wt, to);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_refused(0, Tensor(ids.data(), DType::I32, {T, k}), tw, "layer 0: moe_local_ids: entry 3 routes to expert 8 of 8");
  ids[3] = 3;
  expect_refused(1, Tensor(ids.data(), DType::I32, {T, k}), tw, "layer 1 has no routed experts");
  expect_refused(2, Tensor(ids.data(), DType::I32, {T, k}), tw, "layer 2 has no routed experts");
  expect_refused(0, Tensor(ids.data(), DType::I32, {T * k}), tw, "ids must be [tokens, k] I32");
  expect_refused(0, Tensor(x.data(), DType::F32, {T, k}), tw, "ids must be [tokens, k] I32");
  expect_refused(0, Tensor(ids.data(), DType::I32, {T, k}), Tensor(w.data(), DType::F32, {T, 1}), "weights");
  EXPECT_THROW(ep.prefetch(0, Tensor(ids.data(), DType::I32, {T * k})), Error);
  EXPECT_NO_THROW(ep.compute(0, tx, Tensor(ids.data(), DType::I32, {T, k}), tw, to));
}

/** An inner compute that keeps the ids each prefetch() hands it (views, as a cache strategy keeps
 *  them until its next compute()). */
class RecordingExperts final : public ExpertCompute {
 public:
  void compute(int64_t, const Tensor&, const Tensor&, const Tensor&, Tensor, const ActQ8*) override {}
  void prefetch(int64_t target, const Tensor& ids) override { predicted.emplace_back(target, ids); }
  std::vector<std::pair<int64_t, Tensor>> predicted;
};

std::vector<int32_t> values(const Tensor& t) { return {t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel()}; }

TEST(ExpertParallelExperts, EveryPredictionBeforeAComputeKeepsItsOwnRoutes) {
  const int64_t T = 2, k = 2, H = 32;  // rank 1 of 2 alone: masking only, no compute (no all_reduce)
  SyntheticExperts s;
  s.add_layer(8, 64, H, DType::F32, DType::F32, 1);
  s.add_dense_layer();
  s.add_layer(8, 64, H, DType::F32, DType::F32, 2);
  CpuOps ops(1);
  const auto group = dist::make_in_process_group(2);
  RecordingExperts* rec = nullptr;
  ExpertParallelExperts ep(*group[1], ops, s.banks, [&](const HostExpertBanks&) {  // rank 1: experts 4..7
    auto r = std::make_unique<RecordingExperts>();
    rec = r.get();
    return r;
  });
  std::vector<int32_t> a = {4, 1, 7, -1}, b = {0, 5, 6, 3}, c = {2, 4, 5, 7};
  ep.prefetch(0, Tensor(a.data(), DType::I32, {T, k}));
  ep.prefetch(2, Tensor(b.data(), DType::I32, {T, k}));
  ASSERT_EQ(rec->predicted.size(), 2u);
  EXPECT_EQ(rec->predicted[0].first, 0);
  EXPECT_EQ(values(rec->predicted[0].second), (std::vector<int32_t>{0, -1, 3, -1}));  // not overwritten by b's
  EXPECT_EQ(values(rec->predicted[1].second), (std::vector<int32_t>{-1, 1, 2, -1}));
  EXPECT_NE(rec->predicted[0].second.data, rec->predicted[1].second.data);
  EXPECT_THROW(ep.prefetch(1, Tensor(c.data(), DType::I32, {T, k})), Error);  // a dense layer
  for (int i = 0; i < PrefetchTargets::kMax - 2; ++i) ep.prefetch(2, Tensor(c.data(), DType::I32, {T, k}));
  try {
    ep.prefetch(2, Tensor(c.data(), DType::I32, {T, k}));
    ADD_FAILURE() << "a fifth prediction before one compute() was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 4 predictions before one compute()"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(values(rec->predicted[0].second), (std::vector<int32_t>{0, -1, 3, -1}));
}

/** Synthetic layers 0 (8 experts) and 2 (16 experts, with biases), layer 1 dense: N ranks against
 *  fused. */
void expect_synthetic_ep_matches_fused(int n_ranks) {
  const int32_t k = 3;
  const int32_t n_expert[] = {8, 0, 16};
  const int64_t F = 64, H = 32;
  SyntheticExperts s;
  s.add_layer(n_expert[0], F, H, DType::F32, DType::Q8_0, 11);
  s.add_dense_layer();
  s.add_layer(n_expert[2], F, H, DType::F32, DType::F32, 12);
  std::vector<std::vector<float>> store;
  std::mt19937 rng(5);
  s.banks[2].gate_bias = random_bias(store, n_expert[2], F, rng);
  s.banks[2].up_bias = random_bias(store, n_expert[2], F, rng);
  s.banks[2].down_bias = random_bias(store, n_expert[2], H, rng);
  // Steps of T tokens; the last row of each step is padding (every slot -1), token 0 routes one slot
  // nowhere.
  struct Step {
    int64_t layer, T;
    std::vector<float> x, w;
    std::vector<int32_t> ids;
  };
  std::vector<Step> steps;
  for (int i = 0; i < 8; ++i) {
    Step st{i % 2 == 0 ? 0 : 2, 1 + i % 4, {}, {}, {}};
    st.ids = random_routes(st.T, k, n_expert[st.layer], 0.5, rng);
    for (int32_t j = 0; j < k; ++j) st.ids[static_cast<size_t>((st.T - 1) * k + j)] = -1;
    st.ids[0] = -1;  // and token 0's first slot: no expert
    std::uniform_real_distribution<float> d(-1, 1);
    st.x.resize(static_cast<size_t>(st.T * H));
    st.w.resize(static_cast<size_t>(st.T * k));
    for (float& f : st.x) f = d(rng);
    for (float& f : st.w) f = 0.5f + 0.5f * d(rng);
    steps.push_back(std::move(st));
  }
  auto tensors = [&](Step& st) {
    return std::tuple{Tensor(st.x.data(), DType::F32, {st.T, H}), Tensor(st.ids.data(), DType::I32, {st.T, k}),
                      Tensor(st.w.data(), DType::F32, {st.T, k})};
  };
  CpuOps ops(1);
  ResidentExperts fused(ops, s.banks);
  std::vector<std::vector<float>> want;
  for (Step& st : steps) {
    auto [x, ids, w] = tensors(st);
    want.emplace_back(static_cast<size_t>(st.T * H));
    fused.compute(st.layer, x, ids, w, Tensor(want.back().data(), DType::F32, {st.T, H}));
  }
  const auto group = dist::make_in_process_group(n_ranks);
  std::vector<std::vector<std::vector<float>>> got(static_cast<size_t>(n_ranks));
  dist::run_ranks(group, [&](dist::Collective& comm) {
    CpuOps rank_ops(1);
    ExpertParallelExperts ep(comm, rank_ops, s.banks);
    for (int64_t l : {0, 2})  // each layer split by its own expert count
      EXPECT_EQ(ep.owned(l).begin, comm.rank() * n_expert[l] / n_ranks) << "layer " << l;
    EXPECT_EQ(ep.owned(1).end, 0);
    std::vector<Step> mine = steps;  // each rank its own inputs
    auto& outs = got[static_cast<size_t>(comm.rank())];
    for (Step& st : mine) {
      auto [x, ids, w] = tensors(st);
      auto& out = outs.emplace_back(static_cast<size_t>(st.T * H), 1e9f);
      ep.compute(st.layer, x, ids, w, Tensor(out.data(), DType::F32, {st.T, H}));
    }
    for (size_t i = 0; i < mine.size(); ++i) {  // again: the same bits (deterministic)
      auto [x, ids, w] = tensors(mine[i]);
      std::vector<float> again(outs[i].size(), 1e9f);
      ep.compute(mine[i].layer, x, ids, w, Tensor(again.data(), DType::F32, {mine[i].T, H}));
      EXPECT_EQ(std::memcmp(again.data(), outs[i].data(), again.size() * 4), 0) << "step " << i << " repeated";
    }
  });
  for (int r = 0; r < n_ranks; ++r)
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& g = got[static_cast<size_t>(r)][i];
      if (n_ranks == 1)
        EXPECT_EQ(std::memcmp(g.data(), want[i].data(), g.size() * 4), 0) << "step " << i;
      else
        EXPECT_LT(rel_l2(g, want[i]), 1e-6) << "rank " << r << " step " << i;
      EXPECT_EQ(std::memcmp(g.data(), got[0][i].data(), g.size() * 4), 0) << "rank " << r << " step " << i;
      for (int64_t c = (steps[i].T - 1) * H; c < steps[i].T * H; ++c) ASSERT_EQ(g[static_cast<size_t>(c)], 0.0f);
    }
}

TEST(ExpertParallelExperts, SyntheticLayersMatchFused) {
  for (int n : {1, 2, 4, 8}) {
    SCOPED_TRACE(n);
    expect_synthetic_ep_matches_fused(n);
  }
}

// ---- end to end on the fixtures --------------------------------------------------------------

using Loaded = LoadedModel;

Loaded load(const std::string& dir, Ops& ops) { return load_for_run(dir, ops); }

/** The routed-expert count every MoE layer of `host` shares, or 0 when they differ or none has experts. */
int64_t common_n_expert(const HostExpertBanks& host) {
  int64_t n = 0;
  for (const ExpertBank& b : host)
    if (b.n_expert() > 0) {
      if (n != 0 && n != b.n_expert()) return 0;
      n = b.n_expert();
    }
  return n;
}

/** Every fixture folder whose model has routed experts (host_experts() non-empty): the shared HF
 *  fixtures, then the repository's own (tests/model/fixtures: Gemma 4's MoE block, MXFP4 and FP8
 *  experts, V4 with YaRN). The shared gemma4 fixture is dense (enable_moe_block false;
 *  MoeFixturesAreTheMoeModels checks it), so it has nothing to split. */
std::vector<std::string> moe_fixture_dirs() {
  std::vector<std::string> dirs;
  for (const char* name : {"qwen3_moe", "qwen3_moe_64e", "mixtral", "olmoe", "qwen2_moe", "glm4_moe", "minimax_m2",
                           "deepseek_v3", "gpt_oss", "qwen3_5_moe", "qwen3_next", "deepseek_v4", "qwen4_exp"})
    dirs.push_back(shared_dir() + "/fixtures/hf/" + name);
  for (const char* name : {"gemma4_moe", "gpt_oss_mxfp4", "qwen3_moe_fp8", "deepseek_v4_yarn"})
    dirs.push_back(source_dir() + "/tests/model/fixtures/" + name);
  return dirs;
}

/** An inner compute that counts its calls per layer and checks that it only sees local ids
 *  ([-1, owned experts of the layer)), then runs `inner`. */
class CountingExperts final : public ExpertCompute {
 public:
  CountingExperts(std::unique_ptr<ExpertCompute> inner, const HostExpertBanks& owned)
      : inner_(std::move(inner)), calls(owned.size(), 0) {
    for (const ExpertBank& b : owned) n_local_.push_back(b.n_expert());
  }
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8) override {
    ++calls[static_cast<size_t>(layer)];
    for (int64_t i = 0; i < ids.numel(); ++i) {
      const int32_t e = ids.ptr<int32_t>()[i];
      EXPECT_TRUE(e >= -1 && e < n_local_[static_cast<size_t>(layer)]) << "layer " << layer << " local id " << e;
    }
    inner_->compute(layer, x, ids, weights, out, x_q8);
  }
  std::unique_ptr<ExpertCompute> inner_;
  std::vector<int64_t> n_local_;
  std::vector<int> calls;  // compute() calls per layer
};

TEST(ExpertParallelExperts, MoeFixturesAreTheMoeModels) {
  for (const char* name : {"gemma4", "qwen3", "llama"}) {
    SCOPED_TRACE(name);
    CpuOps ops(1);
    const Loaded m = load(shared_dir() + "/fixtures/hf/" + name, ops);
    EXPECT_EQ(common_n_expert(m.model->host_experts()), 0);
  }
}

TEST(ExpertParallelExperts, SameLogitsAsOneRankOnMoeFixtures) {
  for (const std::string& dir : moe_fixture_dirs()) {
    SCOPED_TRACE(dir);
    const std::vector<int32_t> tokens = fixture_tokens(dir);
    const int64_t prefill = static_cast<int64_t>(tokens.size()) - 4;  // then 4 decode steps
    CpuOps ops(1);
    Loaded one = load(dir, ops);
    ResidentExperts fused(ops, one.model->host_experts());
    const std::vector<float> want = run_model(*one.model, ops, fused, tokens, prefill);
    {  // one rank: the same bits as ResidentExperts
      const auto group = dist::make_in_process_group(1);
      ExpertParallelExperts ep(*group[0], ops, one.model->host_experts());
      const std::vector<float> got = run_model(*one.model, ops, ep, tokens, prefill);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << rel_l2(got, want);
    }
    const HostExpertBanks& banks = one.model->host_experts();
    const int64_t n_expert = common_n_expert(banks);
    // Every MoE fixture has 8 experts on each MoE layer (qwen3_moe_64e: 64), so EP2 and EP4 both
    // divide them; a fixture whose count 4 does not divide would have to list its rank counts here.
    ASSERT_GT(n_expert, 0);
    ASSERT_EQ(n_expert % 4, 0);
    const int n_forwards = 1 + static_cast<int>(tokens.size() - prefill);  // prefill + decode steps
    for (int n : {2, 4}) {
      SCOPED_TRACE("ranks " + std::to_string(n));
      const auto group = dist::make_in_process_group(n);
      std::vector<std::vector<float>> got(static_cast<size_t>(n));
      std::vector<std::vector<int>> calls(static_cast<size_t>(n));
      dist::run_ranks(group, [&](dist::Collective& comm) {
        CpuOps rank_ops(1);
        Loaded m = load(dir, rank_ops);  // each rank its own model, KV and experts
        CountingExperts* counter = nullptr;
        ExpertParallelExperts ep(comm, rank_ops, m.model->host_experts(), [&](const HostExpertBanks& owned) {
          auto c = std::make_unique<CountingExperts>(std::make_unique<ResidentExperts>(rank_ops, owned), owned);
          counter = c.get();
          return c;
        });
        for (int64_t l = 0; l < static_cast<int64_t>(banks.size()); ++l)
          EXPECT_EQ(ep.owned(l).end - ep.owned(l).begin, banks[static_cast<size_t>(l)].n_expert() / n) << "layer " << l;
        got[static_cast<size_t>(comm.rank())] = run_model(*m.model, rank_ops, ep, tokens, prefill);
        calls[static_cast<size_t>(comm.rank())] = counter->calls;
      });
      for (int r = 0; r < n; ++r) {
        const auto& g = got[static_cast<size_t>(r)];
        for (size_t l = 0; l < banks.size(); ++l)  // every MoE layer's experts went through EP on every step
          EXPECT_EQ(calls[static_cast<size_t>(r)][l], banks[l].n_expert() > 0 ? n_forwards : 0) << "layer " << l;
        ASSERT_EQ(g.size(), want.size()) << "rank " << r;
        EXPECT_LT(rel_l2(g, want), 1e-5) << "rank " << r;
        EXPECT_EQ(std::memcmp(g.data(), got[0].data(), g.size() * 4), 0) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace ft::testing
