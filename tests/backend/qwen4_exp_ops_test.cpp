// Qwen4-Exp's ops (ngram_hash, ple_gate, stream_weighted_sum, attention_qsa) against scalar references written from
// transformers' modeling_qwen4_exp.py: n-gram ids with EOS segments, a sequence continuing from its
// history slot and the same tokens split over two calls; the PLE stream gate in double precision; the
// sparse attention over selected blocks plus the tail, from paged K/V with wide value rows.
#include <algorithm>

#include "op_harness.h"

namespace ft::testing {
namespace {

class Qwen4ExpOpsTest : public OpTest {
 protected:
  BatchInfo batch(const std::vector<int32_t>& lens, const std::vector<int32_t>& starts,
                  const std::vector<int32_t>& slots, int32_t max_blocks = 1,
                  const std::vector<int32_t>& tables = {}) {
    std::vector<int32_t> pos, seq, st{0};
    int32_t max_kv = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int32_t i = 0; i < lens[s]; ++i) pos.push_back(starts[s] + i), seq.push_back(static_cast<int32_t>(s));
      st.push_back(static_cast<int32_t>(pos.size()));
      max_kv = std::max(max_kv, starts[s] + lens[s]);
    }
    const auto T = static_cast<int32_t>(pos.size()), S = static_cast<int32_t>(lens.size());
    std::vector<int32_t> bt = tables.empty() ? std::vector<int32_t>(static_cast<size_t>(S * max_blocks), 0) : tables;
    BatchInfo b{T, S, max_blocks, max_kv, arena().i32(pos, {T}), arena().i32(seq, {T}), arena().i32(st, {S + 1}),
                arena().i32(bt, {S, max_blocks}), Tensor()};
    b.state_slots = arena().i32(slots, {S});
    return b;
  }
};

/** transformers' ids for every token of `toks` (one whole sequence): shift right within segments that
 *  end at each EOS (two virtual EOS before the start), xor of products, per-head remainder + offset. */
std::vector<int32_t> ngram_reference(const std::vector<int64_t>& toks, int64_t n, int64_t heads, int64_t eos,
                                     const std::vector<int64_t>& mult, const std::vector<int64_t>& sizes,
                                     const std::vector<int64_t>& offsets) {
  std::vector<int64_t> hist(static_cast<size_t>(n - 1), eos);
  hist.insert(hist.end(), toks.begin(), toks.end());
  std::vector<int32_t> out;
  for (size_t p = static_cast<size_t>(n - 1); p < hist.size(); ++p) {
    int64_t seg = 0;  // one past the last EOS strictly before p
    for (size_t i = 0; i < p; ++i)
      if (hist[i] == eos) seg = static_cast<int64_t>(i) + 1;
    auto shifted = [&](int64_t s) {
      return static_cast<int64_t>(p) - s >= seg ? hist[p - static_cast<size_t>(s)] : eos;
    };
    for (int64_t g = 2; g <= n; ++g) {
      int64_t m = shifted(0) * mult[0];
      for (int64_t j = 1; j < g; ++j) m ^= shifted(j) * mult[static_cast<size_t>(j)];
      for (int64_t k = 0; k < heads; ++k) {
        const size_t h = static_cast<size_t>((g - 2) * heads + k);
        out.push_back(static_cast<int32_t>(m % sizes[h] + offsets[h]));
      }
    }
  }
  return out;
}

