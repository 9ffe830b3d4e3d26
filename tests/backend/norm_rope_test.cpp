// rms_norm (plain, weight offset, per-head), add_rms_norm and rope (normal/NeoX, partial rotary) against double references.
#include "op_harness.h"

namespace ft::testing {
namespace {

class NormRopeTest : public OpTest {};

std::vector<double> ref_rms(const std::vector<float>& x, const std::vector<float>& w, int64_t R, int64_t D, double eps,
                            double off) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += static_cast<double>(x[r * D + i]) * x[r * D + i];
    const double inv = 1.0 / std::sqrt(ss / D + eps);
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = x[r * D + i] * inv * (w[i] + off);
  }
  return y;
}

TEST_P(NormRopeTest, RmsNorm) {
  for (DType wd : {DType::F32, DType::BF16}) {
    for (float off : {0.0f, 1.0f}) {
      const int64_t R = 37, D = 64;
      HostWeight w = make_weight(wd, {D}, 11);
      std::vector<float> x = random_vec(static_cast<size_t>(R * D), 12, -3.0f, 3.0f);
      Tensor xt = arena().act(x, {R, D});
      Tensor out = arena().alloc(ops().activation_dtype(), {R, D});
      ops().rms_norm({1e-5f, off}, xt, arena().weight(w), out);
      EXPECT_LT(rel_l2(arena().read(out), ref_rms(x, w.values, R, D, 1e-5, off)), tol());
      // in place, per head: [T, 4 * 16] viewed as [T * 4, 16]
      HostWeight wh = make_weight(wd, {16}, 13);
      ops().rms_norm({1e-6f, off}, xt.reshape({R * 4, 16}), arena().weight(wh), xt.reshape({R * 4, 16}));
      EXPECT_LT(rel_l2(arena().read(xt), ref_rms(x, wh.values, R * 4, 16, 1e-6, off)), tol());
    }
  }
}

TEST_P(NormRopeTest, AddRmsNorm) {
  const int64_t R = 5, D = 300;
  HostWeight w = make_weight(DType::F32, {D}, 21);
  std::vector<float> x = random_vec(static_cast<size_t>(R * D), 22, -3.0f, 3.0f);
  const std::vector<float> r = random_vec(static_cast<size_t>(R * D), 23, -1.0f, 1.0f);
  Tensor xt = arena().act(x, {R, D}), rt = arena().act(r, {R, D});
  Tensor out = arena().alloc(ops().activation_dtype(), {R, D});
  ops().add_rms_norm({1e-5f, 0.0f}, xt, rt, arena().weight(w), out);
  std::vector<double> sum(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] += r[i], sum[i] = x[i];
  EXPECT_LT(rel_l2(arena().read(xt), sum), tol());  // x holds the residual sum
  EXPECT_LT(rel_l2(arena().read(out), ref_rms(x, w.values, R, D, 1e-5, 0.0)), tol());
}

std::vector<double> ref_rope(const std::vector<float>& x, const std::vector<int32_t>& pos,
                             const std::vector<float>& inv, int64_t T, int64_t n_head, int64_t hd, int64_t n_rot,
                             RopeMode mode) {
  std::vector<double> y(x.begin(), x.end());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < n_head; ++h)
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double a = static_cast<double>(static_cast<float>(pos[t]) * inv[i]);
        const int64_t i0 = mode == RopeMode::kNormal ? 2 * i : i, i1 = mode == RopeMode::kNormal ? 2 * i + 1 : i + n_rot / 2;
        const int64_t base = t * n_head * hd + h * hd;
        const double u = x[base + i0], v = x[base + i1];
        y[base + i0] = u * std::cos(a) - v * std::sin(a);
        y[base + i1] = v * std::cos(a) + u * std::sin(a);
      }
  return y;
}

TEST_P(NormRopeTest, RopeModesAndPartialRotary) {
  const int64_t T = 20, n_head = 3, hd = 16;
  std::vector<int32_t> pos(T);
  for (int64_t t = 0; t < T; ++t) pos[t] = static_cast<int32_t>(t * 7 % 131);
  for (RopeMode mode : {RopeMode::kNormal, RopeMode::kNeox}) {
    for (int64_t n_rot : {16, 8}) {
      std::vector<float> inv(static_cast<size_t>(n_rot / 2));
      for (int64_t i = 0; i < n_rot / 2; ++i) inv[i] = static_cast<float>(std::pow(10000.0, -2.0 * i / n_rot));
      std::vector<float> x = random_vec(static_cast<size_t>(T * n_head * hd), 21);
      Tensor xt = arena().act(x, {T, n_head * hd});
      RopeParams p{mode, static_cast<int32_t>(hd), static_cast<int32_t>(n_rot), arena().f32(inv, {n_rot / 2}), 1.0f};
      ops().rope(p, xt, arena().i32(pos, {T}));
      EXPECT_LT(rel_l2(arena().read(xt), ref_rope(x, pos, inv, T, n_head, hd, n_rot, mode)), tol() * 5)
          << "mode " << static_cast<int>(mode) << " n_rot " << n_rot;
    }
  }
}

FT_INSTANTIATE_OP_TEST(NormRopeTest);

}  // namespace
}  // namespace ft::testing
