// swiglu, add, scale, sigmoid, add_scaled_rows, embedding, softmax and topk against scalar references.
#include "op_harness.h"

namespace ft::testing {
namespace {

class ElementwiseTest : public OpTest {};

TEST_P(ElementwiseTest, ActivationsAndAdds) {
  const int64_t T = 9, F = 40;
  std::vector<float> g = random_vec(T * F, 1, -4, 4), u = random_vec(T * F, 2), s = random_vec(T, 3);
  Tensor gt = arena().act(g, {T, F}), ut = arena().act(u, {T, F}), out = arena().alloc(ops().activation_dtype(), {T, F});
  std::vector<double> want(g.size());

  ops().swiglu(gt, ut, out);
  for (size_t i = 0; i < g.size(); ++i) want[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  EXPECT_LT(rel_l2(arena().read(out), want), tol());

  ops().add(gt, ut, out);
  for (size_t i = 0; i < g.size(); ++i) want[i] = static_cast<double>(g[i]) + u[i];
  EXPECT_LT(rel_l2(arena().read(out), want), tol());

  ops().scale(gt, -0.25f, out);
  for (size_t i = 0; i < g.size(); ++i) want[i] = -0.25 * g[i];
  EXPECT_LT(rel_l2(arena().read(out), want), tol());

  ops().sigmoid(gt, out);
  for (size_t i = 0; i < g.size(); ++i) want[i] = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
  EXPECT_LT(rel_l2(arena().read(out), want), tol());

  Tensor y = arena().act(u, {T, F});
  ops().add_scaled_rows(gt, arena().f32(s, {T, 1}), 0.5f, y);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < F; ++i) want[t * F + i] = u[t * F + i] + 0.5 * s[t] * g[t * F + i];
  EXPECT_LT(rel_l2(arena().read(y), want), tol());
}

TEST_P(ElementwiseTest, EmbeddingGathersRowsOfAnyDtype) {
  for (DType dt : {DType::F32, DType::BF16, DType::Q8_0}) {
    HostWeight table = make_weight(dt, {50, 64}, 5);
    std::vector<int32_t> ids = {3, 0, 49, 3, 17};
    Tensor out = arena().alloc(ops().activation_dtype(), {5, 64});
    ops().embedding(arena().weight(table), arena().i32(ids, {5}), out);
    std::vector<double> want;
    for (int32_t id : ids)
      for (int64_t i = 0; i < 64; ++i) want.push_back(table.values[id * 64 + i]);
    EXPECT_LT(rel_l2(arena().read(out), want), tol()) << dtype_name(dt);
  }
  if (GetParam() == "cpu") {
    HostWeight table = make_weight(DType::F32, {10, 64}, 5);
    Tensor out = arena().alloc(ops().activation_dtype(), {1, 64});
    EXPECT_THROW(ops().embedding(arena().weight(table), arena().i32({10}, {1}), out), Error);
  }
}

TEST_P(ElementwiseTest, SoftmaxAndTopk) {
  const int64_t R = 6, C = 33;
  std::vector<float> x = random_vec(R * C, 9, -5, 5);
  x[5] = x[7];  // a tie in row 0
  Tensor xt = arena().f32(x, {R, C}), out = arena().alloc(DType::F32, {R, C});
  ops().softmax(xt, out);
  std::vector<double> want(x.size());
  for (int64_t r = 0; r < R; ++r) {
    double mx = -1e30, sum = 0;
    for (int64_t i = 0; i < C; ++i) mx = std::max<double>(mx, x[r * C + i]);
    for (int64_t i = 0; i < C; ++i) sum += std::exp(x[r * C + i] - mx);
    for (int64_t i = 0; i < C; ++i) want[r * C + i] = std::exp(x[r * C + i] - mx) / sum;
  }
  EXPECT_LT(rel_l2(arena().read(out), want), tol());

  const int32_t k = 5;
  Tensor ids = arena().alloc(DType::I32, {R, k}), vals = arena().alloc(DType::F32, {R, k});
  ops().topk(xt, k, ids, vals);
  std::vector<int32_t> got = arena().read_i32(ids);
  std::vector<float> got_v = arena().read(vals);
  for (int64_t r = 0; r < R; ++r) {
    std::vector<int32_t> order(C);
    for (int32_t i = 0; i < C; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[r * C + a] > x[r * C + b]; });
    for (int32_t j = 0; j < k; ++j) {
      EXPECT_EQ(got[r * k + j], order[j]) << "row " << r << " rank " << j;
      EXPECT_EQ(got_v[r * k + j], x[r * C + order[j]]);
    }
  }
  EXPECT_THROW(ops().topk(xt, C + 1, arena().alloc(DType::I32, {R, C + 1}), arena().alloc(DType::F32, {R, C + 1})),
               Error);
}

FT_INSTANTIATE_OP_TEST(ElementwiseTest);

}  // namespace
}  // namespace ft::testing
