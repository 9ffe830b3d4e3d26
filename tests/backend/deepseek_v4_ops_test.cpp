// DeepSeek-V4's ops (ops.h "DeepSeek-V4") against hand-computed values and naive double-precision
// references written from transformers' modeling_deepseek_v4.py: hyper-connection weights with
// Sinkhorn normalisation, the stream expansion, sqrt(softplus) and hash routing, the clamped SwiGLU,
// the compressor (one prefill equal to the same tokens in chunks), the indexer and the attention; the
// compressed entries kept in the KV pages' entry rows (KvLayer::e) equal the dense ones, are written
// once (when their window closes) and read where they live.
#include <algorithm>
#include <numeric>

#include "op_harness.h"

namespace ft::testing {
namespace {

class DeepseekV4OpsTest : public OpTest {};

double sig(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST_P(DeepseekV4OpsTest, HyperConnectionPreMatchesNaiveSinkhorn) {
  const int32_t n = 3, T = 2, H = 5, M = (2 + n) * n, iters = 20;
  const float eps = 1e-6f;
  const auto streams = random_vec(T * n * H, 1), mixes = random_vec(T * M, 2, -2, 2);
  const auto base = random_vec(M, 3), scale = random_vec(3, 4, 0.5f, 1.5f);
  Tensor coll = arena().alloc(ops().activation_dtype(), {T, H}), post = arena().alloc(DType::F32, {T, n}),
         comb = arena().alloc(DType::F32, {T, n * n});
  ops().hc_pre({n, iters, eps}, arena().act(streams, {T, n * H}), arena().f32(mixes, {T, M}), arena().f32(base, {M}),
               arena().f32(scale, {3}), coll, post, comb);
  std::vector<double> want_coll, want_post, want_comb;
  for (int32_t t = 0; t < T; ++t) {
    const float* m = mixes.data() + t * M;
    std::vector<double> pre(n), c(n * n);
    for (int j = 0; j < n; ++j) pre[j] = sig(m[j] * scale[0] + base[j]) + eps;
    for (int j = 0; j < n; ++j) want_post.push_back(2 * sig(m[n + j] * scale[1] + base[n + j]));
    for (int j = 0; j < n; ++j) {
      double sum = 0;
      for (int k = 0; k < n; ++k) sum += c[j * n + k] = std::exp(m[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k]);
      for (int k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / sum + eps;
    }
    auto cols = [&] {
      for (int k = 0; k < n; ++k) {
        double s = 0;
        for (int j = 0; j < n; ++j) s += c[j * n + k];
        for (int j = 0; j < n; ++j) c[j * n + k] /= s + eps;
      }
    };
    cols();
    for (int it = 1; it < iters; ++it) {
      for (int j = 0; j < n; ++j) {
        double s = 0;
        for (int k = 0; k < n; ++k) s += c[j * n + k];
        for (int k = 0; k < n; ++k) c[j * n + k] /= s + eps;
      }
      cols();
    }
    want_comb.insert(want_comb.end(), c.begin(), c.end());
    for (int d = 0; d < H; ++d) {
      double s = 0;
      for (int j = 0; j < n; ++j) s += pre[j] * streams[t * n * H + j * H + d];
      want_coll.push_back(s);
    }
  }
  EXPECT_LT(rel_l2(arena().read(coll), want_coll), tol());
  EXPECT_LT(rel_l2(arena().read(post), want_post), 1e-6);
  const std::vector<float> got_comb = arena().read(comb);
  EXPECT_LT(rel_l2(got_comb, want_comb), 1e-5);
  for (int k = 0; k < n; ++k) {  // Sinkhorn: each column sums to ~1
    double s = 0;
    for (int j = 0; j < n; ++j) s += got_comb[j * n + k];
    EXPECT_NEAR(s, 1.0, 1e-4);
  }
  // Head mode: only pre (scale [1], base [n]); one stream of value 1 gives sigmoid(b) + eps.
  Tensor coll1 = arena().alloc(ops().activation_dtype(), {1, 1});
  ops().hc_pre({1, 0, eps}, arena().act({1.0f}, {1, 1}), arena().f32({0.5f}, {1, 1}), arena().f32({0.25f}, {1}),
               arena().f32({2.0f}, {1}), coll1, Tensor(), Tensor());
  // sigmoid(1.25) = 0.777299861. A device backend stores coll in bf16 (8 significant bits): rounding
  // to nearest moves a value by at most half an ulp, under 2^-8 of it.
  const double want1 = sig(0.5 * 2.0 + 0.25) + 1e-6;
  EXPECT_NEAR(arena().read(coll1)[0], want1, GetParam() == "cpu" ? 1e-6 : std::ldexp(want1, -8));
}

TEST_P(DeepseekV4OpsTest, HyperConnectionPostMixesStreams) {
  const int32_t n = 2, T = 1, H = 2;
  // out_k = post_k y + sum_j comb[j, k] stream_j, by hand.
  const std::vector<float> streams = {1, 2, 3, 4}, y = {10, 20}, post = {0.5f, 2.0f}, comb = {0.25f, 0.75f, 1.0f, 0.0f};
  Tensor out = arena().alloc(ops().activation_dtype(), {T, n * H});
  ops().hc_post({n, 1, 1e-6f}, arena().act(streams, {T, n * H}), arena().act(y, {T, H}), arena().f32(post, {T, n}),
                arena().f32(comb, {T, n * n}), out);
  // k=0: 0.5*[10,20] + 0.25*[1,2] + 1.0*[3,4] = [8.25, 14.5]; k=1: 2*[10,20] + 0.75*[1,2] + 0*[3,4] = [20.75, 41.5]
  EXPECT_LT(rel_l2(arena().read(out), {8.25, 14.5, 20.75, 41.5}), tol());
}

TEST_P(DeepseekV4OpsTest, SqrtSoftplusRouterByScoreAndByHash) {
  const float l1 = std::log(std::exp(1.0f) - 1.0f);  // softplus(l1) = 1
  // Expert scores: sqrt(softplus(0)) = sqrt(ln 2) = 0.832555, sqrt(softplus(l1)) = 1, sqrt(softplus(-30)) ~ 0.
  const std::vector<float> logits = {0.0f, l1, -30.0f};
  Tensor ids = arena().alloc(DType::I32, {1, 2}), w = arena().alloc(DType::F32, {1, 2});
  RouterParams rp;
  rp.n_expert_used = 2;
  rp.norm_topk_prob = true;
  rp.scaling = 1.5f;
  rp.bias = arena().f32({0.0f, 0.0f, 5.0f}, {3});  // the bias picks expert 2 but does not weigh it
  ops().moe_route_sqrtsoftplus(rp, arena().f32(logits, {1, 3}), Tensor(), Tensor(), ids, w);
  EXPECT_EQ(arena().read_i32(ids), (std::vector<int32_t>{2, 1}));
  const double s2 = std::sqrt(std::log1p(std::exp(-30.0)));
  EXPECT_LT(rel_l2(arena().read(w), {1.5 * s2 / (s2 + 1.0), 1.5 * 1.0 / (s2 + 1.0)}), 1e-6);
  // Hash: token 1 -> experts {0, 1}, weights 1.5 * [0.832555, 1] / 1.832555.
  rp.bias = Tensor();
  ops().moe_route_sqrtsoftplus(rp, arena().f32(logits, {1, 3}), arena().i32({1}, {1}),
                               arena().i32({2, 1, 0, 1}, {2, 2}), ids, w);
  EXPECT_EQ(arena().read_i32(ids), (std::vector<int32_t>{0, 1}));
  const double s0 = std::sqrt(std::log(2.0));
  EXPECT_LT(rel_l2(arena().read(w), {1.5 * s0 / (s0 + 1), 1.5 / (s0 + 1)}), 1e-6);
}

TEST_P(DeepseekV4OpsTest, ClampedSwigluClampsGateAboveAndUpBothSides) {
  Tensor out = arena().alloc(ops().activation_dtype(), {1, 3});
  ops().swiglu_clamp(arena().act({20.0f, 1.0f, -2.0f}, {1, 3}), arena().act({-20.0f, 3.0f, 12.0f}, {1, 3}), 10.0f,
                     out);
  // silu(10) * -10, silu(1) * 3, silu(-2) * 10
  EXPECT_LT(rel_l2(arena().read(out), {-100.0 * sig(10), 3.0 * sig(1), -20.0 * sig(-2)}), tol());
}

// Naive compressor entry w of one sequence from per-position projections rows[pos] = [kv | gate].
std::vector<double> naive_entry(const std::vector<std::vector<float>>& rows, const std::vector<float>& ape,
                                const std::vector<float>& nw, int rate, int hd, bool overlap, int w,
                                const std::vector<float>& inv) {
  const int width = overlap ? 2 * hd : hd;
  std::vector<double> e(hd);
  for (int d = 0; d < hd; ++d) {
    std::vector<double> lg, val;
    if (overlap && w > 0)
      for (int j = 0; j < rate; ++j) {
        lg.push_back(rows[(w - 1) * rate + j][width + d] + ape[j * width + d]);
        val.push_back(rows[(w - 1) * rate + j][d]);
      }
    const int off = overlap ? hd : 0;
    for (int j = 0; j < rate; ++j) {
      lg.push_back(rows[w * rate + j][width + off + d] + ape[j * width + off + d]);
      val.push_back(rows[w * rate + j][off + d]);
    }
    const double mx = *std::max_element(lg.begin(), lg.end());
    double s = 0, acc = 0;
    for (double& x : lg) s += x = std::exp(x - mx);
    for (size_t i = 0; i < lg.size(); ++i) acc += lg[i] / s * val[i];
    e[d] = acc;
  }
  double ms = 0;
  for (double x : e) ms += x * x;
  const double r = 1.0 / std::sqrt(ms / hd + 1e-6);
  for (int d = 0; d < hd; ++d) e[d] *= r * nw[d];
  const int n_rot = static_cast<int>(inv.size()) * 2;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double a = static_cast<double>(static_cast<float>(w * rate) * inv[i]);
    const double x0 = e[hd - n_rot + 2 * i], x1 = e[hd - n_rot + 2 * i + 1];
    e[hd - n_rot + 2 * i] = x0 * std::cos(a) - x1 * std::sin(a);
    e[hd - n_rot + 2 * i + 1] = x1 * std::cos(a) + x0 * std::sin(a);
  }
  return e;
}

TEST_P(DeepseekV4OpsTest, CompressorEntriesMatchNaiveAndChunkingDoesNotChangeThem) {
  for (bool overlap : {false, true}) {
    SCOPED_TRACE(overlap ? "CSA (overlapping windows)" : "HCA");
    const int rate = 4, hd = 8, width = overlap ? 2 * hd : hd, L = 14, page = 4, n_pages = 8, Wv = 2 * width + 4;
    const int col = 2;  // the compressor's columns start past another's
    std::vector<std::vector<float>> rows(L);
    for (int p = 0; p < L; ++p) rows[p] = random_vec(2 * width, 10 + p, -2, 2);
    const auto ape = random_vec(rate * width, 5), nw = random_vec(hd, 6, 0.5f, 1.5f);
    const std::vector<float> inv = {1.0f, 0.1f};
    CompressParams p;
    p.rate = rate, p.head_dim = hd, p.overlap = overlap, p.col = col;
    p.rope.head_dim = hd, p.rope.n_rot = 4, p.rope.inv_freq = arena().f32(inv, {2});
    const std::vector<int32_t> table = {5, 2, 7, 0};
    const int M = L / rate;
    auto run = [&](KvLayer kv, int lo, int hi, Tensor ent) {
      std::vector<int32_t> pos;
      std::vector<float> proj;
      for (int q = lo; q < hi; ++q) pos.push_back(q), proj.insert(proj.end(), rows[q].begin(), rows[q].end());
      const int32_t T = hi - lo;
      BatchInfo b{T, 1, 4, hi, arena().i32(pos, {T}), arena().i32(std::vector<int32_t>(T, 0), {T}),
                  arena().i32({0, T}, {2}), arena().i32(table, {1, 4}), Tensor()};
      ops().compress_kv(p, b, arena().act(proj, {T, 2 * width}), kv, arena().f32(ape, {rate, width}),
                        arena().f32(nw, {hd}), ent);
    };
    KvLayer kv1{Tensor(), arena().alloc(ops().activation_dtype(), {n_pages, page, 1, Wv})};
    KvLayer kv2{Tensor(), arena().alloc(ops().activation_dtype(), {n_pages, page, 1, Wv})};
    Tensor e1 = arena().alloc(ops().activation_dtype(), {1, M, hd}), e2 = arena().alloc(ops().activation_dtype(), {1, M, hd});
    run(kv1, 0, L, e1);                                    // one prefill
    run(kv2, 0, 5, e2), run(kv2, 5, 11, e2), run(kv2, 11, 12, e2), run(kv2, 12, L, e2);  // chunks and decode steps
    std::vector<double> want;
    for (int w = 0; w < M; ++w) {
      const auto e = naive_entry(rows, ape, nw, rate, hd, overlap, w, inv);
      want.insert(want.end(), e.begin(), e.end());
    }
    EXPECT_LT(rel_l2(arena().read(e1), want), tol(1e-5));
    EXPECT_EQ(arena().read(e1), arena().read(e2));
  }
}

// Entry rows (KvLayer::e) against the dense entries: compress_kv in chunks writes each entry once, at
// its row (the page of its window's last position), bit-equal to the dense pooling, and leaves the
// rows' other columns alone; a later step that closes no window rewrites nothing (its projections
// poisoned: an entry pooled again would turn NaN); the indexer and the attention read the rows as they
// read the dense entries. Rates 2 (two rows a page of 4), 4 (one) and 8 (one row every other page).
TEST_P(DeepseekV4OpsTest, PagedEntriesAreWrittenOnceAndReadWhereTheyLive) {
  for (const auto& [rate, overlap] : {std::pair<int, bool>{2, true}, {4, true}, {8, false}}) {
    SCOPED_TRACE(::testing::Message() << "rate " << rate << (overlap ? " CSA" : " HCA"));
    const int hd = 8, width = overlap ? 2 * hd : hd, L = 14, page = 4, n_pages = 8, Wv = 2 * width;
    const int rows_pp = (page + rate - 1) / rate, W = hd + 3, ecol = 2, M = L / rate;
    std::vector<std::vector<float>> rows(L + 1);
    for (int q = 0; q <= L; ++q) rows[q] = random_vec(2 * width, 40 + q, -2, 2);
    const auto ape = random_vec(rate * width, 41), nw = random_vec(hd, 42, 0.5f, 1.5f);
    const std::vector<float> inv = {1.0f, 0.1f};
    CompressParams p;
    p.rate = rate, p.head_dim = hd, p.overlap = overlap, p.entry_col = ecol;
    p.rope.head_dim = hd, p.rope.n_rot = 4, p.rope.inv_freq = arena().f32(inv, {2});
    const std::vector<int32_t> table = {5, 2, 7, 0};
    auto batch = [&](const std::vector<int32_t>& pos) {
      const auto T = static_cast<int32_t>(pos.size());
      return BatchInfo{T, 1, 4, pos.back() + 1, arena().i32(pos, {T}), arena().i32(std::vector<int32_t>(T, 0), {T}),
                       arena().i32({0, T}, {2}), arena().i32(table, {1, 4}), Tensor()};
    };
    auto run = [&](KvLayer kv, int lo, int hi, Tensor ent) {
      std::vector<int32_t> pos;
      std::vector<float> proj;
      for (int q = lo; q < hi; ++q) pos.push_back(q), proj.insert(proj.end(), rows[q].begin(), rows[q].end());
      ops().compress_kv(p, batch(pos), arena().act(proj, {hi - lo, 2 * width}), kv, arena().f32(ape, {rate, width}),
                        arena().f32(nw, {hd}), ent);
    };
    KvLayer dense{Tensor(), arena().alloc(ops().activation_dtype(), {n_pages, page, 1, Wv})};
    KvLayer paged{Tensor(), arena().alloc(ops().activation_dtype(), {n_pages, page, 1, Wv})};
    const std::vector<float> sentinel(static_cast<size_t>(n_pages * rows_pp * W), 7.0f);
    paged.e = arena().act(sentinel, {n_pages, rows_pp, 1, W});
    CompressParams dp = p;
    dp.entry_col = 0;
    std::swap(p, dp);
    Tensor e1 = arena().alloc(ops().activation_dtype(), {1, M, hd});
    run(dense, 0, L, e1);
    std::swap(p, dp);
    run(paged, 0, 5, paged.e), run(paged, 5, 11, paged.e), run(paged, 11, 12, paged.e), run(paged, 12, L, paged.e);
    // Poison every projection, then a step at position L that closes no window: nothing is pooled again.
    ASSERT_NE((L + 1) % rate, 0);
    ops().copy(arena().act(std::vector<float>(static_cast<size_t>(n_pages * page * Wv), NAN), {n_pages, page, 1, Wv}),
               paged.v);
    run(paged, L, L + 1, paged.e);
    const auto dense_e = arena().read(e1), rows_e = arena().read(paged.e);
    int written = 0;
    for (int pg = 0; pg < n_pages; ++pg)
      for (int r = 0; r < rows_pp; ++r) {
        const float* row = rows_e.data() + (pg * rows_pp + r) * W;
        for (int c = 0; c < W; ++c)
          if (c < ecol || c >= ecol + hd) EXPECT_EQ(row[c], 7.0f) << "page " << pg << " row " << r << " col " << c;
        written += row[ecol] != 7.0f;
      }
    EXPECT_EQ(written, M);
    for (int w = 0; w < M; ++w) {
      const int j = ((w + 1) * rate - 1) / page, r = w - j * page / rate;
      const float* row = rows_e.data() + (table[j] * rows_pp + r) * W + ecol;
      EXPECT_EQ(std::vector<float>(row, row + hd), std::vector<float>(dense_e.begin() + w * hd, dense_e.begin() + (w + 1) * hd))
          << "entry " << w;
    }
    // The indexer and the attention over the rows give what they give over the dense entries.
    const std::vector<int32_t> qpos = {9, 14};
    const BatchInfo qb = batch(qpos);
    const int nh = 2, T = 2;
    const auto q = random_vec(T * nh * hd, 43, -2, 2), wts = random_vec(T * nh, 44, 0.1f, 1.0f);
    IndexerParams ip{nh, hd, rate, 2, {}};
    ip.rope = p.rope;
    Tensor ids_dense = arena().alloc(DType::I32, {T, 2}), ids_paged = arena().alloc(DType::I32, {T, 2});
    ops().indexer_topk(ip, qb, arena().act(q, {T, nh * hd}), arena().act(wts, {T, nh}), e1, ids_dense);
    ip.key_col = ecol, ip.page_size = page;
    ops().indexer_topk(ip, qb, arena().act(q, {T, nh * hd}), arena().act(wts, {T, nh}), paged.e, ids_paged);
    EXPECT_EQ(arena().read_i32(ids_paged), arena().read_i32(ids_dense));
    // Attention reads columns [0, hd) of the rows: a view starting at the entry's column.
    CompressedAttentionParams ap;
    ap.n_head = nh, ap.head_dim = hd, ap.scale = 0.3f, ap.window = 3, ap.rate = rate, ap.rope = p.rope;
    ap.sinks = arena().f32({0.2f, -0.5f}, {nh});
    KvLayer keys{arena().act(random_vec(n_pages * page * hd, 45), {n_pages, page, 1, hd}), Tensor()};
    const std::vector<float> dense_rows = [&] {  // the dense entries laid out as rows of width hd
      std::vector<float> v(static_cast<size_t>(n_pages * rows_pp * hd), 0.0f);
      for (int w = 0; w < M; ++w) {
        const int j = ((w + 1) * rate - 1) / page, r = w - j * page / rate;
        std::copy_n(dense_e.begin() + w * hd, hd, v.begin() + (table[j] * rows_pp + r) * hd);
      }
      return v;
    }();
    Tensor o_dense = arena().alloc(ops().activation_dtype(), {T, nh * hd});
    Tensor o_paged = arena().alloc(ops().activation_dtype(), {T, nh * hd});
    for (bool sel : {false, true}) {
      const Tensor picks = sel ? ids_dense : Tensor();
      ops().attention_compressed(ap, qb, arena().act(q, {T, nh * hd}), keys, e1, picks, o_dense);
      ops().attention_compressed(ap, qb, arena().act(q, {T, nh * hd}), keys,
                                 arena().act(dense_rows, {n_pages, rows_pp, 1, hd}), picks, o_paged);
      EXPECT_EQ(arena().read(o_paged), arena().read(o_dense)) << (sel ? "indexer picks" : "all visible");
    }
  }
}

// Tail RoPE of head x (last n_rot dims, adjacent pairs) at position p in double.
void rope_tail_ref(std::vector<double>& x, int off, int hd, const std::vector<float>& inv, double p, double sign = 1) {
  const int n_rot = static_cast<int>(inv.size()) * 2;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double a = static_cast<double>(static_cast<float>(p) * inv[i]);
    double& x0 = x[off + hd - n_rot + 2 * i];
    double& x1 = x[off + hd - n_rot + 2 * i + 1];
    const double a0 = x0, a1 = x1;
    x0 = a0 * std::cos(a) - sign * a1 * std::sin(a);
    x1 = a1 * std::cos(a) + sign * a0 * std::sin(a);
  }
}

TEST_P(DeepseekV4OpsTest, IndexerKeepsTheBestVisibleEntries) {
  const int nh = 2, hd = 4, rate = 4, K = 3, M = 4;
  const std::vector<float> inv = {0.5f};
  IndexerParams p{nh, hd, rate, K, {}};
  p.rope.head_dim = hd, p.rope.n_rot = 2, p.rope.inv_freq = arena().f32(inv, {1});
  const std::vector<int32_t> pos = {2, 7, 15};  // sees 0, 2 and 4 entries
  const int T = 3;
  // Positive queries, keys and head weights: no ReLU zeros, so no ties and one right answer.
  const auto q = random_vec(T * nh * hd, 20, 0.1f, 1.0f), w = random_vec(T * nh, 21, 0.1f, 1.0f),
             keys = random_vec(M * hd, 22, 0.1f, 1.0f);
  BatchInfo b{T, 1, 4, 16, arena().i32(pos, {T}), arena().i32({0, 0, 0}, {T}), arena().i32({0, T}, {2}),
              arena().i32({0, 1, 2, 3}, {1, 4}), Tensor()};
  Tensor ids = arena().alloc(DType::I32, {T, K});
  ops().indexer_topk(p, b, arena().f32(q, {T, nh * hd}), arena().f32(w, {T, nh}), arena().f32(keys, {1, M, hd}), ids);
  const auto got = arena().read_i32(ids);
  for (int t = 0; t < T; ++t) {
    const int vis = (pos[t] + 1) / rate;
    std::vector<double> qr(q.begin() + t * nh * hd, q.begin() + (t + 1) * nh * hd), sc(vis);
    for (int h = 0; h < nh; ++h) rope_tail_ref(qr, h * hd, hd, inv, pos[t]);
    for (int e = 0; e < vis; ++e)
      for (int h = 0; h < nh; ++h) {
        double dot = 0;
        for (int d = 0; d < hd; ++d) dot += qr[h * hd + d] * keys[e * hd + d];
        sc[e] += std::max(dot, 0.0) / std::sqrt(hd) * w[t * nh + h] / std::sqrt(nh);
      }
    std::vector<int> order(vis);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return sc[a] > sc[c]; });
    std::vector<int> want(K, -1), picked(got.begin() + t * K, got.begin() + (t + 1) * K);
    for (int j = 0; j < std::min(K, vis); ++j) want[j] = order[j];
    std::sort(want.begin(), want.end());
    std::sort(picked.begin(), picked.end());
    EXPECT_EQ(picked, want) << "t " << t;
  }
}

