// CUDA vs CPU: Ops::sample (backend/sampling.h). Both compute the candidates' weights with sample_exp
// and draw with Philox, so the sampled ids, the top_logprobs ids and the edits' raw logits are
// exact; the logprobs (each library's exp and log, other summation orders) agree to 1e-4. Rows of a
// 152k and a 256k vocabulary run the radix selects at full size; ties, NaN, -inf, fully masked rows,
// edits and skipped rows are in the mix. Then Engine::step_sample on the GPU against the host sampler
// (tests/engine/step_sample.h).
#include <cstring>
#include <random>

#include "../model/fixture_util.h"
#include "backend/cuda_factory.h"
#include "backend/sampling.h"
#include "backend/op_harness.h"
#include "../engine/step_sample.h"

namespace ft::testing {
namespace {

class CudaSample : public GpuTest {};

SampleRow row_with(float t, int32_t k, float p, float min_p, int32_t top_logprobs, uint64_t counter) {
  SampleRow r;
  r.temperature = t;
  r.top_k = k;
  r.top_p = p;
  r.min_p = min_p;
  r.top_logprobs = top_logprobs;
  r.seed_lo = 0x9e3779b9u;
  r.seed_hi = 0x1234u;
  r.counter_lo = static_cast<uint32_t>(counter);
  return r;
}

TEST_F(CudaSample, MatchesCpuExactly) {
  const SampleRow kinds[] = {
      row_with(0.0f, 0, 1.0f, 0.0f, 5, 0),      // greedy + top_logprobs
      row_with(0.7f, 0, 0.9f, 0.0f, 0, 0),      // top-p
      row_with(1.0f, 50, 1.0f, 0.0f, 20, 0),    // top-k + 20 logprobs
      row_with(1.3f, 1000, 0.95f, 0.01f, 1, 0), // all three
      row_with(2.0f, 0, 1.0f, 0.1f, 0, 0),      // min-p
      row_with(1.0f, 0, 1.0f, 0.0f, 0, 0),      // plain temperature
      row_with(0.05f, 0, 0.5f, 0.0f, 3, 0),     // cold, tight top-p
      row_with(0.0f, 0, 1.0f, 0.0f, 0, 0),      // greedy: done by the stats kernel
  };
  const int kKinds = static_cast<int>(std::size(kinds)), kCounters = 6;
  uint32_t seed = 11;
  for (int64_t V : {int64_t{7}, int64_t{1000}, int64_t{151936}, int64_t{262144}}) {
    const int64_t R = kKinds * kCounters + 3;  // + a fully masked row, a skipped row, a row with edits
    std::mt19937 rng(seed++);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(R * V));
    for (float& v : x) v = nd(rng);
    std::vector<SampleRow> rows;
    for (int k = 0; k < kKinds; ++k)
      for (int c = 0; c < kCounters; ++c) {
        SampleRow r = kinds[k];
        r.counter_lo = static_cast<uint32_t>(c + 100 * k);
        const int64_t row = static_cast<int64_t>(rows.size());
        float* xr = x.data() + row * V;
        if (c == 1 && V > 8) {  // ties at the top and a NaN
          xr[V - 1] = xr[3] = xr[5] = 12.0f;
          xr[4] = std::nanf("");
        }
        if (c == 2 && V > 8)  // most of the vocabulary masked
          for (int64_t i = 0; i < V - 5; ++i) xr[i] = -std::numeric_limits<float>::infinity();
        rows.push_back(r);
      }
    const int64_t masked = static_cast<int64_t>(rows.size());
    for (int64_t i = 0; i < V; ++i) x[static_cast<size_t>(masked * V + i)] = -std::numeric_limits<float>::infinity();
    rows.push_back(row_with(1.0f, 0, 0.9f, 0.0f, 4, 3));
    SampleRow skip = row_with(1.0f, 0, 1.0f, 0.0f, 0, 0);
    skip.skip = 1;
    rows.push_back(skip);
    std::vector<LogitEdit> edits = {{static_cast<int32_t>(V - 1), 5.0f, 0, 0, 0.0f},
                                    {1, 0.0f, 6, kEditSeen, 0.0f},
                                    {2, 0.0f, 0, kEditEos, 0.0f},
                                    {0, -100.0f, 0, kEditSeen, 0.0f}};
    SampleRow edited = row_with(0.8f, 0, 0.95f, 0.0f, 2, 9);
    edited.repetition_penalty = 1.5f;
    edited.presence_penalty = 0.1f;  // 0.1 + 0.1 * 6 rounds differently unfused (a review's case)
    edited.frequency_penalty = 0.1f;
    edited.mask_eos = 1;
    edited.edit_end = static_cast<int32_t>(edits.size());
    rows.push_back(edited);
    ASSERT_EQ(static_cast<int64_t>(rows.size()), R);

    auto bytes = [](auto& v) {
      std::vector<uint8_t> b(v.size() * sizeof(v[0]));
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    std::vector<SampleResult> want(static_cast<size_t>(R));
    std::vector<LogitEdit> want_edits = edits;
    want[static_cast<size_t>(R - 2)].id = 4242;
    {
      std::vector<float> xc = x;
      cpu().sample(Tensor(xc.data(), DType::F32, {R, V}),
                   Tensor(rows.data(), DType::U8, {static_cast<int64_t>(rows.size() * sizeof(SampleRow))}),
                   Tensor(want_edits.data(), DType::U8, {static_cast<int64_t>(edits.size() * sizeof(LogitEdit))}),
                   Tensor(want.data(), DType::U8, {static_cast<int64_t>(want.size() * sizeof(SampleResult))}));
    }
    std::vector<SampleResult> init(static_cast<size_t>(R));
    init[static_cast<size_t>(R - 2)].id = 4242;
    const auto n_out = static_cast<int64_t>(init.size() * sizeof(SampleResult));
    Tensor d_out = arena().dev_bytes(bytes(init), DType::U8, {n_out});
    Tensor d_edits = arena().dev_bytes(bytes(edits), DType::U8, {static_cast<int64_t>(edits.size() * sizeof(LogitEdit))});
    gpu().sample(arena().dev_from(x, DType::F32, {R, V}),
                 arena().dev_bytes(bytes(rows), DType::U8, {static_cast<int64_t>(rows.size() * sizeof(SampleRow))}),
                 d_edits, d_out);
    {  // the greedy rows alone, given on the host too: the stats kernel only
      std::vector<SampleRow> greedy;
      std::vector<float> gx;
      std::vector<int32_t> want_ids;
      for (int64_t r = 0; r < R; ++r)
        if (rows[static_cast<size_t>(r)].temperature <= 0.0f && rows[static_cast<size_t>(r)].top_logprobs == 0) {
          greedy.push_back(rows[static_cast<size_t>(r)]);
          gx.insert(gx.end(), x.begin() + r * V, x.begin() + (r + 1) * V);
        }
      const auto G = static_cast<int64_t>(greedy.size());
      ASSERT_GT(G, 0);
      std::vector<SampleResult> w(greedy.size()), g(greedy.size());
      std::vector<float> gxc = gx;
      cpu().sample(Tensor(gxc.data(), DType::F32, {G, V}),
                   Tensor(greedy.data(), DType::U8, {G * static_cast<int64_t>(sizeof(SampleRow))}), Tensor(),
                   Tensor(w.data(), DType::U8, {G * static_cast<int64_t>(sizeof(SampleResult))}));
      Tensor o = arena().dev_bytes(bytes(g), DType::U8, {G * static_cast<int64_t>(sizeof(SampleResult))});
      gpu().sample(arena().dev_from(gx, DType::F32, {G, V}),
                   arena().dev_bytes(bytes(greedy), DType::U8, {G * static_cast<int64_t>(sizeof(SampleRow))}), Tensor(),
                   o, greedy.data());
      gpu().copy(o, Tensor(g.data(), DType::U8, {o.bytes()}));
      for (int64_t r = 0; r < G; ++r) {
        EXPECT_EQ(g[static_cast<size_t>(r)].id, w[static_cast<size_t>(r)].id) << "greedy row " << r;
        EXPECT_NEAR(g[static_cast<size_t>(r)].logprob, w[static_cast<size_t>(r)].logprob, 1e-4);
      }
    }
    std::vector<SampleResult> got(static_cast<size_t>(R));
    std::vector<LogitEdit> got_edits(edits.size());
    gpu().copy(d_out, Tensor(got.data(), DType::U8, {n_out}));
    gpu().copy(d_edits, Tensor(got_edits.data(), DType::U8, {d_edits.bytes()}));
    double worst = 0;
    int sampled_ids = 0;
    for (int64_t r = 0; r < R; ++r) {
      SCOPED_TRACE(::testing::Message() << "V " << V << " row " << r);
      const SampleResult &g = got[static_cast<size_t>(r)], &w = want[static_cast<size_t>(r)];
      EXPECT_EQ(g.id, w.id);
      ASSERT_EQ(g.n_top, w.n_top);
      for (int j = 0; j < g.n_top; ++j) {
        EXPECT_EQ(g.top_ids[j], w.top_ids[j]) << j;
        worst = std::max(worst, static_cast<double>(std::abs(g.top_logprobs[j] - w.top_logprobs[j])));
      }
      if (std::isinf(w.logprob)) {
        EXPECT_EQ(g.logprob, w.logprob);
      } else {
        worst = std::max(worst, static_cast<double>(std::abs(g.logprob - w.logprob)));
      }
      sampled_ids += rows[static_cast<size_t>(r)].temperature > 0 && g.id != got[static_cast<size_t>(r / kCounters * kCounters)].id;
    }
    for (size_t j = 0; j < edits.size(); ++j) EXPECT_EQ(got_edits[j].raw, want_edits[j].raw) << j;
    report("sample", fmt::format("[{}x{}] ids exact, logprobs max abs", R, V), worst);
    EXPECT_LE(worst, 1e-4);
    if (V > 8) {
      EXPECT_GT(sampled_ids, 0);  // counters changed some draws
    }
  }
}

TEST_F(CudaSample, HostRowsSkipOnlyTheStagesNoRowNeeds) {
  // Given the rows on the host too, the backend launches only the stages some row needs: here no
  // top-k (top-p, plain temperature and greedy rows), then no threshold at all (temperature only).
  const int64_t V = 151936;
  for (const bool with_top_p : {true, false}) {
    std::vector<SampleRow> rows;
    for (uint64_t c = 0; c < 6; ++c) {
      rows.push_back(row_with(1.0f, 0, 1.0f, 0.0f, 0, c));
      rows.push_back(row_with(0.0f, 0, 1.0f, 0.0f, 2, c));
      if (with_top_p) rows.push_back(row_with(0.7f, 0, 0.9f, 0.0f, 0, c));
    }
    const auto R = static_cast<int64_t>(rows.size());
    std::mt19937 rng(with_top_p ? 5u : 6u);
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(R * V));
    for (float& v : x) v = nd(rng);
    std::vector<SampleResult> want(rows.size()), got(rows.size());
    std::vector<float> xc = x;
    const auto rb = R * static_cast<int64_t>(sizeof(SampleRow)), ob = R * static_cast<int64_t>(sizeof(SampleResult));
    cpu().sample(Tensor(xc.data(), DType::F32, {R, V}), Tensor(rows.data(), DType::U8, {rb}), Tensor(),
                 Tensor(want.data(), DType::U8, {ob}));
    std::vector<uint8_t> rbytes(static_cast<size_t>(rb)), obytes(static_cast<size_t>(ob));
    std::memcpy(rbytes.data(), rows.data(), rbytes.size());
    Tensor d_out = arena().dev_bytes(obytes, DType::U8, {ob});
    gpu().sample(arena().dev_from(x, DType::F32, {R, V}), arena().dev_bytes(rbytes, DType::U8, {rb}), Tensor(), d_out,
                 rows.data());
    gpu().copy(d_out, Tensor(got.data(), DType::U8, {ob}));
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(got[static_cast<size_t>(r)].id, want[static_cast<size_t>(r)].id) << "row " << r << " top-p " << with_top_p;
      EXPECT_NEAR(got[static_cast<size_t>(r)].logprob, want[static_cast<size_t>(r)].logprob, 1e-4);
      EXPECT_EQ(got[static_cast<size_t>(r)].n_top, want[static_cast<size_t>(r)].n_top);
    }
  }
}

