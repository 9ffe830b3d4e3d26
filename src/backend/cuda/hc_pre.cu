// hc_pre: DeepSeek-V4 hyper-connection weights (sigmoid pre / post, Sinkhorn-normalised comb) and the
// streams' collapse (ops.h). One block per token: warp 0 (n^2 <= 32: a lane per comb entry, the sums
// gathered by shuffles) or thread 0 (n <= 16) computes the n + n + n^2 weights in the CPU op's order
// of operations, then the block collapses the streams.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kMaxStreams = 16;

__device__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T>
__global__ void hc_pre_kernel(const T* streams, const float* mixes, const float* base, const float* scale, T* coll,
                              float* post, float* comb, int n, int64_t H, int iters, float eps, bool head) {
  __shared__ float pre[kMaxStreams];
  const int64_t t = blockIdx.x;
  const int M = head ? n : (2 + n) * n;
  const float* m = mixes + t * M;
  if (n * n <= 32) {  // warp 0, lane j n + k holding c[j][k]: the serial sums below, gathered by shuffles
    if (threadIdx.x < 32) {
      const int lane = threadIdx.x, j = lane / n, k = lane % n;
      const bool in = lane < n * n;
      if (lane < n) pre[lane] = sigmoidf_(m[lane] * scale[0] + base[lane]) + eps;
      if (!head) {
        if (lane < n) post[t * n + lane] = 2.0f * sigmoidf_(m[n + lane] * scale[1] + base[n + lane]);
        float c = in ? m[2 * n + lane] * scale[2] + base[2 * n + lane] : 0.0f;
        auto row_at = [&](float v, int q) { return __shfl_sync(0xffffffffu, v, in ? j * n + q : 0); };
        auto col_at = [&](float v, int q) { return __shfl_sync(0xffffffffu, v, in ? q * n + k : 0); };
        float mx = -INFINITY;
        for (int q = 0; q < n; ++q) mx = fmaxf(mx, row_at(c, q));
        c = expf(c - mx);
        float sum = 0.0f;
        for (int q = 0; q < n; ++q) sum += row_at(c, q);
        c = c / sum + eps;
        for (int it = 0; it < iters; ++it) {
          if (it > 0) {
            float rs = 0.0f;
            for (int q = 0; q < n; ++q) rs += row_at(c, q);
            c /= rs + eps;
          }
          float cs = 0.0f;
          for (int q = 0; q < n; ++q) cs += col_at(c, q);
          c /= cs + eps;
        }
        if (in) comb[t * n * n + lane] = c;
      }
    }
  } else if (threadIdx.x == 0) {
    for (int j = 0; j < n; ++j) pre[j] = sigmoidf_(m[j] * scale[0] + base[j]) + eps;
    if (!head) {
      for (int j = 0; j < n; ++j) post[t * n + j] = 2.0f * sigmoidf_(m[n + j] * scale[1] + base[n + j]);
      float c[kMaxStreams * kMaxStreams];
      for (int j = 0; j < n; ++j) {
        float mx = -INFINITY;
        for (int k = 0; k < n; ++k) {
          c[j * n + k] = m[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
          mx = fmaxf(mx, c[j * n + k]);
        }
        float sum = 0.0f;
        for (int k = 0; k < n; ++k) sum += (c[j * n + k] = expf(c[j * n + k] - mx));
        for (int k = 0; k < n; ++k) c[j * n + k] = c[j * n + k] / sum + eps;
      }
      for (int it = 0; it < iters; ++it) {
        if (it > 0)
          for (int j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int k = 0; k < n; ++k) s += c[j * n + k];
            for (int k = 0; k < n; ++k) c[j * n + k] /= s + eps;
          }
        for (int k = 0; k < n; ++k) {
          float s = 0.0f;
          for (int j = 0; j < n; ++j) s += c[j * n + k];
          for (int j = 0; j < n; ++j) c[j * n + k] /= s + eps;
        }
      }
      for (int i = 0; i < n * n; ++i) comb[t * n * n + i] = c[i];
    }
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < H; d += blockDim.x) {
    float s = 0.0f;
    for (int j = 0; j < n; ++j) s += pre[j] * to_f(streams[t * n * H + j * H + d]);
    coll[t * H + d] = from_f<T>(s);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::hc_pre(const HyperConnParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                     const Tensor& scale, Tensor collapsed, Tensor post, Tensor comb) {
  const char* op = "hc_pre";
  cuda::check_act(op, "streams", streams);
  cuda::check_act(op, "collapsed", collapsed);
  cuda::check_same_dtype(op, "collapsed", collapsed, streams);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"mixes", &mixes}, {"base", &base},
                                {"scale", &scale}})
    cuda::check_dtype(op, name, *t, {DType::F32});
  const int64_t n = p.n_streams, T = streams.rows(), H = collapsed.cols();
  const bool head = post.empty();
  const int64_t M = head ? n : (2 + n) * n;
  if (n < 1 || n > cuda::kMaxStreams || (!head && p.sinkhorn_iters < 1))
    fail(ErrorCode::kInvalidArgument, "{}: n_streams {} must be in [1, {}] and sinkhorn_iters {} >= 1", op, n,
         cuda::kMaxStreams, p.sinkhorn_iters);
  if (!streams.has_shape({T, n * H}) || !collapsed.has_shape({T, H}) || !mixes.has_shape({T, M}) ||
      base.numel() != M || scale.numel() != (head ? 1 : 3))
    fail(ErrorCode::kInvalidArgument, "{}: streams {}, mixes {}, base {}, scale {}, collapsed {} do not fit {} streams",
         op, streams.str(), mixes.str(), base.str(), scale.str(), collapsed.str(), n);
  if (!head) {
    cuda::check_dtype(op, "post", post, {DType::F32});
    cuda::check_dtype(op, "comb", comb, {DType::F32});
    if (!post.has_shape({T, n}) || !comb.has_shape({T, n * n}))
      fail(ErrorCode::kInvalidArgument, "{}: post {} / comb {} must be [{}, {}] / [{}, {}]", op, post.str(), comb.str(),
           T, n, T, n * n);
  }
  if (T == 0) return;
  const unsigned blocks = static_cast<unsigned>(T);
  FT_DISPATCH_ACT(op, "streams", streams.dtype, {
    cuda::hc_pre_kernel<T><<<blocks, 256, 0, stream_>>>(
        streams.ptr<T>(), mixes.ptr<float>(), base.ptr<float>(), scale.ptr<float>(), collapsed.ptr<T>(),
        head ? nullptr : post.ptr<float>(), head ? nullptr : comb.ptr<float>(), static_cast<int>(n), H,
        p.sinkhorn_iters, p.eps, head);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
