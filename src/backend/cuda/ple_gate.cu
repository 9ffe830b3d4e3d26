// ple_gate: Qwen4-Exp's per-layer-embedding stream gate (ops.h; CPU reference backend/cpu/ple_gate.cpp,
// after transformers' Qwen4ExpTextPLELayer): one block per (token, stream) reduces the weighted
// key . query over the stream's D channels in fp32, takes the signed square root of the scaled sum
// through a sigmoid, and writes it times the token's shared value. key, query, value, out one
// activation dtype (F32 or BF16); w F32.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void ple_gate_kernel(const T* key, const T* query, const float* w, const T* value, T* out, int n,
                                int64_t D, float inv_sqrt_d) {
  __shared__ float red[32];
  __shared__ float gate;
  const int64_t t = blockIdx.x / n, k = blockIdx.x % n;
  const int64_t row = t * n * D + k * D;
  float acc = 0.0f;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) acc += to_f(key[row + d]) * to_f(query[row + d]) * w[k * D + d];
  acc = block_sum(acc, red);
  if (threadIdx.x == 0) {
    const float g = acc * inv_sqrt_d;
    const float sgn = g > 0.0f ? 1.0f : (g < 0.0f ? -1.0f : 0.0f);
    const float r = sqrtf(fmaxf(fabsf(g), 1e-6f)) * sgn;
    gate = 1.0f / (1.0f + expf(-r));
  }
  __syncthreads();
  const float sg = gate;
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[row + d] = from_f<T>(sg * to_f(value[t * D + d]));
}

}  // namespace
}  // namespace cuda

void CudaOps::ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) {
  const char* op = "ple_gate";
  cuda::check_act(op, "key", key);
  cuda::check_same_dtype(op, "query", query, key);
  cuda::check_same_dtype(op, "value", value, key);
  cuda::check_same_dtype(op, "out", out, key);
  cuda::check_dtype(op, "w", w, {DType::F32});
  op_checks::ple_gate(key, query, w, value, out);
  const int64_t T = value.rows(), D = value.cols();
  const int64_t n = key.cols() / D;
  if (T == 0) return;
  const float inv = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "key", key.dtype, {
    cuda::ple_gate_kernel<T><<<static_cast<unsigned>(n_tok * n), 128, 0, stream_>>>(
        key.ptr<T>(), query.ptr<T>(), w.ptr<float>(), value.ptr<T>(), out.ptr<T>(), static_cast<int>(n), D, inv);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