TEST_P(DeepseekV4OpsTest, CompressedAttentionMatchesNaive) {
  const int nh = 2, hd = 4, window = 3, rate = 2, page = 4, L = 7, M = 3;
  const std::vector<float> inv = {0.7f};
  const auto kvs = random_vec(L * hd, 30), q = random_vec(nh * hd * 2, 31, -2, 2), ent = random_vec(M * hd, 32);
  const std::vector<float> sinks = {0.3f, -1.0f};
  CompressedAttentionParams p;
  p.n_head = nh, p.head_dim = hd, p.scale = 0.5f, p.window = window, p.rate = rate;
  p.rope.head_dim = hd, p.rope.n_rot = 2, p.rope.inv_freq = arena().f32(inv, {1});
  p.sinks = arena().f32(sinks, {nh});
  KvLayer kv{arena().alloc(ops().activation_dtype(), {2, page, 1, hd}), Tensor()};
  kv.v = kv.k;
  std::vector<int32_t> all(L);
  std::iota(all.begin(), all.end(), 0);
  BatchInfo wb{L, 1, 2, L, arena().i32(all, {L}), arena().i32(std::vector<int32_t>(L, 0), {L}),
               arena().i32({0, L}, {2}), arena().i32({1, 0}, {1, 2}), Tensor()};
  ops().kv_write(wb, arena().act(kvs, {L, hd}), arena().act(kvs, {L, hd}), kv);
  const std::vector<int32_t> pos = {4, 6};  // window keys 2..4 / 4..6; entries visible 2 / 3
  BatchInfo b{2, 1, 2, L, arena().i32(pos, {2}), arena().i32({0, 0}, {2}), arena().i32({0, 2}, {2}),
              arena().i32({1, 0}, {1, 2}), Tensor()};
  for (bool selected : {false, true}) {
    SCOPED_TRACE(selected ? "indexer picks" : "all visible entries");
    const std::vector<int32_t> sel = {1, -1, 2, 0};  // t0: entry 1; t1: entries 2 and 0
    Tensor out = arena().alloc(ops().activation_dtype(), {2, nh * hd});
    ops().attention_compressed(p, b, arena().act(q, {2, nh * hd}), kv, arena().act(ent, {1, M, hd}),
                               selected ? arena().i32(sel, {2, 2}) : Tensor(), out);
    std::vector<double> want;
    for (int t = 0; t < 2; ++t) {
      std::vector<std::vector<double>> keys;
      for (int j = pos[t] - window + 1; j <= pos[t]; ++j) {
        std::vector<double> k(kvs.begin() + j * hd, kvs.begin() + (j + 1) * hd);
        rope_tail_ref(k, 0, hd, inv, j);
        keys.push_back(k);
      }
      std::vector<int> es;
      if (selected) {
        for (int j = 0; j < 2; ++j)
          if (sel[t * 2 + j] >= 0) es.push_back(sel[t * 2 + j]);
      } else {
        for (int e = 0; e < (pos[t] + 1) / rate; ++e) es.push_back(e);
      }
      for (int e : es) keys.emplace_back(ent.begin() + e * hd, ent.begin() + (e + 1) * hd);
      for (int h = 0; h < nh; ++h) {
        std::vector<double> qh(q.begin() + t * nh * hd + h * hd, q.begin() + t * nh * hd + (h + 1) * hd);
        rope_tail_ref(qh, 0, hd, inv, pos[t]);
        std::vector<double> lg;
        double den = std::exp(sinks[h]);
        for (const auto& k : keys) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += qh[d] * k[d];
          lg.push_back(std::exp(dot * 0.5));
          den += lg.back();
        }
        std::vector<double> o(hd, 0.0);
        for (size_t i = 0; i < keys.size(); ++i)
          for (int d = 0; d < hd; ++d) o[d] += lg[i] / den * keys[i][d];
        rope_tail_ref(o, 0, hd, inv, pos[t], -1);
        want.insert(want.end(), o.begin(), o.end());
      }
    }
    EXPECT_LT(rel_l2(arena().read(out), want), tol(1e-5));
  }
}

FT_INSTANTIATE_OP_TEST(DeepseekV4OpsTest);

}  // namespace
}  // namespace ft::testing
