// moe_route (softmax/sigmoid, with and without top-k renormalisation) and moe_experts (SwiGLU
// experts, skipped ids, accumulate; gpt-oss's clamped SwiGLU with per-expert biases) against scalar
// references.
#include <algorithm>
#include <cmath>

#include "op_harness.h"

namespace ft::testing {
namespace {

class MoeTest : public OpTest {};

TEST_P(MoeTest, MaskRowsRoutesPaddingNowhere) {
  const int64_t T = 5, k = 3;
  std::vector<int32_t> ids_v(T * k);
  for (size_t i = 0; i < ids_v.size(); ++i) ids_v[i] = static_cast<int32_t>(i % 7);
  for (int32_t n : {5, 3, 0, 9, -2}) {
    Tensor ids = arena().i32(ids_v, {T, k});
    ops().moe_mask_rows(arena().i32({n}, {1}), ids);
    std::vector<int32_t> want = ids_v;
    for (int64_t i = std::clamp<int64_t>(n, 0, T) * k; i < T * k; ++i) want[i] = -1;
    EXPECT_EQ(arena().read_i32(ids), want) << "n_valid " << n;
  }
}

TEST_P(MoeTest, RouterScoringAndRenormalisation) {
  const int64_t T = 7, E = 8;
  const int32_t k = 3;
  std::vector<float> logits = random_vec(T * E, 1, -3, 3);
  for (RouterScoring sc : {RouterScoring::kSoftmax, RouterScoring::kSigmoid}) {
    for (bool norm : {false, true}) {
      Tensor ids = arena().alloc(DType::I32, {T, k}), w = arena().alloc(DType::F32, {T, k});
      ops().moe_route({k, sc, norm, 2.0f}, arena().f32(logits, {T, E}), ids, w);
      std::vector<int32_t> gi = arena().read_i32(ids);
      std::vector<float> gw = arena().read(w);
      std::vector<double> want;
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(E);
        double mx = -1e30, sum = 0;
        for (int64_t e = 0; e < E; ++e) mx = std::max<double>(mx, logits[t * E + e]);
        for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[t * E + e] - mx);
        for (int64_t e = 0; e < E; ++e)
          s[e] = sc == RouterScoring::kSoftmax ? std::exp(logits[t * E + e] - mx) / sum
                                               : 1.0 / (1.0 + std::exp(-static_cast<double>(logits[t * E + e])));
        std::vector<int32_t> order(E);
        for (int32_t e = 0; e < E; ++e) order[e] = e;
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
        double sel = 0;
        for (int32_t j = 0; j < k; ++j) sel += s[order[j]];
        for (int32_t j = 0; j < k; ++j) {
          EXPECT_EQ(gi[t * k + j], order[j]);
          want.push_back(s[order[j]] * 2.0 / (norm ? sel : 1.0));
        }
      }
      EXPECT_LT(rel_l2(gw, want), tol()) << "scoring " << static_cast<int>(sc) << " norm " << norm;
    }
  }
}

TEST_P(MoeTest, NonFiniteRowRoutesToValidExpertsWithZeroWeight) {
  // A diverged token (NaN or inf router logits) must not hand out-of-range or repeated ids to the
  // expert caches and sorts the batch shares, nor change the other rows (issue 40).
  const int64_t T = 5, E = 16;
  const int32_t k = 4;
  const std::vector<float> clean = random_vec(T * E, 7, -3, 3);
  std::vector<float> dirty = clean;
  dirty[1 * E + 5] = NAN;
  dirty[3 * E + 0] = INFINITY;
  dirty[4 * E + 15] = -INFINITY;
  for (RouterScoring sc : {RouterScoring::kSoftmax, RouterScoring::kSigmoid}) {
    RouterParams p{k, sc, true, 1.0f};
    auto route = [&](const std::vector<float>& l) {
      Tensor ids = arena().alloc(DType::I32, {T, k}), w = arena().alloc(DType::F32, {T, k});
      ops().moe_route(p, arena().f32(l, {T, E}), ids, w);
      return std::make_pair(arena().read_i32(ids), arena().read(w));
    };
    const auto [ci, cw] = route(clean);
    const auto [di, dw] = route(dirty);
    for (int64_t t = 0; t < T; ++t) {
      const bool bad = t == 1 || t == 3 || t == 4;
      for (int32_t j = 0; j < k; ++j) {
        if (bad) {
          EXPECT_EQ(di[t * k + j], j) << "row " << t;
          EXPECT_EQ(dw[t * k + j], 0.0f) << "row " << t;
        } else {  // bit-identical to the clean batch
          EXPECT_EQ(di[t * k + j], ci[t * k + j]) << "row " << t;
          EXPECT_EQ(dw[t * k + j], cw[t * k + j]) << "row " << t;
        }
      }
    }
  }
}

