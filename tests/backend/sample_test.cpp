// Ops::sample on the CPU backend against backend/sampling.h's definition: Philox known answers,
// sample_exp, the thresholds (ties kept together), the edits, the draw, and the argument checks. The
// CUDA kernel is held to this one in tests/backend/cuda_sample_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/sampling.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/** Runs CpuOps::sample over `logits` [R, V] with one row each of `rows`. */
std::vector<SampleResult> run(const std::vector<float>& logits, int64_t V, std::vector<SampleRow> rows,
                              std::vector<LogitEdit>* edits = nullptr) {
  CpuOps ops(1);
  const auto R = static_cast<int64_t>(rows.size());
  std::vector<SampleResult> out(rows.size());
  std::vector<float> x = logits;
  Tensor e;
  if (edits && !edits->empty())
    e = Tensor(edits->data(), DType::U8, {static_cast<int64_t>(edits->size() * sizeof(LogitEdit))});
  ops.sample(Tensor(x.data(), DType::F32, {R, V}),
             Tensor(rows.data(), DType::U8, {R * static_cast<int64_t>(sizeof(SampleRow))}), e,
             Tensor(out.data(), DType::U8, {R * static_cast<int64_t>(sizeof(SampleResult))}));
  return out;
}

SampleRow sampled(float temperature, uint64_t counter, uint64_t seed = 7) {
  SampleRow r;
  r.temperature = temperature;
  r.seed_lo = static_cast<uint32_t>(seed);
  r.seed_hi = static_cast<uint32_t>(seed >> 32);
  r.counter_lo = static_cast<uint32_t>(counter);
  r.counter_hi = static_cast<uint32_t>(counter >> 32);
  return r;
}

