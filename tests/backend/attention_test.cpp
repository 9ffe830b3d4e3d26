// kv_write + attention over randomly assigned pages: a batch of a prefill chunk, a short chunk
// continuing a cached sequence and a decode token, with GQA, optional sliding window and optional
// attention sinks (gpt-oss), against naive attention over contiguous K/V.
#include <algorithm>
#include <numeric>

#include "op_harness.h"

namespace ft::testing {
namespace {

class AttentionTest : public OpTest {};

struct Seq { int32_t start, n_new; };  // cached positions [0, start), new positions [start, start + n_new)

TEST_P(AttentionTest, PagedCausalGqaMatchesNaive) {
  const int32_t H = 4, G = 2, D = 8, page = 16, n_pages = 20;
  const std::vector<Seq> seqs = {{0, 10}, {20, 3}, {70, 1}};
  const int32_t S = static_cast<int32_t>(seqs.size()), max_blocks = 5;
  // Random, disjoint page assignment.
  std::vector<int32_t> perm(n_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(4));
  std::vector<int32_t> table(S * max_blocks);
  for (int32_t i = 0; i < S * max_blocks; ++i) table[i] = perm[i];
  // Full K/V/Q per sequence for all positions.
  std::vector<std::vector<float>> K(S), V(S), Q(S);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t L = seqs[s].start + seqs[s].n_new;
    K[s] = random_vec(L * G * D, 100 + s);
    V[s] = random_vec(L * G * D, 200 + s);
    Q[s] = random_vec(L * H * D, 300 + s, -2, 2);
  }
  Tensor kc = arena().alloc(DType::F32, {n_pages, page, G, D}), vc = arena().alloc(DType::F32, {n_pages, page, G, D});
  KvLayer kv{kc, vc};
  if (ops().activation_dtype() != DType::F32) kv = {arena().alloc(ops().activation_dtype(), {n_pages, page, G, D}),
                                                    arena().alloc(ops().activation_dtype(), {n_pages, page, G, D})};
  Tensor bt = arena().i32(table, {S, max_blocks});
  // Batch builder for position ranges [lo_s, hi_s) of each sequence.
  const std::vector<float> sink_logits = random_vec(H, 400, -2, 2);
  auto run = [&](const std::vector<std::pair<int32_t, int32_t>>& ranges, bool attend, int32_t window,
                 bool sinks = false) {
    std::vector<int32_t> pos, si, st{0};
    std::vector<float> k, v, q;
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t p = ranges[s].first; p < ranges[s].second; ++p) {
        pos.push_back(p);
        si.push_back(s);
        k.insert(k.end(), K[s].begin() + p * G * D, K[s].begin() + (p + 1) * G * D);
        v.insert(v.end(), V[s].begin() + p * G * D, V[s].begin() + (p + 1) * G * D);
        q.insert(q.end(), Q[s].begin() + p * H * D, Q[s].begin() + (p + 1) * H * D);
      }
      st.push_back(static_cast<int32_t>(pos.size()));
    }
    const int32_t T = static_cast<int32_t>(pos.size());
    BatchInfo b{T, S, max_blocks, 0, arena().i32(pos, {T}), arena().i32(si, {T}), arena().i32(st, {S + 1}), bt, Tensor()};
    for (int32_t p : pos) b.max_kv_len = std::max(b.max_kv_len, p + 1);
    ops().kv_write(b, arena().act(k, {T, G * D}), arena().act(v, {T, G * D}), kv);
    if (!attend) return;
    Tensor out = arena().alloc(ops().activation_dtype(), {T, H * D});
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    AttentionParams ap{H, G, D, scale, window};
    if (sinks) ap.sinks = arena().f32(sink_logits, {H});
    ops().attention(ap, b, arena().act(q, {T, H * D}), kv, out);
    std::vector<double> want;
    for (int32_t t = 0; t < T; ++t) {
      const int32_t s = si[t], p = pos[t], lo = window > 0 ? std::max(0, p - window + 1) : 0;
      for (int32_t h = 0; h < H; ++h) {
        const int32_t g = h / (H / G);
        std::vector<double> sc;
        double mx = -1e30;
        for (int32_t j = lo; j <= p; ++j) {
          double d = 0;
          for (int32_t i = 0; i < D; ++i) d += static_cast<double>(Q[s][(p * H + h) * D + i]) * K[s][(j * G + g) * D + i];
          sc.push_back(d * scale);
          mx = std::max(mx, sc.back());
        }
        if (sinks) mx = std::max<double>(mx, sink_logits[h]);
        double sum = sinks ? std::exp(sink_logits[h] - mx) : 0.0;  // joins the denominator, adds no value
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int32_t i = 0; i < D; ++i) {
          double o = 0;
          for (int32_t j = lo; j <= p; ++j) o += sc[j - lo] * V[s][(j * G + g) * D + i];
          want.push_back(o / sum);
        }
      }
    }
    EXPECT_LT(rel_l2(arena().read(out), want), tol()) << "window " << window << " sinks " << sinks;
  };
  // Fill the cached prefixes, then run the mixed batch (with and without a sliding window).
  std::vector<std::pair<int32_t, int32_t>> prefix, step;
  for (const Seq& s : seqs) {
    prefix.push_back({0, s.start});
    step.push_back({s.start, s.start + s.n_new});
  }
  run(prefix, false, 0);
  run(step, true, 0);
  run(step, true, 5);
  run(step, true, 0, true);
  run(step, true, 5, true);
}

TEST_P(AttentionTest, MisshapenSinksAreRejected) {
  if (GetParam() != "cpu") GTEST_SKIP() << "the shape check is op_checks::attention_sinks, shared";
  Tensor kc = arena().alloc(DType::F32, {2, 4, 1, 8}), vc = arena().alloc(DType::F32, {2, 4, 1, 8});
  BatchInfo b{1, 1, 1, 1, arena().i32({0}, {1}), arena().i32({0}, {1}), arena().i32({0, 1}, {2}),
              arena().i32({0}, {1, 1}), Tensor()};
  std::vector<float> k(8, 0.0f);
  ops().kv_write(b, arena().f32(k, {1, 8}), arena().f32(k, {1, 8}), {kc, vc});
  AttentionParams p{2, 1, 8, 0.35f, 0};
  p.sinks = arena().f32({0.5f, 0.5f, 0.5f}, {3});  // 3 sinks for 2 heads
  Tensor out = arena().alloc(DType::F32, {1, 16});
  try {
    ops().attention(p, b, arena().f32(std::vector<float>(16, 0.1f), {1, 16}), {kc, vc}, out);
    ADD_FAILURE() << "3 sinks for 2 heads were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sinks"), std::string::npos) << e.what();
  }
}

TEST_P(AttentionTest, BadBlockTableIsRejected) {
  if (GetParam() != "cpu") GTEST_SKIP() << "device backends do not validate page ids";
  Tensor kc = arena().alloc(DType::F32, {2, 4, 1, 8}), vc = arena().alloc(DType::F32, {2, 4, 1, 8});
  BatchInfo b{1, 1, 1, 6, arena().i32({5}, {1}), arena().i32({0}, {1}), arena().i32({0, 1}, {2}),
              arena().i32({0}, {1, 1}), Tensor()};
  std::vector<float> k(8, 0.0f);
  EXPECT_THROW(ops().kv_write(b, arena().f32(k, {1, 8}), arena().f32(k, {1, 8}), {kc, vc}), Error);
}

FT_INSTANTIATE_OP_TEST(AttentionTest);

}  // namespace
}  // namespace ft::testing
