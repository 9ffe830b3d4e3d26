// hc_pre: DeepSeek-V4 hyper-connection weights (sigmoid pre / post, Sinkhorn-normalised comb) and the
// collapse of the n residual streams into one block input (CPU backend; semantics in ops.h, after
// transformers' DeepseekV4HyperConnection and DeepseekV4HyperHead).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {
namespace {

float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

void CpuOps::hc_pre(const HyperConnParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                    const Tensor& scale, Tensor collapsed, Tensor post, Tensor comb) {
  const char* op = "hc_pre";
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"streams", &streams}, {"mixes", &mixes},
                                {"base", &base}, {"scale", &scale}, {"collapsed", &collapsed}})
    cpu::check_dtype(op, name, *t, DType::F32);
  const int64_t n = p.n_streams, T = streams.rows(), H = collapsed.cols();
  const bool head = post.empty();
  const int64_t M = head ? n : (2 + n) * n;
  if (n < 1 || (!head && p.sinkhorn_iters < 1))
    fail(ErrorCode::kInvalidArgument, "{}: n_streams {} and sinkhorn_iters {} must be >= 1", op, n, p.sinkhorn_iters);
  if (!streams.has_shape({T, n * H}) || !collapsed.has_shape({T, H}) || !mixes.has_shape({T, M}) ||
      base.numel() != M || scale.numel() != (head ? 1 : 3))
    fail(ErrorCode::kInvalidArgument, "{}: streams {}, mixes {}, base {}, scale {}, collapsed {} do not fit {} streams",
         op, streams.str(), mixes.str(), base.str(), scale.str(), collapsed.str(), n);
  if (!head) {
    cpu::check_dtype(op, "post", post, DType::F32);
    cpu::check_dtype(op, "comb", comb, DType::F32);
    if (!post.has_shape({T, n}) || !comb.has_shape({T, n * n}))
      fail(ErrorCode::kInvalidArgument, "{}: post {} / comb {} must be [{}, {}] / [{}, {}]", op, post.str(), comb.str(),
           T, n, T, n * n);
  }
  const float* mx = mixes.ptr<float>();
  const float* b = base.ptr<float>();
  const float* sc = scale.ptr<float>();
  const float eps = p.eps;
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * n * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* m = mx + t * M;
    std::vector<float> pre(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) pre[static_cast<size_t>(j)] = sigmoidf(m[j] * sc[0] + b[j]) + eps;
    if (!head) {
      float* po = post.ptr<float>() + t * n;
      for (int64_t j = 0; j < n; ++j) po[j] = 2.0f * sigmoidf(m[n + j] * sc[1] + b[n + j]);
      float* c = comb.ptr<float>() + t * n * n;  // c[j n + k]: row j (input stream), column k
      for (int64_t j = 0; j < n; ++j) {
        float* row = c + j * n;
        float mxv = -INFINITY;
        for (int64_t k = 0; k < n; ++k) {
          row[k] = m[2 * n + j * n + k] * sc[2] + b[2 * n + j * n + k];
          mxv = std::fmax(mxv, row[k]);
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += (row[k] = std::exp(row[k] - mxv));
        for (int64_t k = 0; k < n; ++k) row[k] = row[k] / sum + eps;
      }
      auto norm_cols = [&] {
        for (int64_t k = 0; k < n; ++k) {
          float s = 0.0f;
          for (int64_t j = 0; j < n; ++j) s += c[j * n + k];
          for (int64_t j = 0; j < n; ++j) c[j * n + k] /= s + eps;
        }
      };
      auto norm_rows = [&] {
        for (int64_t j = 0; j < n; ++j) {
          float s = 0.0f;
          for (int64_t k = 0; k < n; ++k) s += c[j * n + k];
          for (int64_t k = 0; k < n; ++k) c[j * n + k] /= s + eps;
        }
      };
      norm_cols();
      for (int32_t it = 1; it < p.sinkhorn_iters; ++it) {
        norm_rows();
        norm_cols();
      }
    }
    const float* x = streams.ptr<float>() + t * n * H;
    float* o = collapsed.ptr<float>() + t * H;
    for (int64_t d = 0; d < H; ++d) {
      float s = 0.0f;
      for (int64_t j = 0; j < n; ++j) s += pre[static_cast<size_t>(j)] * x[j * H + d];
      o[d] = s;
    }
  }
}

}  // namespace ft