TEST_P(MoeTest, GroupLimitedRoutingWithSelectionBias) {
  // DeepSeek-V3's router: sigmoid scores; selection by score + bias within the topk_group groups
  // whose two best (biased) scores sum highest; weights the unbiased scores, renormalised, scaled.
  const int64_t T = 9, E = 16, n_group = 4, per = E / n_group, topk_group = 2;
  const int32_t k = 3;
  std::vector<float> logits = random_vec(T * E, 8, -3, 3), bias = random_vec(E, 9, -0.5f, 0.5f);
  for (bool grouped : {false, true}) {
    RouterParams p{k, RouterScoring::kSigmoid, true, 2.5f};
    if (grouped) p.n_group = static_cast<int32_t>(n_group), p.topk_group = static_cast<int32_t>(topk_group);
    p.bias = arena().f32(bias, {E});
    Tensor ids = arena().alloc(DType::I32, {T, k}), w = arena().alloc(DType::F32, {T, k});
    ops().moe_route(p, arena().f32(logits, {T, E}), ids, w);
    const std::vector<int32_t> gi = arena().read_i32(ids);
    std::vector<double> want;
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> s(E), c(E);
      for (int64_t e = 0; e < E; ++e) {
        s[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[t * E + e])));
        c[e] = s[e] + bias[e];
      }
      std::vector<bool> eligible(E, true);
      if (grouped) {
        std::vector<std::pair<double, int64_t>> gs;
        for (int64_t g = 0; g < n_group; ++g) {
          std::vector<double> in(c.begin() + g * per, c.begin() + (g + 1) * per);
          std::sort(in.rbegin(), in.rend());
          gs.push_back({in[0] + in[1], g});
        }
        std::stable_sort(gs.begin(), gs.end(), [](auto a, auto b) { return a.first > b.first; });
        for (int64_t e = 0; e < E; ++e) eligible[e] = false;
        for (int64_t i = 0; i < topk_group; ++i)
          for (int64_t e = gs[i].second * per; e < (gs[i].second + 1) * per; ++e) eligible[e] = true;
      }
      std::vector<int32_t> order;
      for (int32_t e = 0; e < E; ++e)
        if (eligible[e]) order.push_back(e);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return c[a] > c[b]; });
      double sel = 0;
      for (int32_t j = 0; j < k; ++j) sel += s[order[j]];
      for (int32_t j = 0; j < k; ++j) {
        EXPECT_EQ(gi[t * k + j], order[j]) << "token " << t << " grouped " << grouped;
        want.push_back(s[order[j]] / sel * 2.5);
      }
    }
    EXPECT_LT(rel_l2(arena().read(w), want), tol()) << "grouped " << grouped;
  }
}

TEST_P(MoeTest, BadGroupsOrBiasAreRejected) {
  const int64_t T = 2, E = 12;
  Tensor logits = arena().f32(random_vec(T * E, 1), {T, E});
  Tensor ids = arena().alloc(DType::I32, {T, 2}), w = arena().alloc(DType::F32, {T, 2});
  RouterParams p{2, RouterScoring::kSigmoid, true, 1.0f, 5, 1};  // 12 experts do not split into 5 groups
  EXPECT_THROW(ops().moe_route(p, logits, ids, w), Error);
  p.n_group = 1;
  p.bias = arena().f32(random_vec(E - 1, 2), {E - 1});  // one short
  EXPECT_THROW(ops().moe_route(p, logits, ids, w), Error);
}

TEST_P(MoeTest, ExpertsWeightedSum) {
  const int64_t T = 11, H = 32, F = 24, E = 6, k = 2;
  std::vector<HostWeight> g, u, d;
  ExpertBank bank;
  for (int64_t e = 0; e < E; ++e) {
    g.push_back(make_weight(DType::BF16, {F, H}, 10 + e));
    u.push_back(make_weight(DType::BF16, {F, H}, 20 + e));
    d.push_back(make_weight(DType::F32, {H, F}, 30 + e));
    bank.gate.push_back(arena().weight(g.back()));
    bank.up.push_back(arena().weight(u.back()));
    bank.down.push_back(arena().weight(d.back()));
  }
  std::vector<float> x = random_vec(T * H, 2);
  std::vector<int32_t> ids(T * k);
  std::vector<float> w = random_vec(T * k, 3, 0, 1);
  std::mt19937 rng(5);
  for (int64_t t = 0; t < T; ++t) {
    ids[t * k] = static_cast<int32_t>(rng() % E);
    ids[t * k + 1] = static_cast<int32_t>((ids[t * k] + 1 + rng() % (E - 1)) % E);
  }
  ids[3] = -1;  // token 1, slot 1: computed elsewhere
  std::vector<float> base = random_vec(T * H, 4);
  for (bool acc : {false, true}) {
    Tensor out = arena().act(base, {T, H});
    ops().moe_experts({acc}, arena().act(x, {T, H}), arena().i32(ids, {T, k}), arena().f32(w, {T, k}), bank, out);
    std::vector<double> want(T * H);
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < H; ++i) want[t * H + i] = acc ? base[t * H + i] : 0.0;
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[t * k + j];
        if (e < 0) continue;
        std::vector<double> a(F);
        for (int64_t f = 0; f < F; ++f) {
          double gs = 0, us = 0;
          for (int64_t i = 0; i < H; ++i) {
            gs += static_cast<double>(x[t * H + i]) * g[e].values[f * H + i];
            us += static_cast<double>(x[t * H + i]) * u[e].values[f * H + i];
          }
          a[f] = gs / (1.0 + std::exp(-gs)) * us;
        }
        for (int64_t i = 0; i < H; ++i) {
          double s = 0;
          for (int64_t f = 0; f < F; ++f) s += a[f] * d[e].values[i * F + f];
          want[t * H + i] += w[t * k + j] * s;
        }
      }
    }
    EXPECT_LT(rel_l2(arena().read(out), want), tol()) << "accumulate " << acc;
  }
  Tensor out = arena().alloc(ops().activation_dtype(), {T, H});
  std::vector<int32_t> bad = ids;
  bad[0] = static_cast<int32_t>(E);
  if (GetParam() == "cpu") {
    EXPECT_THROW(ops().moe_experts({}, arena().act(x, {T, H}), arena().i32(bad, {T, k}), arena().f32(w, {T, k}), bank,
                                   out),
                 Error);
  }
}