/** The ids drawn from `logits` over `n` counters with row template `row`. */
std::map<int32_t, int> draws(const std::vector<float>& logits, SampleRow row, int n) {
  std::vector<SampleRow> rows(static_cast<size_t>(n), row);
  std::vector<float> all;
  for (int i = 0; i < n; ++i) {
    rows[static_cast<size_t>(i)].counter_lo = static_cast<uint32_t>(i);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  std::map<int32_t, int> seen;
  for (const SampleResult& r : run(all, static_cast<int64_t>(logits.size()), rows)) ++seen[r.id];
  return seen;
}

std::set<int32_t> ids_of(const std::map<int32_t, int>& m) {
  std::set<int32_t> s;
  for (const auto& [id, n] : m) s.insert(id);
  return s;
}

TEST(Philox, KnownAnswers) {  // Random123 tests/kat_vectors, philox4x32 10
  struct Kat {
    uint32_t ctr[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    uint32_t got[4];
    philox4x32_10(k.ctr, k.key, got);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got[i], k.want[i]) << i;
  }
}

TEST(SampleExp, CloseToExpAndZeroBelowRange) {
  double worst = 0;
  for (float x = -86.99f; x <= 0.0f; x += 0.0137f) {
    const double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(sample_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(sample_exp(0.0f), 1.0f);
  EXPECT_EQ(sample_exp(-87.0f), 0.0f);  // below ~1.6e-38: zero (a weight of 0 either way)
  EXPECT_EQ(sample_exp(-105.0f), 0.0f);
  EXPECT_EQ(sample_exp(kNegInf), 0.0f);
  EXPECT_EQ(sample_exp(std::nanf("")), 0.0f);
}

TEST(SampleOrderKey, PreservesFloatOrder) {
  const float v[] = {kNegInf, -1e30f, -2.5f, -1e-30f, 0.0f, 1e-30f, 0.5f, 3.0f, 1e30f,
                     std::numeric_limits<float>::infinity()};
  for (size_t i = 0; i + 1 < std::size(v); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &v[i], 4);
    std::memcpy(&b, &v[i + 1], 4);
    EXPECT_LT(sample_order_key(a), sample_order_key(b)) << v[i] << " < " << v[i + 1];
  }
}

TEST(CpuSample, GreedyTakesTheLowestIdOfTheMaximumAndRawLogprobs) {
  const std::vector<float> x = {1.0f, 3.0f, std::nanf(""), 3.0f, -2.0f};
  SampleRow row;
  row.top_logprobs = 3;
  const SampleResult r = run(x, 5, {row})[0];
  EXPECT_EQ(r.id, 1);
  double sum = 0;
  for (float v : {1.0f, 3.0f, 3.0f, -2.0f}) sum += std::exp(v);
  const float lse = static_cast<float>(std::log(sum));
  EXPECT_NEAR(r.logprob, 3.0f - lse, 1e-6);
  ASSERT_EQ(r.n_top, 3);
  EXPECT_EQ(r.top_ids[0], 1);
  EXPECT_EQ(r.top_ids[1], 3);  // the tie, lower id first
  EXPECT_EQ(r.top_ids[2], 0);
  EXPECT_NEAR(r.top_logprobs[2], 1.0f - lse, 1e-6);
}

TEST(CpuSample, FullyMaskedRowGivesIdZeroAndMinusInfinity) {
  const std::vector<float> x(6, kNegInf);
  for (float t : {0.0f, 1.0f}) {
    SampleRow row = sampled(t, 3);
    row.top_logprobs = 2;
    const SampleResult r = run(x, 6, {row})[0];
    EXPECT_EQ(r.id, 0);
    EXPECT_EQ(r.logprob, kNegInf);
    EXPECT_EQ(r.n_top, 0);
  }
}

TEST(CpuSample, TopKKeepsTiesAtTheThreshold) {
  const std::vector<float> x = {2.0f, 1.0f, 1.0f, 0.0f, -5.0f};
  SampleRow row = sampled(5.0f, 0);
  row.top_k = 2;  // the 2nd largest is 1.0, held by ids 1 and 2: both stay
  EXPECT_EQ(ids_of(draws(x, row, 400)), (std::set<int32_t>{0, 1, 2}));
  row.top_k = 1;
  EXPECT_EQ(ids_of(draws(x, row, 50)), (std::set<int32_t>{0}));
}

TEST(CpuSample, TopPAndMinPThresholds) {
  // Probabilities 0.5, 0.3, 0.2 at temperature 1.
  const std::vector<float> x = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  SampleRow row = sampled(1.0f, 0);
  row.top_p = 0.79f;
  EXPECT_EQ(ids_of(draws(x, row, 400)), (std::set<int32_t>{0, 1}));
  row.top_p = 0.81f;
  EXPECT_EQ(ids_of(draws(x, row, 400)), (std::set<int32_t>{0, 1, 2}));
  row.top_p = 0.4f;
  EXPECT_EQ(ids_of(draws(x, row, 50)), (std::set<int32_t>{0}));
  row.top_p = 1.0f;
  row.min_p = 0.5f;  // 0.3 / 0.5 = 0.6 stays, 0.2 / 0.5 = 0.4 goes
  EXPECT_EQ(ids_of(draws(x, row, 400)), (std::set<int32_t>{0, 1}));
}

TEST(CpuSample, DrawsFollowTheDistributionAndDependOnSeedAndCounterOnly) {
  const std::vector<float> x = {std::log(0.6f), std::log(0.3f), std::log(0.1f)};
  const auto seen = draws(x, sampled(1.0f, 0), 6000);
  EXPECT_NEAR(seen.at(0) / 6000.0, 0.6, 0.025);
  EXPECT_NEAR(seen.at(1) / 6000.0, 0.3, 0.025);
  EXPECT_NEAR(seen.at(2) / 6000.0, 0.1, 0.015);
  // Same seed and counter: same token, whatever the other rows are.
  std::vector<float> two = x;
  two.insert(two.end(), {5.0f, 0.0f, 0.0f});
  const auto a = run(x, 3, {sampled(1.0f, 11, 99)});
  const auto b = run(two, 3, {sampled(1.0f, 11, 99), sampled(1.0f, 4, 5)});
  EXPECT_EQ(a[0].id, b[0].id);
}

TEST(CpuSample, TheDrawIsTheDefinedOne) {
  // By hand: weights floor(sample_exp((z - m) / T) * 2^40), r = mulhi(philox bits, W), first id whose
  // running weight exceeds r.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> x(97);
  for (float& v : x) v = nd(rng);
  for (uint64_t counter = 0; counter < 40; ++counter) {
    const SampleRow row = sampled(0.8f, counter, 0x1234567890ull);
    float m = kNegInf;
    for (float v : x) m = std::max(m, v);
    std::vector<uint64_t> w;
    uint64_t W = 0;
    for (float v : x) W += w.emplace_back(static_cast<uint64_t>(sample_exp((v - m) * (1.0f / 0.8f)) * kSampleWeightScale));
    const uint32_t ctr[4] = {static_cast<uint32_t>(counter), 0, 0, 0}, key[2] = {0x34567890u, 0x12u};
    uint32_t bits[4];
    philox4x32_10(ctr, key, bits);
    const uint64_t u = (static_cast<uint64_t>(bits[0]) << 32) | bits[1];
    const uint64_t r = static_cast<uint64_t>((static_cast<unsigned __int128>(u) * W) >> 64);
    int32_t want = -1;
    uint64_t cum = 0;
    for (size_t i = 0; i < w.size() && want < 0; ++i)
      if ((cum += w[i]) > r) want = static_cast<int32_t>(i);
    EXPECT_EQ(run(x, 97, {row})[0].id, want) << counter;
  }
}

TEST(CpuSample, EditsApplyInTheProcessorOrderAndKeepRawLogprobs) {
  const std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.5f};
  std::vector<LogitEdit> edits = {
      {3, 10.0f, 0, 0, 0.0f},          // logit_bias +10: id 3 wins greedy
      {1, 0.0f, 0, kEditEos, 0.0f},    // EOS, masked
  };
  SampleRow row;
  row.edit_begin = 0;
  row.edit_end = 2;
  row.mask_eos = 1;
  SampleResult r = run(x, 4, {row}, &edits)[0];
  EXPECT_EQ(r.id, 3);
  double sum = 0;
  for (float v : x) sum += std::exp(v);
  EXPECT_NEAR(r.logprob, 0.5f - std::log(sum), 1e-6);  // the raw logit's logprob
  EXPECT_EQ(edits[0].raw, 0.5f);
  EXPECT_EQ(edits[1].raw, 2.0f);
  // Repetition penalty 2 on a positive and a negative logit, presence + frequency on a count of 3.
  edits = {{1, 0.0f, 0, kEditSeen, 0.0f}, {0, 0.0f, 3, 0, 0.0f}};
  row = SampleRow{};
  row.edit_end = 2;
  row.repetition_penalty = 4.0f;  // 2 -> 0.5
  row.presence_penalty = 0.25f;
  row.frequency_penalty = 0.25f;  // 1 - 0.25 - 0.75 = 0
  r = run(x, 4, {row}, &edits)[0];
  EXPECT_EQ(r.id, 1);  // z = {0, 0.5, -1, 0.5}: the tie goes to the lower id
  edits = {{2, 0.0f, 0, kEditSeen, 0.0f}};
  row.edit_end = 1;
  row.repetition_penalty = 2.0f;
  row.presence_penalty = row.frequency_penalty = 0.0f;
  std::vector<float> y = {-3.0f, -4.0f, -1.0f, -5.0f};  // -1 * 2 = -2 beats -3
  EXPECT_EQ(run(y, 4, {row}, &edits)[0].id, 2);
}

TEST(SampleEditLogit, PenaltyIsOneFmaAndNaNIsMinusInfinity) {
  SampleRow p;
  p.presence_penalty = 0.1f;
  p.frequency_penalty = 0.1f;
  const LogitEdit e{0, 0.0f, 6, 0, 0.0f};
  // One rounding (fmaf), as the device computes it: 0.1 * 6 + 0.1 unfused rounds to another float.
  EXPECT_EQ(sample_edit_logit(1.0f, e, p, kNegInf), 1.0f - std::fmaf(0.1f, 6.0f, 0.1f));
  const LogitEdit ban{0, kNegInf, 0, 0, 0.0f};
  EXPECT_EQ(sample_edit_logit(std::numeric_limits<float>::infinity(), ban, SampleRow{}, kNegInf), kNegInf);
}

TEST(CpuSample, SkippedRowsAreLeftAndBadArgumentsRefused) {
  const std::vector<float> x = {0.0f, 1.0f};
  SampleRow skip;
  skip.skip = 1;
  CpuOps ops(1);
  std::vector<float> logits = {0.0f, 1.0f, 1.0f, 0.0f};
  std::vector<SampleRow> rows = {skip, SampleRow{}};
  std::vector<SampleResult> out(2);
  out[0].id = 77;
  auto t = [](auto& v) {
    return Tensor(v.data(), DType::U8, {static_cast<int64_t>(v.size() * sizeof(v[0]))});
  };
  ops.sample(Tensor(logits.data(), DType::F32, {2, 2}), t(rows), Tensor(), t(out));
  EXPECT_EQ(out[0].id, 77);
  EXPECT_EQ(out[1].id, 0);
  std::vector<SampleResult> short_out(1);
  EXPECT_THROW(ops.sample(Tensor(logits.data(), DType::F32, {2, 2}), t(rows), Tensor(), t(short_out)), Error);
  rows[1].edit_end = 1;  // names an edit that is not there
  EXPECT_THROW(ops.sample(Tensor(logits.data(), DType::F32, {2, 2}), t(rows), Tensor(), t(out)), Error);
  std::vector<LogitEdit> edits = {{5, 1.0f, 0, 0, 0.0f}};  // id outside the row
  EXPECT_THROW(ops.sample(Tensor(logits.data(), DType::F32, {2, 2}), t(rows), t(edits), t(out)), Error);
}

TEST(CpuSample, AllowedTokenMasksConfineTheDrawAndKeepRawLogprobs) {
  // 70 ids (3 mask words); logits rise with the id, so unmasked greedy picks 69.
  const int64_t V = 70, W = sample_mask_words(V);
  ASSERT_EQ(W, 3);
  std::vector<float> x(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) x[static_cast<size_t>(i)] = 0.05f * static_cast<float>(i);
  std::vector<uint32_t> masks(static_cast<size_t>(2 * W), 0u);
  const auto allow = [&](int m, int64_t id) { masks[static_cast<size_t>(m * W + id / 32)] |= 1u << (id % 32); };
  for (int64_t id : {3, 31, 32, 40}) allow(0, id);  // mask 0: the best allowed is 40
  allow(1, 5);                                       // mask 1: only 5
  std::vector<SampleRow> rows(4);
  rows[0].mask_index = 0;                        // greedy under mask 0
  rows[1] = sampled(1.0f, 3);                    // sampled under mask 1: always 5
  rows[1].mask_index = 1;
  rows[2] = sampled(1.5f, 9);                    // sampled under mask 0: one of its ids
  rows[2].mask_index = 0;
  rows[2].top_logprobs = 2;
  rows[3].mask_index = -1;                       // unmasked greedy
  std::vector<float> all;
  for (int r = 0; r < 4; ++r) all.insert(all.end(), x.begin(), x.end());
  CpuOps ops(1);
  std::vector<SampleResult> out(4);
  const auto bytes = [](auto& v) { return static_cast<int64_t>(v.size() * sizeof(v[0])); };
  ops.sample(Tensor(all.data(), DType::F32, {4, V}), Tensor(rows.data(), DType::U8, {bytes(rows)}), Tensor(),
             Tensor(out.data(), DType::U8, {bytes(out)}), nullptr, Tensor(masks.data(), DType::U8, {bytes(masks)}));
  EXPECT_EQ(out[0].id, 40);
  EXPECT_EQ(out[1].id, 5);
  EXPECT_TRUE(out[2].id == 3 || out[2].id == 31 || out[2].id == 32 || out[2].id == 40) << out[2].id;
  EXPECT_EQ(out[3].id, 69);
  // Logprobs are the raw distribution's (vLLM's), so the mask does not change them.
  const std::vector<SampleResult> plain = run(x, V, {SampleRow{}});
  double lse = 0;
  for (float v : x) lse += std::exp(static_cast<double>(v));
  EXPECT_NEAR(out[0].logprob, x[40] - std::log(lse), 1e-5);
  EXPECT_EQ(out[2].n_top, 2);
  EXPECT_EQ(out[2].top_ids[0], 69);
  EXPECT_NEAR(out[3].logprob, plain[0].logprob, 1e-6);
  // Many draws under mask 0 reach every allowed id and nothing else.
  std::set<int32_t> seen;
  for (int c = 0; c < 200; ++c) {
    std::vector<SampleRow> one = {sampled(4.0f, static_cast<uint64_t>(c))};
    one[0].mask_index = 0;
    std::vector<SampleResult> o(1);
    std::vector<float> xx = x;
    ops.sample(Tensor(xx.data(), DType::F32, {1, V}), Tensor(one.data(), DType::U8, {bytes(one)}), Tensor(),
               Tensor(o.data(), DType::U8, {bytes(o)}), nullptr, Tensor(masks.data(), DType::U8, {bytes(masks)}));
    seen.insert(o[0].id);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{3, 31, 32, 40}));
  // A row naming a mask that is not there, and masks of the wrong size, are refused.
  rows[3].mask_index = 2;
  EXPECT_THROW(ops.sample(Tensor(all.data(), DType::F32, {4, V}), Tensor(rows.data(), DType::U8, {bytes(rows)}),
                          Tensor(), Tensor(out.data(), DType::U8, {bytes(out)}), nullptr,
                          Tensor(masks.data(), DType::U8, {bytes(masks)})),
               Error);
  rows[3].mask_index = -1;
  EXPECT_THROW(ops.sample(Tensor(all.data(), DType::F32, {4, V}), Tensor(rows.data(), DType::U8, {bytes(rows)}),
                          Tensor(), Tensor(out.data(), DType::U8, {bytes(out)}), nullptr,
                          Tensor(masks.data(), DType::U8, {bytes(masks) - 4})),
               Error);
}

}  // namespace
}  // namespace ft
