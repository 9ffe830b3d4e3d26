// WeightLoader's path for GGUF weights with a per-tensor scale tensor beside them: llama.cpp's
// converter writes a ModelOpt NVFP4 checkpoint's weight_scale_2 as an F32 `<module>.scale` ([1], or
// [n_expert] for stacked experts) next to the NVFP4 `<module>.weight` and multiplies it into the matmul
// output; here it is folded into NVFP4_G64 blocks (quant/nvfp4.h) so every kernel sees scaled weights.
#include <algorithm>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "model/weights.h"
#include "quant/nvfp4.h"
#include "util/error.h"

namespace ft {
namespace {

std::string dims(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

Tensor WeightLoader::gguf_scaled_view(const TensorInfo& info, const TensorInfo& scale, const std::string& nm,
                                      std::initializer_list<int64_t> shape, WeightKind kind) {
  if (auto it = fp8_rows_.find(nm); it != fp8_rows_.end()) {
    if (it->second.has_shape(shape)) return it->second;
    fail(ErrorCode::kInvalidFile, "tensor {}: expected shape {}, found NVFP4 {}", nm,
         dims(std::vector<int64_t>(shape)), it->second.shape_str());
  }
  if (info.dtype != DType::NVFP4)
    fail(ErrorCode::kUnsupported,
         "tensor {} beside {} weight {} {}: per-tensor scale tensors are read for NVFP4 weights only, and "
         "ignoring it would change the model (llama.cpp multiplies it into the output) in {}",
         scale.name, dtype_name(info.dtype), nm, dims(info.shape), ckpt_.path());
  const Tensor v = view(info, nm, shape, kind);  // the weight's own shape and block checks
  const std::vector<int64_t> want(v.shape.begin(), v.shape.begin() + v.ndim);
  const int64_t E = want.size() == 3 ? want[0] : 1, N = want[want.size() - 2], K = want.back();
  if (want.size() < 2 || want.size() > 3)
    fail(ErrorCode::kUnsupported, "tensor {} {}: NVFP4 with a per-tensor scale is read for weight matrices (and "
         "stacked expert matrices) only", nm, dims(want));
  const std::vector<int64_t> scale_shape{want.size() == 3 ? E : 1};
  if (scale.dtype != DType::F32 || scale.shape != scale_shape)
    fail(ErrorCode::kInvalidFile, "tensor {}: expected F32 {} ({} of NVFP4 weight {} {}), found {} {} in {}",
         scale.name, dims(scale_shape), want.size() == 3 ? "one scale per expert" : "the per-tensor scale", nm,
         dims(want), dtype_name(scale.dtype), dims(scale.shape), ckpt_.path());
  std::vector<float> gs(static_cast<size_t>(E));
  std::memcpy(gs.data(), scale.data, gs.size() * sizeof(float));
  const int64_t row = dtype_bytes(DType::NVFP4_G64, K), src_row = dtype_bytes(DType::NVFP4, K);
  host_storage_.push_back(Buffer::host(std::max<int64_t>(E * N * row, 1)));
  uint8_t* rows = static_cast<uint8_t*>(host_storage_.back().data());
  for (int64_t e = 0; e < E; ++e) {
    try {
      nvfp4_rows_from_gguf(info.data + e * N * src_row, gs[static_cast<size_t>(e)], N, K, rows + e * N * row);
    } catch (const Error& err) {
      throw err.with_context(E > 1 ? fmt::format("tensor {} (expert {} of NVFP4 weight {})", scale.name, e, nm)
                                   : fmt::format("tensor {} (the scale of NVFP4 weight {})", scale.name, nm));
    }
  }
  const Tensor t(rows, DType::NVFP4_G64, want.data(), static_cast<int>(want.size()));
  fp8_rows_.emplace(nm, t);
  const std::string module = nm.substr(0, nm.size() - 7);  // without ".weight"
  for (const std::string& part : {nm, scale.name, module + ".input_scale"}) count(part);  // a copy made while loading
  return t;
}

}  // namespace ft
