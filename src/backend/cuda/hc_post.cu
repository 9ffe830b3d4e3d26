// hc_post: DeepSeek-V4 hyper-connection expansion out[t, k] = post[t, k] y[t] + sum_j comb[t, j n + k]
// streams[t, j] (ops.h); one thread per output element; streams, y, out one activation dtype.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void hc_post_kernel(const T* streams, const T* y, const float* post, const float* comb, T* out, int64_t T_,
                               int n, int64_t H) {
  const int64_t total = T_ * n * H;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / (n * H), k = (i / H) % n, d = i % H;
    float s = post[t * n + k] * to_f(y[t * H + d]);
    for (int j = 0; j < n; ++j) s += comb[t * n * n + j * n + k] * to_f(streams[t * n * H + j * H + d]);
    out[i] = from_f<T>(s);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::hc_post(const HyperConnParams& p, const Tensor& streams, const Tensor& y, const Tensor& post,
                      const Tensor& comb, Tensor out) {
  const char* op = "hc_post";
  cuda::check_act(op, "streams", streams);
  cuda::check_act(op, "y", y);
  cuda::check_act(op, "out", out);
  cuda::check_same_dtype(op, "y", y, streams);
  cuda::check_same_dtype(op, "out", out, streams);
  cuda::check_dtype(op, "post", post, {DType::F32});
  cuda::check_dtype(op, "comb", comb, {DType::F32});
  const int64_t n = p.n_streams, T = y.rows(), H = y.cols();
  if (n < 1 || !streams.has_shape({T, n * H}) || !out.has_shape({T, n * H}) || !post.has_shape({T, n}) ||
      !comb.has_shape({T, n * n}) || out.data == streams.data)
    fail(ErrorCode::kInvalidArgument, "{}: streams {}, y {}, post {}, comb {}, out {} do not fit {} streams (out must "
         "not alias streams)", op, streams.str(), y.str(), post.str(), comb.str(), out.str(), n);
  if (T == 0) return;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "streams", streams.dtype, {
    cuda::hc_post_kernel<T><<<cuda::grid_1d(n_tok * n * H, 256), 256, 0, stream_>>>(
        streams.ptr<T>(), y.ptr<T>(), post.ptr<float>(), comb.ptr<float>(), out.ptr<T>(), n_tok, static_cast<int>(n), H);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
