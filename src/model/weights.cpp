#include "model/weights.h"

#include <fmt/format.h>

#include "quant/quant.h"
#include "util/error.h"

namespace ft {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

WeightName layer_weight(int64_t layer, const std::string& gguf, const std::string& hf, const std::string& suffix) {
  return {fmt::format("blk.{}.{}.{}", layer, gguf, suffix), fmt::format("model.layers.{}.{}.{}", layer, hf, suffix)};
}

WeightLoader::WeightLoader(const Checkpoint& ckpt, Ops& ops) : ckpt_(ckpt), ops_(ops), gguf_(ckpt.format() == "gguf") {}

Tensor WeightLoader::view(const TensorInfo& info, const std::string& name, std::initializer_list<int64_t> shape,
                          WeightKind kind) const {
  const std::vector<int64_t> want(shape);
  bool ok = info.shape == want;
  std::vector<int64_t> use = info.shape;
  if (!ok && want.size() == 2 && want[0] == 1 && info.shape.size() == 1 && info.shape[0] == want[1]) {
    ok = true;  // [K] stored for an expected [1, K] (llama.cpp's ffn_gate_inp_shexp)
    use = want;
  }
  if (!ok)
    fail(ErrorCode::kInvalidFile, "tensor {}: expected shape {}, found {} in {}", name, shape_str(want),
         shape_str(info.shape), ckpt_.path());
  const DType t = info.dtype;
  const bool plain = t == DType::F32 || t == DType::F16 || t == DType::BF16;
  const bool allowed = kind == WeightKind::kVector ? plain : plain || (dtype_info(t).is_quantized && can_dequantize(t));
  if (!allowed && (t == DType::F8_E4M3 || t == DType::F8_E5M2))
    fail(ErrorCode::kUnsupported,
         "tensor {} {}: {} weights (an FP8 checkpoint) are not supported yet; load a BF16 release of the model "
         "or a GGUF conversion of it", name, shape_str(info.shape), dtype_name(t));
  if (!allowed)
    fail(ErrorCode::kInvalidFile, "tensor {} {}: dtype {} is not supported here (expected {})", name,
         shape_str(info.shape), dtype_name(t),
         kind == WeightKind::kVector ? "F32, F16 or BF16" : "F32, F16, BF16 or a GGUF block type");
  if (kind == WeightKind::kMatrix && use.back() % dtype_info(t).block_size != 0)
    fail(ErrorCode::kInvalidFile, "tensor {} {}: row length is not a whole number of {} blocks", name,
         shape_str(info.shape), dtype_name(t));
  return Tensor(const_cast<uint8_t*>(info.data), t, use.data(), static_cast<int>(use.size()));
}

Tensor WeightLoader::host(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  const std::string& nm = name(n);
  const TensorInfo* info = ckpt_.find(nm);
  if (!info)
    fail(ErrorCode::kNotFound, "missing tensor {} (expected shape {}) in {}", nm, shape_str(std::vector<int64_t>(shape)),
         ckpt_.path());
  return view(*info, nm, shape, kind);
}

Tensor WeightLoader::get(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  Tensor h = host(n, shape, kind);
  Buffer storage;
  Tensor t = ops_.make_resident(h, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  return t;
}

Tensor WeightLoader::get_host_mapped(const WeightName& n, std::initializer_list<int64_t> shape) {
  Tensor h = host(n, shape);
  Buffer storage;
  Tensor t = ops_.make_host_mapped(h, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  return t;
}

Tensor WeightLoader::get_stacked(const std::vector<WeightName>& names, const std::vector<int64_t>& rows,
                                 int64_t cols) {
  std::vector<Tensor> parts;
  int64_t total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(host(names[i], {rows[i], cols}));
    if (parts.back().dtype != parts.front().dtype) return Tensor();
    total += rows[i];
  }
  if (parts.empty()) return Tensor();
  Tensor stacked(nullptr, parts.front().dtype, {total, cols}, ops_.device());
  storage_.push_back(ops_.alloc(stacked.bytes()));
  stacked.data = storage_.back().data();
  int64_t r0 = 0;
  for (const Tensor& p : parts) {
    ops_.copy(p, stacked.slice(r0, p.rows()));
    r0 += p.rows();
  }
  return stacked;
}

Tensor WeightLoader::get_optional(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  return has(n) ? get(n, shape, kind) : Tensor();
}

std::vector<Tensor> WeightLoader::host_experts(int64_t layer, const std::string& gguf, const std::string& hf,
                                               int64_t n_expert, int64_t rows, int64_t cols) {
  std::vector<Tensor> out;
  if (gguf_) {
    Tensor stacked = host({fmt::format("blk.{}.{}.weight", layer, gguf), ""}, {n_expert, rows, cols});
    for (int64_t e = 0; e < n_expert; ++e) out.push_back(stacked.index(e));
    return out;
  }
  for (int64_t e = 0; e < n_expert; ++e) {
    const std::string nm = fmt::format("model.layers.{}.{}.weight", layer, fmt::format(fmt::runtime(hf), e));
    out.push_back(host({"", nm}, {rows, cols}));
  }
  return out;
}

}  // namespace ft
