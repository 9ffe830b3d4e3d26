// CpuOps: construction, memory ops and the argument checks shared by the op files.
#include "backend/cpu/cpu_ops.h"

#include <omp.h>

#include <cstring>

#include "backend/cpu/simd.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {

namespace cpu {

void check_cpu(const char* op, const char* arg, const Tensor& t) {
  if (t.empty()) fail(ErrorCode::kInvalidArgument, "{}: {} is empty", op, arg);
  if (t.device != Device::kCpu)
    fail(ErrorCode::kInvalidArgument, "{}: {} {} is on {}, expected cpu", op, arg, t.str(), device_name(t.device));
}

void check_dtype(const char* op, const char* arg, const Tensor& t, DType want) {
  check_cpu(op, arg, t);
  if (t.dtype != want)
    fail(ErrorCode::kUnsupported, "{}: {} {} has dtype {}, the CPU backend needs {}", op, arg, t.shape_str(),
         dtype_name(t.dtype), dtype_name(want));
}

void check_same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& ref) {
  bool same = t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == ref.shape[i];
  if (!same)
    fail(ErrorCode::kInvalidArgument, "{}: {} has shape {}, expected {}", op, arg, t.shape_str(), ref.shape_str());
}

}  // namespace cpu

CpuOps::CpuOps(int n_threads) : n_threads_(n_threads > 0 ? n_threads : omp_get_max_threads()) {}

Buffer CpuOps::alloc(int64_t bytes) { return Buffer::host(bytes); }

Tensor CpuOps::make_resident(const Tensor& host, Buffer& storage) {
  cpu::check_cpu("make_resident", "host", host);
  storage = Buffer();
  return host;
}

void CpuOps::copy(const Tensor& src, Tensor dst) {
  cpu::check_cpu("copy", "src", src);
  cpu::check_cpu("copy", "dst", dst);
  if (src.numel() != dst.numel())
    fail(ErrorCode::kInvalidArgument, "copy: src {} and dst {} differ in size", src.str(), dst.str());
  const int64_t n = src.numel();
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, static_cast<size_t>(src.bytes()));
    return;
  }
  auto is_float = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; };
  if (!is_float(src.dtype) || !is_float(dst.dtype))
    fail(ErrorCode::kUnsupported, "copy: cannot convert {} to {}", src.str(), dst.str());
  if (dst.dtype == DType::F32) return cpu::to_f32(src.dtype, src.data, dst.ptr<float>(), n);
  std::vector<float> tmp(static_cast<size_t>(n));
  cpu::to_f32(src.dtype, src.data, tmp.data(), n);
  auto* d = dst.ptr<uint16_t>();
  for (int64_t i = 0; i < n; ++i) d[i] = dst.dtype == DType::BF16 ? f32_to_bf16(tmp[i]) : f32_to_f16(tmp[i]);
}

void CpuOps::zero(Tensor t) {
  cpu::check_cpu("zero", "t", t);
  std::memset(t.data, 0, static_cast<size_t>(t.bytes()));
}

}  // namespace ft
