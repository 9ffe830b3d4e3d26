// copy: dst = src between host and device, with F32/F16/BF16 conversion (round to nearest even).
// Same dtype: one cudaMemcpyAsync (bytes moved: numel * element size, once). Different float
// dtypes: device -> device converts in a kernel (reads n * src size, writes n * dst size);
// host <-> device converts on the host side (a host temporary, then one transfer), since those
// copies are off the hot path (weights at load, logits at the end of a step).
#include <cstring>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.h"
#include "backend/op_checks.h"
#include "tensor/half.h"

namespace ft {
namespace cuda {
namespace {

template <typename S, typename D>
__global__ void convert_kernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = from_f<D>(to_f(src[i]));
}

template <typename S>
void convert_from(const S* src, void* dst, DType dst_dtype, int64_t n, cudaStream_t s) {
  const unsigned g = grid_1d(n, 256);
  if (dst_dtype == DType::F32) convert_kernel<<<g, 256, 0, s>>>(src, static_cast<float*>(dst), n);
  else if (dst_dtype == DType::F16) convert_kernel<<<g, 256, 0, s>>>(src, static_cast<__half*>(dst), n);
  else convert_kernel<<<g, 256, 0, s>>>(src, static_cast<bf16*>(dst), n);
  FT_CUDA_LAUNCH_CHECK();
}

float host_load(DType t, const void* p, int64_t i) {
  if (t == DType::F32) return static_cast<const float*>(p)[i];
  const uint16_t h = static_cast<const uint16_t*>(p)[i];
  return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

void host_convert(DType st, const void* src, DType dt, void* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = host_load(st, src, i);
    if (dt == DType::F32) static_cast<float*>(dst)[i] = v;
    else static_cast<uint16_t*>(dst)[i] = dt == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
  }
}

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

}  // namespace

void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  if (src_dtype == DType::F32) convert_from(static_cast<const float*>(src), dst, dst_dtype, n, s);
  else if (src_dtype == DType::F16) convert_from(static_cast<const __half*>(src), dst, dst_dtype, n, s);
  else convert_from(static_cast<const bf16*>(src), dst, dst_dtype, n, s);
}

}  // namespace cuda

void CudaOps::copy(const Tensor& src, Tensor dst) {
  if (src.empty() || dst.empty()) fail(ErrorCode::kInvalidArgument, "copy: src or dst is empty");
  if (src.numel() != dst.numel())
    fail(ErrorCode::kInvalidArgument, "copy: src {} and dst {} differ in size", src.str(), dst.str());
  const int64_t n = src.numel();
  const bool src_dev = src.device == Device::kCuda, dst_dev = dst.device == Device::kCuda;
  if (src.dtype == dst.dtype) {
    const cudaMemcpyKind kind = src_dev ? (dst_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                        : (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    if (!src_dev && !dst_dev) {
      std::memmove(dst.data, src.data, static_cast<size_t>(src.bytes()));
      return;
    }
    // To pageable host memory the copy call itself waits for the stream, spinning; with
    // set_host_waits_sleep the wait for the queued work happens first, in synchronize().
    if (!dst_dev && host_waits_sleep_) synchronize();
    FT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.bytes()), kind, stream_));
    if (!dst_dev) synchronize();
    return;
  }
  if (!cuda::is_float(src.dtype) || !cuda::is_float(dst.dtype))
    fail(ErrorCode::kUnsupported, "copy: cannot convert {} to {}", src.str(), dst.str());
  if (src_dev && dst_dev) {
    cuda::launch_convert(src.data, src.dtype, dst.data, dst.dtype, n, stream_);
  } else if (!src_dev && dst_dev) {
    std::vector<uint8_t> tmp(static_cast<size_t>(dst.bytes()));
    cuda::host_convert(src.dtype, src.data, dst.dtype, tmp.data(), n);
    // From pageable memory the call returns once `tmp` is staged, so it may be freed after.
    FT_CUDA_CHECK(cudaMemcpyAsync(dst.data, tmp.data(), tmp.size(), cudaMemcpyHostToDevice, stream_));
    synchronize();
  } else if (src_dev && !dst_dev) {
    std::vector<uint8_t> tmp(static_cast<size_t>(src.bytes()));
    if (host_waits_sleep_) synchronize();
    FT_CUDA_CHECK(cudaMemcpyAsync(tmp.data(), src.data, tmp.size(), cudaMemcpyDeviceToHost, stream_));
    synchronize();
    cuda::host_convert(src.dtype, tmp.data(), dst.dtype, dst.data, n);
  } else {
    cuda::host_convert(src.dtype, src.data, dst.dtype, dst.data, n);
  }
}

}  // namespace ft
