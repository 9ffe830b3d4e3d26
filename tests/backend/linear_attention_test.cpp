// ssm_conv, gated_delta_rule and sigmoid_mul (Gated DeltaNet's ops) against scalar references in
// double precision: two sequences in one batch, one starting at position 0 (zero state) and one
// continuing from a state left in its slot; and the same tokens split into two calls carry the
// state exactly as one call does.
#include "op_harness.h"

namespace ft::testing {
namespace {

class LinearAttentionTest : public OpTest {
 protected:
  /** Batch of sequences with `lens` tokens starting at `starts`, in `slots`. */
  BatchInfo batch(const std::vector<int32_t>& lens, const std::vector<int32_t>& starts,
                  const std::vector<int32_t>& slots) {
    std::vector<int32_t> pos, seq, st{0};
    for (size_t s = 0; s < lens.size(); ++s) {
      for (int32_t i = 0; i < lens[s]; ++i) pos.push_back(starts[s] + i), seq.push_back(static_cast<int32_t>(s));
      st.push_back(static_cast<int32_t>(pos.size()));
    }
    const auto T = static_cast<int32_t>(pos.size()), S = static_cast<int32_t>(lens.size());
    BatchInfo b{T, S, 1, 0, arena().i32(pos, {T}), arena().i32(seq, {T}), arena().i32(st, {S + 1}),
                arena().i32(std::vector<int32_t>(static_cast<size_t>(S), 0), {S, 1}), Tensor()};
    b.state_slots = arena().i32(slots, {S});
    return b;
  }
};

TEST_P(LinearAttentionTest, ConvCarriesItsWindowAcrossCalls) {
  const int64_t C = 24, K = 4, slots = 3;
  const std::vector<float> w = random_vec(C * K, 11), x = random_vec(9 * C, 12, -2, 2), s0 = random_vec((K - 1) * C, 13);
  // Slot 2 holds sequence 1's window (its inputs before position 5); sequence 0 starts fresh in slot 0.
  std::vector<float> state(static_cast<size_t>(slots * (K - 1) * C), 7.0f);  // slot 0's garbage must be ignored
  std::copy(s0.begin(), s0.end(), state.begin() + 2 * (K - 1) * C);
  Tensor st = arena().f32(state, {slots, K - 1, C}), wt = arena().f32(w, {C, K});
  Tensor out = arena().alloc(ops().activation_dtype(), {9, C});
  const Tensor xt = arena().act(x, {9, C});
  ops().ssm_conv(batch({5, 4}, {0, 5}, {0, 2}), xt, wt, st, out);
  std::vector<double> want(static_cast<size_t>(9 * C));
  for (int s = 0; s < 2; ++s) {
    const int64_t t0 = s == 0 ? 0 : 5, n = s == 0 ? 5 : 4;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t src = t - (K - 1) + j;  // index within the sequence's rows of this call
          const double xin = src >= 0 ? x[(t0 + src) * C + c] : s == 0 ? 0.0 : s0[(K - 1 + src) * C + c];
          acc += w[c * K + j] * xin;
        }
        want[(t0 + t) * C + c] = acc / (1 + std::exp(-acc));
      }
  }
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
  // The slots now hold each sequence's last K-1 inputs exactly, as the backend holds them (x itself
  // on the CPU, x rounded to its bf16 activations on a device backend).
  const std::vector<float> after = arena().read(st), xin = arena().read(xt);
  for (int64_t j = 0; j < K - 1; ++j)
    for (int64_t c = 0; c < C; ++c) {
      EXPECT_EQ(after[j * C + c], xin[(5 - (K - 1) + j) * C + c]);
      EXPECT_EQ(after[(2 * (K - 1) + j) * C + c], xin[(9 - (K - 1) + j) * C + c]);
    }
}