TEST_P(Qwen4ExpOpsTest, NgramIdsFollowSegmentsAndCarryTheirHistory) {
  const int64_t n = 3, heads = 2, eos = 2, nh = (n - 1) * heads;
  const std::vector<int64_t> mult = {1000003, 998244353, 1234567891}, sizes = {1009, 1013, 1019, 1021},
                             offsets = {0, 1009, 2022, 3041};
  Tensor tm = arena().upload(mult.data(), DType::I64, {n}), ts = arena().upload(sizes.data(), DType::I64, {nh}),
         to = arena().upload(offsets.data(), DType::I64, {nh});
  // Sequence A (slot 0) from position 0 with an EOS inside; sequence B (slot 2) continues: its first 4
  // tokens came in an earlier call, its history slot holds their last two.
  const std::vector<int64_t> a = {5, 7, 2, 9, 11, 13}, b = {21, 23, 2, 25, 27, 29, 31};
  const NgramHashParams p{static_cast<int32_t>(n), static_cast<int32_t>(heads), static_cast<int32_t>(eos)};
  Tensor hist = arena().i32(std::vector<int32_t>(6, 77), {3, 2});  // slot 0's 77s must be ignored
  auto run = [&](const std::vector<int32_t>& toks, const std::vector<int32_t>& lens, const std::vector<int32_t>& starts,
                 const std::vector<int32_t>& slots) {
    Tensor ids = arena().alloc(DType::I32, {static_cast<int64_t>(toks.size()), nh});
    ops().ngram_hash(p, batch(lens, starts, slots), arena().i32(toks, {static_cast<int64_t>(toks.size())}), tm, ts, to,
                     hist, ids);
    return arena().read_i32(ids);
  };
  (void)run({21, 23, 2, 25}, {4}, {0}, {2});  // leaves an EOS in B's history
  const std::vector<int32_t> got = run({5, 7, 2, 9, 11, 13, 27, 29, 31}, {6, 3}, {0, 4}, {0, 2});
  const std::vector<int32_t> ra = ngram_reference(a, n, heads, eos, mult, sizes, offsets);
  const std::vector<int32_t> rb = ngram_reference(b, n, heads, eos, mult, sizes, offsets);
  std::vector<int32_t> want(ra.begin(), ra.end());
  want.insert(want.end(), rb.begin() + 4 * nh, rb.end());
  EXPECT_EQ(got, want);
  const std::vector<int32_t> h = arena().read_i32(hist);
  EXPECT_EQ(std::vector<int32_t>(h.begin(), h.begin() + 2), (std::vector<int32_t>{11, 13}));
  EXPECT_EQ(std::vector<int32_t>(h.begin() + 4, h.end()), (std::vector<int32_t>{29, 31}));
  // A one-token call right after: history plus the token (decode).
  const std::vector<int32_t> rd = ngram_reference({21, 23, 2, 25, 27, 29, 31, 33}, n, heads, eos, mult, sizes, offsets);
  EXPECT_EQ(run({33}, {1}, {7}, {2}), std::vector<int32_t>(rd.end() - nh, rd.end()));
}