TEST_P(MoeTest, ClampedSwigluExpertsWithBiases) {
  // gpt-oss: gu = W x + b; g = min(gu_g, limit), u = clamp(gu_u, -limit, limit);
  // h = (u + 1) g sigmoid(alpha g); y = W_d h + b_d. Inputs scaled so that some values clamp.
  const int64_t H = 32, F = 24, E = 5, k = 2;
  const float alpha = 1.702f, limit = 1.5f;
  std::vector<HostWeight> g, u, d;
  ExpertBank bank;
  bank.glu = ExpertGlu::kSwigluOai, bank.glu_alpha = alpha, bank.glu_limit = limit;
  for (int64_t e = 0; e < E; ++e) {
    g.push_back(make_weight(DType::BF16, {F, H}, 40 + e, 0.6f));
    u.push_back(make_weight(DType::F32, {F, H}, 50 + e, 0.6f));
    d.push_back(make_weight(DType::BF16, {H, F}, 60 + e));
    bank.gate.push_back(arena().weight(g.back()));
    bank.up.push_back(arena().weight(u.back()));
    bank.down.push_back(arena().weight(d.back()));
  }
  const std::vector<float> gb = random_vec(E * F, 70), ub = random_vec(E * F, 71), db = random_vec(E * H, 72);
  bank.gate_bias = arena().f32(gb, {E, F}), bank.up_bias = arena().f32(ub, {E, F}), bank.down_bias = arena().f32(db, {E, H});
  int64_t clamped = 0;
  for (int64_t T : {1, 9}) {  // one token: the fused stored-row dot; more: decoded tiles
    std::vector<float> x = random_vec(T * H, 3 + T, -2, 2), w = random_vec(T * k, 4 + T, 0, 1);
    std::vector<int32_t> ids(T * k);
    for (int64_t t = 0; t < T; ++t) ids[t * k] = static_cast<int32_t>(t % E), ids[t * k + 1] = static_cast<int32_t>((t + 2) % E);
    Tensor out = arena().alloc(ops().activation_dtype(), {T, H});
    ops().moe_experts({}, arena().act(x, {T, H}), arena().i32(ids, {T, k}), arena().f32(w, {T, k}), bank, out);
    std::vector<double> want(T * H, 0.0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = ids[t * k + j];
        std::vector<double> hv(F);
        for (int64_t f = 0; f < F; ++f) {
          double gs = gb[e * F + f], us = ub[e * F + f];
          for (int64_t i = 0; i < H; ++i) {
            gs += static_cast<double>(x[t * H + i]) * g[e].values[f * H + i];
            us += static_cast<double>(x[t * H + i]) * u[e].values[f * H + i];
          }
          clamped += gs > limit || std::abs(us) > limit;
          gs = std::min<double>(gs, limit), us = std::clamp<double>(us, -limit, limit);
          hv[f] = (us + 1.0) * gs / (1.0 + std::exp(-alpha * gs));
        }
        for (int64_t i = 0; i < H; ++i) {
          double y = db[e * H + i];
          for (int64_t f = 0; f < F; ++f) y += hv[f] * d[e].values[i * F + f];
          want[t * H + i] += w[t * k + j] * y;
        }
      }
    EXPECT_LT(rel_l2(arena().read(out), want), tol()) << "T " << T;
  }
  EXPECT_GT(clamped, 0) << "no value reached the clamp: the test does not cover it";
  if (GetParam() == "cpu") {  // a bias of the wrong width is named
    ExpertBank bad = bank;
    bad.up_bias = arena().f32(random_vec(E * (F - 1), 73), {E, F - 1});
    std::vector<float> x = random_vec(H, 5);
    try {
      ops().moe_experts({}, arena().act(x, {1, H}), arena().i32({0, 1}, {1, k}), arena().f32({0.5f, 0.5f}, {1, k}), bad,
                        arena().alloc(ops().activation_dtype(), {1, H}));
      ADD_FAILURE() << "a [E, F - 1] up_bias was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("up_bias"), std::string::npos) << e.what();
    }
  }
}

FT_INSTANTIATE_OP_TEST(MoeTest);

}  // namespace
}  // namespace ft::testing
