// matmul: y = x W^T (+ bias) with W in any stored dtype (CPU backend). W is processed in tiles of
// kRowTile rows: each tile is dequantized once per token block into a thread-local f32 buffer
// (F32 weights are read in place), then the token block meets it as one GEMM block (gemm_nt, the
// kernel the CPU expert executor uses too). A block of one token (decode) dots the stored rows
// directly where a fused decode+dot kernel exists (dot_rows_stored: same bits, the tile is never
// written out). Summation order per output element is fixed, so results do not depend on T.
#include <algorithm>
#include <vector>

#include "backend/op_checks.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft {
namespace cpu {

namespace {
constexpr int64_t kRowTile = 16;    // rows of W per work item
constexpr int64_t kTokenBlock = 64;  // tokens per work item
}  // namespace

void matmul_f32(const float* x, int64_t T, int64_t ldx, const Tensor& w, const Tensor& bias, float* y, int64_t ldy,
                int n_threads) {
  const int64_t N = w.dim(0), K = w.dim(1);
  const int64_t rb = w.row_bytes();
  const int64_t n_tiles = (N + kRowTile - 1) / kRowTile, t_blocks = (T + kTokenBlock - 1) / kTokenBlock;
  const bool direct = w.dtype == DType::F32;
  thread_local std::vector<float> bias_f;
  if (!bias.empty()) {
    bias_f.resize(static_cast<size_t>(N));
    to_f32(bias.dtype, bias.data, bias_f.data(), N);
  }
  const float* b = bias.empty() ? nullptr : bias_f.data();
  const int64_t work = n_tiles * t_blocks;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 1) if (work > 1 && T * N * K > 262144)
  for (int64_t item = 0; item < work; ++item) {
    const int64_t tile = item % n_tiles, tb = item / n_tiles;
    const int64_t n0 = tile * kRowTile, nr = std::min(kRowTile, N - n0);
    const int64_t t0 = tb * kTokenBlock, t1 = std::min(T, t0 + kTokenBlock);
    if (!direct && t1 - t0 == 1 && has_fused_dot(w.dtype)) {
      for (int64_t r = 0; r < nr; r += 4)
        dot_rows_stored(w.dtype, x + t0 * ldx, w.bytes_ptr() + (n0 + r) * rb, rb,
                        static_cast<int>(std::min<int64_t>(4, nr - r)), K, y + t0 * ldy + n0 + r);
      if (b)
        for (int64_t r = 0; r < nr; ++r) y[t0 * ldy + n0 + r] += b[n0 + r];
      continue;
    }
    thread_local std::vector<float> wbuf;
    const float* wt;
    if (direct) {
      wt = reinterpret_cast<const float*>(w.bytes_ptr() + n0 * rb);
    } else {
      wbuf.resize(static_cast<size_t>(kRowTile * K));
      for (int64_t r = 0; r < nr; ++r) to_f32(w.dtype, w.bytes_ptr() + (n0 + r) * rb, wbuf.data() + r * K, K);
      wt = wbuf.data();
    }
    gemm_nt(x + t0 * ldx, ldx, t1 - t0, wt, K, nr, K, y + t0 * ldy + n0, ldy);
    if (b)
      for (int64_t u = t0; u < t1; ++u)
        for (int64_t r = 0; r < nr; ++r) y[u * ldy + n0 + r] += b[n0 + r];
  }
}

}  // namespace cpu

void CpuOps::matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias, const ActQ8* /*x_q8*/) {
  cpu::check_dtype("matmul", "x", x, DType::F32);
  cpu::check_dtype("matmul", "y", y, DType::F32);
  cpu::check_cpu("matmul", "w", w);
  op_checks::matmul(x, w, y);
  const int64_t N = w.dim(0), K = w.dim(1), T = x.rows();
  if (!bias.empty()) {
    cpu::check_cpu("matmul", "bias", bias);
    if (bias.numel() != N)
      fail(ErrorCode::kInvalidArgument, "matmul: bias {} must have N = {} entries", bias.str(), N);
  }
  if (x.data == y.data) fail(ErrorCode::kInvalidArgument, "matmul: y must not alias x");
  cpu::matmul_f32(x.ptr<float>(), T, K, w, bias, y.ptr<float>(), N, n_threads_);
}

}  // namespace ft