/** Reference gated delta rule of one sequence and value head: rows [t0, t0 + n) of the inputs. */
void delta_reference(const std::vector<float>& qkv, const std::vector<float>& a, const std::vector<float>& b,
                     const std::vector<float>& a_log, const std::vector<float>& dt, int64_t Hk, int64_t Hv, int64_t dk,
                     int64_t dv, int64_t h, int64_t t0, int64_t n, std::vector<double>& S, std::vector<double>& out,
                     bool tiled = false) {
  const int64_t W = 2 * Hk * dk + Hv * dv, kh = tiled ? h % Hk : h / (Hv / Hk);
  for (int64_t t = t0; t < t0 + n; ++t) {
    std::vector<double> q(dk), k(dk);
    double qq = 0, kk = 0;
    for (int64_t i = 0; i < dk; ++i) {
      q[i] = qkv[t * W + kh * dk + i], k[i] = qkv[t * W + Hk * dk + kh * dk + i];
      qq += q[i] * q[i], kk += k[i] * k[i];
    }
    for (int64_t i = 0; i < dk; ++i) q[i] /= std::sqrt(qq + 1e-6) * std::sqrt(static_cast<double>(dk)), k[i] /= std::sqrt(kk + 1e-6);
    const double x = a[t * Hv + h] + dt[h];
    const double g = -std::exp(static_cast<double>(a_log[h])) * std::log1p(std::exp(x));
    const double beta = 1 / (1 + std::exp(-static_cast<double>(b[t * Hv + h])));
    for (double& v : S) v *= std::exp(g);
    for (int64_t j = 0; j < dv; ++j) {
      double mem = 0;
      for (int64_t i = 0; i < dk; ++i) mem += S[i * dv + j] * k[i];
      const double u = beta * (qkv[t * W + 2 * Hk * dk + h * dv + j] - mem);
      for (int64_t i = 0; i < dk; ++i) S[i * dv + j] += k[i] * u;
    }
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t i = 0; i < dk; ++i) o += S[i * dv + j] * q[i];
      out[t * Hv * dv + h * dv + j] = o;
    }
  }
}

TEST_P(LinearAttentionTest, GatedDeltaRuleMatchesTheRecurrence) {
  const int64_t Hk = 2, Hv = 4, dk = 16, dv = 8, W = 2 * Hk * dk + Hv * dv, T = 11, slots = 2;
  const std::vector<float> qkv = random_vec(T * W, 21, -1, 1), a = random_vec(T * Hv, 22, -2, 2),
                           b = random_vec(T * Hv, 23, -2, 2), a_log = random_vec(Hv, 24, -1, 1.5f),
                           dt = random_vec(Hv, 25, -0.5f, 0.5f), s1 = random_vec(Hv * dk * dv, 26, -0.3f, 0.3f);
  std::vector<float> state(static_cast<size_t>(slots * Hv * dk * dv), 5.0f);  // slot 1: garbage, sequence 0 starts at 0
  std::copy(s1.begin(), s1.end(), state.begin());                              // slot 0: sequence 1's state
  GatedDeltaParams p;
  p.n_k_heads = Hk, p.n_v_heads = Hv, p.k_head_dim = dk, p.v_head_dim = dv;
  p.a_log = arena().f32(a_log, {Hv});
  p.dt_bias = arena().f32(dt, {Hv});
  Tensor st = arena().f32(state, {slots, Hv, dk, dv});
  Tensor out = arena().alloc(ops().activation_dtype(), {T, Hv * dv});
  // Sequence 0: rows 0..6 at positions 0..6 in slot 1; sequence 1: rows 7..10 at positions 30.. in slot 0.
  ops().gated_delta_rule(p, batch({7, 4}, {0, 30}, {1, 0}), arena().act(qkv, {T, W}), arena().act(a, {T, Hv}),
                         arena().act(b, {T, Hv}), st, out);
  std::vector<double> want(static_cast<size_t>(T * Hv * dv)), final_state(state.size());
  for (int64_t h = 0; h < Hv; ++h) {
    std::vector<double> S0(static_cast<size_t>(dk * dv), 0.0), S1(s1.begin() + h * dk * dv, s1.begin() + (h + 1) * dk * dv);
    delta_reference(qkv, a, b, a_log, dt, Hk, Hv, dk, dv, h, 0, 7, S0, want);
    delta_reference(qkv, a, b, a_log, dt, Hk, Hv, dk, dv, h, 7, 4, S1, want);
    std::copy(S1.begin(), S1.end(), final_state.begin() + h * dk * dv);
    std::copy(S0.begin(), S0.end(), final_state.begin() + (Hv + h) * dk * dv);
  }
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
  EXPECT_LT(rel_l2(arena().read(st), final_state), tol());

  // The same sequence 0 split into calls of 3 and 4 tokens ends in the same output and state.
  Tensor st2 = arena().f32(state, {slots, Hv, dk, dv});
  Tensor out2 = arena().alloc(ops().activation_dtype(), {T, Hv * dv});
  ops().gated_delta_rule(p, batch({3}, {0}, {1}), arena().act(std::vector<float>(qkv.begin(), qkv.begin() + 3 * W), {3, W}),
                         arena().act(std::vector<float>(a.begin(), a.begin() + 3 * Hv), {3, Hv}),
                         arena().act(std::vector<float>(b.begin(), b.begin() + 3 * Hv), {3, Hv}), st2, out2.slice(0, 3));
  ops().gated_delta_rule(p, batch({4}, {3}, {1}),
                         arena().act(std::vector<float>(qkv.begin() + 3 * W, qkv.begin() + 7 * W), {4, W}),
                         arena().act(std::vector<float>(a.begin() + 3 * Hv, a.begin() + 7 * Hv), {4, Hv}),
                         arena().act(std::vector<float>(b.begin() + 3 * Hv, b.begin() + 7 * Hv), {4, Hv}), st2,
                         out2.slice(3, 4));
  const std::vector<float> one = arena().read(out), split = arena().read(out2);
  const std::vector<double> one_rows(one.begin(), one.begin() + 7 * Hv * dv);
  EXPECT_LT(rel_l2(std::vector<float>(split.begin(), split.begin() + 7 * Hv * dv), one_rows), tol());
}