TEST_F(CudaSample, AllowedTokenMasksMatchTheCpu) {
  // A 152k vocabulary: masks that allow a few ids, half the ids, and one id; with edits on masked and
  // allowed ids; greedy and sampled rows; one unmasked row between them.
  const int64_t V = 151936, W = sample_mask_words(V);
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const SampleRow kinds[] = {row_with(0.0f, 0, 1.0f, 0.0f, 3, 0), row_with(1.0f, 0, 0.9f, 0.0f, 2, 5),
                             row_with(0.8f, 40, 1.0f, 0.0f, 0, 7), row_with(1.2f, 0, 1.0f, 0.05f, 1, 2)};
  std::vector<uint32_t> masks(static_cast<size_t>(3 * W), 0u);
  const auto allow = [&](int m, int64_t id) { masks[static_cast<size_t>(m * W + id / 32)] |= 1u << (id % 32); };
  for (int64_t id : {17, 4095, 4096, 90000, 151935}) allow(0, id);
  for (int64_t id = 0; id < V; id += 2) allow(1, id);
  allow(2, 123456);
  std::vector<SampleRow> rows;
  std::vector<float> x;
  for (const SampleRow& k : kinds)
    for (int m = -1; m < 3; ++m) {
      SampleRow r = k;
      r.mask_index = m;
      rows.push_back(r);
      for (int64_t i = 0; i < V; ++i) x.push_back(nd(rng));
    }
  // Edits on the first row of each kind's mask-0 row: a masked id pushed up, an allowed id pushed down.
  std::vector<LogitEdit> edits;
  for (size_t r = 1; r < rows.size(); r += 4) {
    rows[r].edit_begin = static_cast<int32_t>(edits.size());
    edits.push_back({18, 50.0f, 0, 0, 0.0f});
    edits.push_back({4096, -5.0f, 0, 0, 0.0f});
    rows[r].edit_end = static_cast<int32_t>(edits.size());
  }
  const auto R = static_cast<int64_t>(rows.size());
  const auto nbytes = [](auto& v) { return static_cast<int64_t>(v.size() * sizeof(v[0])); };
  const auto as_bytes = [](auto& v) {
    std::vector<uint8_t> b(v.size() * sizeof(v[0]));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  std::vector<SampleResult> want(rows.size());
  std::vector<LogitEdit> want_edits = edits;
  std::vector<float> xc = x;
  cpu().sample(Tensor(xc.data(), DType::F32, {R, V}), Tensor(rows.data(), DType::U8, {nbytes(rows)}),
               Tensor(want_edits.data(), DType::U8, {nbytes(edits)}), Tensor(want.data(), DType::U8, {nbytes(want)}),
               nullptr, Tensor(masks.data(), DType::U8, {nbytes(masks)}));
  std::vector<SampleResult> got(rows.size());
  Tensor d_out = arena().dev_bytes(as_bytes(got), DType::U8, {nbytes(got)});
  gpu().sample(arena().dev_from(x, DType::F32, {R, V}), arena().dev_bytes(as_bytes(rows), DType::U8, {nbytes(rows)}),
               arena().dev_bytes(as_bytes(edits), DType::U8, {nbytes(edits)}), d_out, rows.data(),
               arena().dev_bytes(as_bytes(masks), DType::U8, {nbytes(masks)}));
  gpu().copy(d_out, Tensor(got.data(), DType::U8, {nbytes(got)}));
  for (int64_t r = 0; r < R; ++r) {
    const SampleResult &w = want[static_cast<size_t>(r)], &g = got[static_cast<size_t>(r)];
    EXPECT_EQ(g.id, w.id) << "row " << r;
    EXPECT_NEAR(g.logprob, w.logprob, 1e-4) << "row " << r;
    ASSERT_EQ(g.n_top, w.n_top) << "row " << r;
    for (int j = 0; j < w.n_top; ++j) EXPECT_EQ(g.top_ids[j], w.top_ids[j]) << "row " << r;
    const int m = rows[static_cast<size_t>(r)].mask_index;
    if (m >= 0) EXPECT_TRUE(sample_mask_allows(masks.data() + m * W, w.id)) << "row " << r << " drew " << w.id;
    if (m == 2) EXPECT_EQ(w.id, 123456);
  }
}

TEST(CudaStepSample, EqualsTheHostSamplerOnTheStepsLogits) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 4;
  Engine engine(open_checkpoint(dir), make_cuda_ops(0), o);
  std::vector<SamplingParams> params(3);
  params[0].temperature = 0.0f;
  params[0].top_logprobs = 4;
  params[1].temperature = 0.9f;
  params[1].top_p = 0.9f;
  params[1].seed = 5;
  params[2].temperature = 1.2f;
  params[2].top_k = 30;
  params[2].min_p = 0.01f;
  params[2].repetition_penalty = 1.2f;
  params[2].frequency_penalty = 0.5f;
  params[2].logit_bias = {{7, 3.0f}};
  params[2].seed = 9;
  expect_step_sample_equals_host(engine, {1, 20, 30, 40}, params, 10, 1e-4f);
  EXPECT_GT(engine.graph_replays(), 0);
}

}  // namespace
}  // namespace ft::testing