TEST_P(Qwen4ExpOpsTest, PleGateIsTheSignedRootOfEachStreamsScore) {
  const int64_t T = 5, n = 3, D = 8;
  const std::vector<float> key = random_vec(T * n * D, 1, -2, 2), query = random_vec(T * n * D, 2, -2, 2),
                           w = random_vec(n * D, 3, 0.5f, 1.5f), value = random_vec(T * D, 4);
  Tensor out = arena().alloc(ops().activation_dtype(), {T, n * D});
  ops().ple_gate(arena().act(key, {T, n * D}), arena().act(query, {T, n * D}), arena().f32(w, {n * D}),
                 arena().act(value, {T, D}), out);
  std::vector<double> want(static_cast<size_t>(T * n * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < n; ++k) {
      double g = 0;
      for (int64_t d = 0; d < D; ++d) {
        const size_t i = static_cast<size_t>(t * n * D + k * D + d);
        g += static_cast<double>(key[i]) * query[i] * w[static_cast<size_t>(k * D + d)];
      }
      g /= std::sqrt(static_cast<double>(D));
      g = (g > 0 ? 1.0 : g < 0 ? -1.0 : 0.0) * std::sqrt(std::max(std::fabs(g), 1e-6));
      for (int64_t d = 0; d < D; ++d)
        want[static_cast<size_t>(t * n * D + k * D + d)] = value[static_cast<size_t>(t * D + d)] / (1 + std::exp(-g));
    }
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
}

TEST_P(Qwen4ExpOpsTest, StreamWeightedSumAddsTheWeightedStreams) {
  const int64_t T = 4, n = 3, D = 8;
  const std::vector<float> x = random_vec(T * n * D, 9, -2, 2), w = random_vec(n * D, 10);
  Tensor out = arena().alloc(ops().activation_dtype(), {T, D});
  ops().stream_weighted_sum(arena().act(x, {T, n * D}), arena().f32(w, {n * D}), out);
  std::vector<double> want(static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t k = 0; k < n; ++k)
        want[static_cast<size_t>(t * D + d)] += static_cast<double>(x[t * n * D + k * D + d]) * w[k * D + d];
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
  EXPECT_THROW(ops().stream_weighted_sum(arena().act(x, {T, n * D}), arena().f32(w, {n * D}),
                                         arena().alloc(ops().activation_dtype(), {T, 5})),
               Error);
}

TEST_P(Qwen4ExpOpsTest, SparseAttentionSeesTheSelectedBlocksAndTheTail) {
  // One sequence of 14 positions in pages of 4 (table 3, 0, 2, 1); the last 3 tokens query. Blocks of 4.
  const int64_t H = 4, G = 2, D = 8, page = 4, pages = 4, block = 4, L = 14, T = 3, K = 2, vw = G * D + 5;
  const std::vector<int32_t> table = {3, 0, 2, 1};
  const std::vector<float> kp = random_vec(pages * page * G * D, 5), vp = random_vec(pages * page * vw, 6),
                           q = random_vec(T * H * D, 7);
  // K/V in the activation dtype, as the backend's cache holds them (CUDA requires q's dtype).
  KvLayer kv{arena().act(kp, {pages, page, G, D}), arena().act(vp, {pages, page, 1, vw})};
  const std::vector<float> kr = arena().read(kv.k), vr = arena().read(kv.v);  // as stored
  const AttentionParams ap{static_cast<int32_t>(H), static_cast<int32_t>(G), static_cast<int32_t>(D), 0.3f, 0, Tensor()};
  // Reference of `n` query rows qs at positions first.. with selected blocks sel [n, K].
  const auto reference = [&](const std::vector<float>& qs, int64_t first, int64_t n, const std::vector<int32_t>& sel) {
    std::vector<double> want(static_cast<size_t>(n * H * D));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = first + t, tail = (p + 1) / block * block;
      std::vector<int64_t> keys;
      for (int64_t j = 0; j < K; ++j)
        if (sel[static_cast<size_t>(t * K + j)] >= 0)
          for (int64_t i = 0; i < block; ++i) keys.push_back(sel[static_cast<size_t>(t * K + j)] * block + i);
      for (int64_t i = tail; i <= p; ++i) keys.push_back(i);
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);
        std::vector<double> s;
        double mx = -1e300, sum = 0;
        for (int64_t j : keys) {
          const int64_t slot = table[static_cast<size_t>(j / page)] * page + j % page;
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += static_cast<double>(qs[t * H * D + h * D + i]) * kr[(slot * G + g) * D + i];
          s.push_back(0.3 * d);
          mx = std::max(mx, s.back());
        }
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (size_t j = 0; j < keys.size(); ++j) {
          const int64_t slot = table[static_cast<size_t>(keys[j] / page)] * page + keys[j] % page;
          for (int64_t i = 0; i < D; ++i) want[t * H * D + h * D + i] += s[j] / sum * vr[slot * vw + g * D + i];
        }
      }
    }
    return want;
  };
  // Positions 11, 12, 13: 11 sees blocks 0..1 complete (picks 1 and 0), tail 8..11 is block 2 complete,
  // so its tail is empty; 12 and 13 see blocks 0..2 (pick 2 and -1 / 0 and 2), tails 12.. .
  const std::vector<int32_t> sel = {1, 0, 2, -1, 0, 2};
  Tensor out = arena().alloc(ops().activation_dtype(), {T, H * D});
  ops().attention_qsa(ap, static_cast<int32_t>(block), batch({static_cast<int32_t>(T)}, {static_cast<int32_t>(L - T)},
                                                            {0}, 4, table),
                      arena().act(q, {T, H * D}), kv, arena().i32(sel, {T, K}), out);
  EXPECT_LT(rel_l2(arena().read(out), reference(q, L - T, T, sel)), tol());
  // A block the query cannot see yet (block 3 holds positions 12..15; the query is at 13): the CPU
  // backend refuses it; the CUDA kernel, whose selection lives on the device, skips it (ops.h,
  // attention_qsa.cu), attending to the tail 12..13 alone.
  const std::vector<float> q1 = random_vec(H * D, 8);
  Tensor out1 = arena().alloc(ops().activation_dtype(), {1, H * D});
  const auto unseen = [&] {
    ops().attention_qsa(ap, static_cast<int32_t>(block), batch({1}, {static_cast<int32_t>(L - 1)}, {0}, 4, table),
                        arena().act(q1, {1, H * D}), kv, arena().i32({3, -1}, {1, K}), out1);
  };
  if (GetParam() == "cpu") {
    EXPECT_THROW(unseen(), Error);
  } else {
    unseen();
    EXPECT_LT(rel_l2(arena().read(out1), reference(q1, L - 1, 1, {-1, -1})), tol());
  }
}

FT_INSTANTIATE_OP_TEST(Qwen4ExpOpsTest);

}  // namespace
}  // namespace ft::testing
