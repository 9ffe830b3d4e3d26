// Host-side argument checks shared by the CUDA op entries (see checks.h).
#include "backend/cuda/checks.h"

#include <string>

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

void check_batch(const char* op, const BatchInfo& b) {
  check_dtype(op, "batch.positions", b.positions, {DType::I32});
  check_dtype(op, "batch.seq_index", b.seq_index, {DType::I32});
  check_dtype(op, "batch.seq_start", b.seq_start, {DType::I32});
  check_dtype(op, "batch.block_tables", b.block_tables, {DType::I32});
  const int64_t T = b.n_tokens, S = b.n_seqs;
  if (T < 0 || S < 0 || b.max_blocks < 0 || b.max_kv_len < 0)
    fail(ErrorCode::kInvalidArgument, "{}: batch has negative sizes (T={}, S={}, max_blocks={}, max_kv_len={})", op, T,
         S, b.max_blocks, b.max_kv_len);
  if (b.positions.numel() != T || b.seq_index.numel() != T || b.seq_start.numel() != S + 1 ||
      b.block_tables.numel() != S * static_cast<int64_t>(b.max_blocks))
    fail(ErrorCode::kInvalidArgument,
         "{}: batch index shapes positions {}, seq_index {}, seq_start {}, block_tables {} do not fit T={}, S={}, "
         "max_blocks={}",
         op, b.positions.shape_str(), b.seq_index.shape_str(), b.seq_start.shape_str(), b.block_tables.shape_str(), T,
         S, b.max_blocks);
}

}  // namespace ft::cuda
