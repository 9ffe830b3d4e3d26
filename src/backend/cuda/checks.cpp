// Host-side argument checks shared by the CUDA op entries (see checks.h).
#include "backend/op_checks.h"
#include "backend/cuda/checks.h"

#include <string>
#include <tuple>

#include "quant/kv_quant.h"
#include "util/error.h"

namespace ft::cuda {

void check_dev(const char* op, const char* arg, const Tensor& t) {
  if (t.empty()) fail(ErrorCode::kInvalidArgument, "{}: {} is empty", op, arg);
  if (t.device != Device::kCuda)
    fail(ErrorCode::kInvalidArgument, "{}: {} {} is on {}, expected cuda", op, arg, t.str(), device_name(t.device));
}

void check_dtype(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed) {
  check_dev(op, arg, t);
  std::string names;
  for (DType d : allowed) {
    if (d == t.dtype) return;
    names += names.empty() ? "" : "/";
    names += dtype_name(d);
  }
  fail(ErrorCode::kUnsupported, "{}: {} {} has dtype {}; the CUDA backend needs {}", op, arg, t.shape_str(),
       dtype_name(t.dtype), names);
}

void check_act(const char* op, const char* arg, const Tensor& t) { check_dtype(op, arg, t, {DType::BF16, DType::F32}); }

void check_same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& ref) {
  bool same = t.ndim == ref.ndim;
  for (int i = 0; same && i < t.ndim; ++i) same = t.shape[i] == ref.shape[i];
  if (!same)
    fail(ErrorCode::kInvalidArgument, "{}: {} has shape {}, expected {}", op, arg, t.shape_str(), ref.shape_str());
}

void check_same_dtype(const char* op, const char* arg, const Tensor& t, const Tensor& ref) {
  if (t.dtype != ref.dtype)
    fail(ErrorCode::kUnsupported, "{}: {} has dtype {}, expected {} like the input", op, arg, dtype_name(t.dtype),
         dtype_name(ref.dtype));
}

int float_code(const char* op, const char* arg, DType t) {
  if (t == DType::F32) return 0;
  if (t == DType::F16) return 1;
  if (t == DType::BF16) return 2;
  fail(ErrorCode::kUnsupported, "{}: {} has dtype {}; F32, F16 or BF16 expected", op, arg, dtype_name(t));
}

void check_batch(const char* op, const BatchInfo& b) { op_checks::batch(op, b); }

void check_kv_write(const char* op, const BatchInfo& batch, const Tensor& k, const Tensor& v, const KvLayer& kv) {
  check_act(op, "k", k);
  check_act(op, "v", v);
  check_same_dtype(op, "v", v, k);
  check_kv_pages(op, kv);
  op_checks::kv_write(op, batch, k, v, kv);
}

int check_kv_page_tensor(const char* op, const char* name, const char* scale_name, const Tensor& pages,
                         const Tensor& scales) {
  if (scales.empty()) {
    check_act(op, name, pages);
    return 0;
  }
  check_dtype(op, name, pages, {DType::F8_E4M3, DType::I8});
  const DType kd = kv_dtype_of_codes(pages.dtype);
  check_dtype(op, scale_name, scales, {kv_scale_dtype(kd)});
  if (pages.ndim != 4 || scales.ndim != 4 || scales.dim(0) != pages.dim(0) || scales.dim(1) != pages.dim(1) ||
      scales.dim(2) != pages.dim(2) || scales.dim(3) != kv_scales_per_head(kd, pages.dim(3)))
    fail(ErrorCode::kInvalidArgument, "{}: scales {} do not fit {} pages {}", op, scales.str(), name, pages.str());
  return kd == DType::F8_E4M3 ? 1 : 2;
}

int check_kv_pages(const char* op, const KvLayer& kv) {
  if (!kv.quantized()) {
    check_act(op, "kv.k", kv.k);
    check_act(op, "kv.v", kv.v);
    check_same_dtype(op, "kv.v", kv.v, kv.k);
    if (!kv.v_scale.empty()) fail(ErrorCode::kInvalidArgument, "{}: kv.v has scales but kv.k has none", op);
    return 0;
  }
  check_dtype(op, "kv.k", kv.k, {DType::F8_E4M3, DType::I8});
  check_same_dtype(op, "kv.v", kv.v, kv.k);
  const int form = check_kv_page_tensor(op, "kv.k", "kv.k_scale", kv.k, kv.k_scale);
  if (check_kv_page_tensor(op, "kv.v", "kv.v_scale", kv.v, kv.v_scale) != form)
    fail(ErrorCode::kInvalidArgument, "{}: kv.v has no scales but kv.k has", op);
  return form;
}

}  // namespace ft::cuda