TEST_P(LinearAttentionTest, TiledValueHeadsReadKeyHeadModuloTheirCount) {
  // llama.cpp's qwen35 order: value head h reads key head h % Hk (grouped: h / (Hv / Hk)). Key head
  // dim 16: the smallest the CUDA kernels have.
  const int64_t Hk = 2, Hv = 6, dk = 16, dv = 4, W = 2 * Hk * dk + Hv * dv, T = 5;
  const std::vector<float> qkv = random_vec(T * W, 41), a = random_vec(T * Hv, 42), b = random_vec(T * Hv, 43),
                           a_log = random_vec(Hv, 44), dt = random_vec(Hv, 45);
  GatedDeltaParams p;
  p.n_k_heads = Hk, p.n_v_heads = Hv, p.k_head_dim = dk, p.v_head_dim = dv, p.v_tiled = true;
  p.a_log = arena().f32(a_log, {Hv});
  p.dt_bias = arena().f32(dt, {Hv});
  Tensor st = arena().f32(std::vector<float>(static_cast<size_t>(Hv * dk * dv)), {1, Hv, dk, dv});
  Tensor out = arena().alloc(ops().activation_dtype(), {T, Hv * dv});
  ops().gated_delta_rule(p, batch({5}, {0}, {0}), arena().act(qkv, {T, W}), arena().act(a, {T, Hv}),
                         arena().act(b, {T, Hv}), st, out);
  std::vector<double> want(static_cast<size_t>(T * Hv * dv));
  for (int64_t h = 0; h < Hv; ++h) {
    std::vector<double> S(static_cast<size_t>(dk * dv), 0.0);
    delta_reference(qkv, a, b, a_log, dt, Hk, Hv, dk, dv, h, 0, T, S, want, true);
  }
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
}

TEST_P(LinearAttentionTest, SigmoidMulGates) {
  const std::vector<float> g = random_vec(60, 31, -4, 4), x = random_vec(60, 32);
  Tensor out = arena().alloc(ops().activation_dtype(), {5, 12});
  ops().sigmoid_mul(arena().act(g, {5, 12}), arena().act(x, {5, 12}), out);
  std::vector<double> want(60);
  for (size_t i = 0; i < 60; ++i) want[i] = x[i] / (1 + std::exp(-static_cast<double>(g[i])));
  EXPECT_LT(rel_l2(arena().read(out), want), tol());
}

TEST_P(LinearAttentionTest, BadShapesAndSlotsAreRefused) {
  const int64_t C = 8, K = 4;
  Tensor st = arena().f32(std::vector<float>(2 * (K - 1) * C), {2, K - 1, C});
  Tensor out = arena().alloc(ops().activation_dtype(), {2, C});
  EXPECT_THROW(ops().ssm_conv(batch({2}, {0}, {0}), arena().act(random_vec(2 * C, 1), {2, C}),
                              arena().f32(random_vec(C * 3, 2), {C, 3}), st, out),
               Error);  // a 3-tap w against a 4-tap state
  if (GetParam() == "cpu")
    EXPECT_THROW(ops().ssm_conv(batch({2}, {0}, {5}), arena().act(random_vec(2 * C, 1), {2, C}),
                                arena().f32(random_vec(C * K, 2), {C, K}), st, out),
                 Error);  // slot 5 of 2
}

FT_INSTANTIATE_OP_TEST(LinearAttentionTest);

}  // namespace
}  // namespace ft::testing
