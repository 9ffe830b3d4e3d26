// topk: the k largest entries per row, descending, ties to the lower index; NaN ranks lowest (CPU backend).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {
namespace cpu {

/** Writes the indices of the k best values of row[0..C) into idx (descending, ties to lower index). */
void topk_row(const float* row, int64_t C, int32_t k, int32_t* idx) {
  thread_local std::vector<int32_t> order;
  order.resize(static_cast<size_t>(C));
  std::iota(order.begin(), order.end(), 0);
  auto better = [row](int32_t a, int32_t b) {
    const float va = row[a], vb = row[b];
    const bool na = std::isnan(va), nb = std::isnan(vb);
    if (na != nb) return nb;  // the non-NaN one is better
    if (!na && va != vb) return va > vb;
    return a < b;
  };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  std::copy(order.begin(), order.begin() + k, idx);
}

}  // namespace cpu

void CpuOps::topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) {
  cpu::check_dtype("topk", "x", x, DType::F32);
  cpu::check_dtype("topk", "ids", ids, DType::I32);
  cpu::check_dtype("topk", "values", values, DType::F32);
  const int64_t R = x.rows(), C = x.cols();
  if (k < 1 || k > C) fail(ErrorCode::kInvalidArgument, "topk: k = {} must be in [1, {}] for x {}", k, C, x.str());
  if (ids.rows() != R || ids.cols() != k)
    fail(ErrorCode::kInvalidArgument, "topk: ids {} must be [{}, {}]", ids.str(), R, k);
  if (values.rows() != R || values.cols() != k)
    fail(ErrorCode::kInvalidArgument, "topk: values {} must be [{}, {}]", values.str(), R, k);
  const float* a = x.ptr<float>();
  int32_t* id = ids.ptr<int32_t>();
  float* v = values.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (R > 64)
  for (int64_t r = 0; r < R; ++r) {
    cpu::topk_row(a + r * C, C, k, id + r * k);
    for (int32_t j = 0; j < k; ++j) v[r * k + j] = a[r * C + id[r * k + j]];
  }
}

}  // namespace ft
