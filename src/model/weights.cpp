#include "model/weights.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "backend/cuda_weight_types.h"
#include "backend/host_allocator.h"
#include "formats/hf_config.h"
#include "quant/fp8.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"
#include "util/error.h"
#include "util/progress.h"

namespace ft {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/** dst [rows, cols] (elements of T) = src(r, c) = src[c * ld + r * step], in 32 x 32 tiles. */
template <typename T>
void gather_transposed(const T* src, int64_t ld, int64_t step, int64_t rows, int64_t cols, T* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t c0 = 0; c0 < cols; c0 += kTile)
    for (int64_t r0 = 0; r0 < rows; r0 += kTile)
      for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + kTile); ++c) dst[r * cols + c] = src[c * ld + r * step];
}

/** gather_transposed over elements of `elem` bytes (2 or 4). */
void gather_transposed(const void* src, int64_t elem, int64_t ld, int64_t step, int64_t rows, int64_t cols, void* dst) {
  if (elem == 2)
    gather_transposed(static_cast<const uint16_t*>(src), ld, step, rows, cols, static_cast<uint16_t*>(dst));
  else
    gather_transposed(static_cast<const uint32_t*>(src), ld, step, rows, cols, static_cast<uint32_t*>(dst));
}

}  // namespace

WeightName layer_weight(int64_t layer, const std::string& gguf, const std::string& hf, const std::string& suffix) {
  return {fmt::format("blk.{}.{}.{}", layer, gguf, suffix), fmt::format("model.layers.{}.{}.{}", layer, hf, suffix)};
}

WeightLoader::WeightLoader(const Checkpoint& ckpt, Ops& ops, ProgressSink* progress)
    : ckpt_(ckpt), ops_(ops), gguf_(ckpt.format() == "gguf"), progress_(progress) {
  const nlohmann::json& meta = ckpt.metadata();
  if (!gguf_ && meta.is_object() && meta.contains("config"))
    quant_ = parse_quant_config(meta["config"], ckpt.path() + "/config.json");
  // ModelOpt exports also write their settings to hf_quant_config.json; read it when config.json has none.
  const std::string hq = ckpt.path() + "/hf_quant_config.json";
  std::error_code ec;
  if (!gguf_ && quant_.method == QuantMethod::kNone && std::filesystem::is_regular_file(hq, ec))
    quant_ = parse_quant_config(nlohmann::json{{"quantization_config", read_json_file(hq)}}, hq);
}

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
         "tensor {} {}: {} weights need an FP8 quantization_config in config.json (quant_method \"fp8\" or "
         "compressed-tensors float-quantized) naming their scales; FreeToken reads F8_E4M3 weights with F32 scales",
         name, shape_str(info.shape), dtype_name(t));
  if (!allowed)
    fail(ErrorCode::kInvalidFile, "tensor {} {}: dtype {} is not supported here (expected {})", name,
         shape_str(info.shape), dtype_name(t),
         kind == WeightKind::kVector ? "F32, F16 or BF16" : "F32, F16, BF16 or a GGUF block type");
  if (kind == WeightKind::kMatrix && use.back() % dtype_info(t).block_size != 0)
    fail(ErrorCode::kInvalidFile, "tensor {} {}: row length is not a whole number of {} blocks", name,
         shape_str(info.shape), dtype_name(t));
  return Tensor(const_cast<uint8_t*>(info.data), t, use.data(), static_cast<int>(use.size()));
}

bool WeightLoader::has(const WeightName& n) const {
  const std::string& nm = name(n);
  if (ckpt_.find(nm) != nullptr) return true;
  return quant_.method == QuantMethod::kNvfp4 && quant_.nvfp4_codes != "weight" && nm.ends_with(".weight") &&
         ckpt_.find(nm.substr(0, nm.size() - 6) + quant_.nvfp4_codes) != nullptr;
}

Tensor WeightLoader::host(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  Tensor t = read(n, shape, kind);
  count(name(n));
  return t;
}

Tensor WeightLoader::host_routed(const WeightName& n, std::initializer_list<int64_t> shape) {
  return read(n, shape, WeightKind::kMatrix);
}

void WeightLoader::count(const std::string& name) {
  if (!progress_ || !counted_.insert(name).second) return;
  if (const TensorInfo* info = ckpt_.find(name)) progress_->add(info->bytes);
}

namespace {
/** Whether HF tensor `name` is a routed expert matrix left in the mapped file: under ".experts."
 *  (".shared_experts." is not), not a bias, and not of fused experts with biases (gpt-oss's, which
 *  host_fused_experts converts while the model loads). */
bool hf_routed_view(const Checkpoint& ckpt, const std::string& name) {
  const size_t at = name.find(".experts.");
  if (at == std::string::npos || name.ends_with("_bias") || name.ends_with(".bias")) return false;
  return ckpt.find(name.substr(0, at) + ".experts.gate_up_proj_bias") == nullptr;
}
}  // namespace

int64_t WeightLoader::load_bytes_estimate() const {
  int64_t total = 0;
  for (const TensorInfo& t : ckpt_.tensors()) {
    // FP8 and NVFP4 matrices are repacked while loading, with their scales.
    const bool fp8 = (quant_.method == QuantMethod::kFp8 &&
                      (t.dtype == DType::F8_E4M3 || t.name.ends_with("." + quant_.scale_suffix))) ||
                     (quant_.method == QuantMethod::kNvfp4 &&  // NVFP4 weights with their scales
                      (t.dtype == DType::U8 || t.name.ends_with(".weight_scale") ||
                       t.name.ends_with(".weight_scale_2") || t.name.ends_with(".input_scale") ||
                       t.name.ends_with(".weight_global_scale") || t.name.ends_with(".input_global_scale")));
    // GGUF NVFP4 experts with a per-tensor scale are repacked while loading too (gguf_scaled_view).
    const bool routed = gguf_ ? t.name.find("_exps.") != std::string::npos && t.name.ends_with(".weight") &&
                                    !(t.dtype == DType::NVFP4 && ckpt_.find(t.name.substr(0, t.name.size() - 7) + ".scale"))
                              : !fp8 && hf_routed_view(ckpt_, t.name);
    if (!routed) total += t.bytes;
  }
  return total;
}

Tensor WeightLoader::read(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  const std::string& nm = name(n);
  const TensorInfo* info = ckpt_.find(nm);
  if (!info && quant_.method == QuantMethod::kNvfp4 && quant_.nvfp4_codes != "weight" && nm.ends_with(".weight"))
    if (const TensorInfo* codes = ckpt_.find(nm.substr(0, nm.size() - 6) + quant_.nvfp4_codes))
      return nvfp4_view(*codes, nm, shape, kind);  // compressed-tensors: "<module>.weight_packed"
  if (!info)
    fail(ErrorCode::kNotFound, "missing tensor {} (expected shape {}) in {}", nm, shape_str(std::vector<int64_t>(shape)),
         ckpt_.path());
  if (gguf_ && kind == WeightKind::kMatrix && nm.ends_with(".weight"))
    if (const TensorInfo* scale = ckpt_.find(nm.substr(0, nm.size() - 7) + ".scale"))
      return gguf_scaled_view(*info, *scale, nm, shape, kind);  // llama.cpp's NVFP4 with its per-tensor scale
  if (info->dtype == DType::F8_E4M3 && quant_.method == QuantMethod::kFp8) return fp8_view(*info, nm, shape, kind);
  if (info->dtype == DType::U8 && quant_.method == QuantMethod::kNvfp4 && quant_.nvfp4_codes == "weight" &&
      nm.ends_with(".weight"))
    return nvfp4_view(*info, nm, shape, kind);
  if (info->dtype == DType::U8 && nm.ends_with(".weight") &&
      ckpt_.find(nm.substr(0, nm.size() - 7) + ".weight_scale_2") != nullptr)
    fail(ErrorCode::kUnsupported,
         "tensor {} {}: U8 weights with weight_scale / weight_scale_2 are NVFP4 and need a ModelOpt NVFP4 "
         "quantization_config (quant_algo \"NVFP4\") in config.json or hf_quant_config.json", nm, shape_str(info->shape));
  return view(*info, nm, shape, kind);
}

Tensor WeightLoader::nvfp4_view(const TensorInfo& info, const std::string& nm, std::initializer_list<int64_t> shape,
                                WeightKind kind) {
  if (auto it = fp8_rows_.find(nm); it != fp8_rows_.end()) {
    if (it->second.has_shape(shape)) return it->second;
    fail(ErrorCode::kInvalidFile, "tensor {}: expected shape {}, found NVFP4 {}", nm,
         shape_str(std::vector<int64_t>(shape)), it->second.shape_str());
  }
  const std::vector<int64_t> want(shape);
  if (kind != WeightKind::kMatrix || want.size() < 2 || want.size() > 3)
    fail(ErrorCode::kUnsupported, "tensor {} {}: NVFP4 is read for the weight matrices of linear layers (and stacked "
         "expert matrices) only", nm, shape_str(info.shape));
  const std::string module = nm.substr(0, nm.size() - 7);  // without ".weight"
  const std::string cname = module + "." + quant_.nvfp4_codes;  // the codes: nm, or "<module>.weight_packed"
  if (!quant_.converts(module))
    fail(ErrorCode::kInvalidFile,
         "tensor {} is U8 but its module {} is left unquantized by the quantization_config (exclude_modules / "
         "ignore) of {}", cname, module, ckpt_.path());
  const int64_t E = want.size() == 3 ? want[0] : 1, N = want[want.size() - 2], K = want.back();
  std::vector<int64_t> packed_shape = want, scale_shape = want;
  packed_shape.back() = K / 2;
  scale_shape.back() = K / 16;
  if (K % 16 != 0 || info.shape != packed_shape || info.dtype != DType::U8)
    fail(ErrorCode::kInvalidFile, "tensor {}: expected U8 {} (the NVFP4 codes of a {} weight, two a byte), found {} {} in {}",
         cname, K % 16 == 0 ? shape_str(packed_shape) : "of rows of 16k values", shape_str(want),
         dtype_name(info.dtype), shape_str(info.shape), ckpt_.path());
  DType type;
  try {
    type = nvfp4_row_type(K);
  } catch (const Error& e) {
    throw e.with_context(fmt::format("tensor {} {}", nm, shape_str(want)));
  }
  const std::string sname = module + ".weight_scale", gname = module + "." + quant_.nvfp4_global;
  const TensorInfo* s = ckpt_.find(sname);
  if (!s)
    fail(ErrorCode::kNotFound, "missing tensor {} (F8_E4M3 {}: the block scales of NVFP4 weight {}) in {}", sname,
         shape_str(scale_shape), nm, ckpt_.path());
  if (s->shape != scale_shape || (s->dtype != DType::F8_E4M3 && s->dtype != DType::U8))
    fail(ErrorCode::kInvalidFile, "tensor {}: expected F8_E4M3 {} (one scale per 16 values of {} {}), found {} {} in {}",
         sname, shape_str(scale_shape), nm, shape_str(want), dtype_name(s->dtype), shape_str(s->shape), ckpt_.path());
  const TensorInfo* g = ckpt_.find(gname);
  if (!g)
    fail(ErrorCode::kNotFound, "missing tensor {} (F32 []: the global scale of NVFP4 weight {}) in {}", gname, nm,
         ckpt_.path());
  const bool one = g->numel() == 1 && g->shape.size() <= 1;
  const bool per_expert = want.size() == 3 && (g->shape == std::vector<int64_t>{E} || g->shape == std::vector<int64_t>{E, 1});
  if ((!one && !per_expert) || (g->dtype != DType::F32 && g->dtype != DType::BF16 && g->dtype != DType::F16))
    fail(ErrorCode::kInvalidFile, "tensor {}: expected F32 [] (the global scale of {} {}), found {} {} in {}", gname, nm,
         shape_str(want), dtype_name(g->dtype), shape_str(g->shape), ckpt_.path());
  std::vector<float> gs(static_cast<size_t>(g->numel()));
  dequantize_row(g->dtype, g->data, gs.data(), g->numel());
  const int64_t row = dtype_bytes(type, K);
  host_storage_.push_back(Buffer::host(std::max<int64_t>(E * N * row, 1)));
  uint8_t* rows = static_cast<uint8_t*>(host_storage_.back().data());
  try {
    for (int64_t e = 0; e < E; ++e)
      nvfp4_rows_from_modelopt(info.data + e * N * (K / 2), s->data + e * N * (K / 16), gs[one ? 0 : e], N, K,
                               rows + e * N * row, type, quant_.nvfp4_global_divides);
  } catch (const Error& err) {
    throw err.with_context(fmt::format("repacking NVFP4 weight {} {}", nm, shape_str(want)));
  }
  const Tensor t(rows, type, want.data(), static_cast<int>(want.size()));
  fp8_rows_.emplace(nm, t);
  for (const std::string& part : {cname, sname, gname, module + ".input_scale", module + ".input_global_scale"})
    count(part);
  return t;
}

Tensor WeightLoader::fp8_view(const TensorInfo& info, const std::string& nm, std::initializer_list<int64_t> shape,
                              WeightKind kind) {
  const std::vector<int64_t> want(shape);
  if (info.shape != want)
    fail(ErrorCode::kInvalidFile, "tensor {}: expected shape {}, found {} in {}", nm, shape_str(want),
         shape_str(info.shape), ckpt_.path());
  if (auto it = fp8_rows_.find(nm); it != fp8_rows_.end()) return it->second;
  const std::string suffix = ".weight";
  if (kind != WeightKind::kMatrix || want.size() != 2 || nm.size() <= suffix.size() ||
      nm.compare(nm.size() - suffix.size(), suffix.size(), suffix) != 0)
    fail(ErrorCode::kUnsupported, "tensor {} {}: F8_E4M3 is read for the weight matrices of linear layers only", nm,
         shape_str(info.shape));
  const std::string module = nm.substr(0, nm.size() - suffix.size());
  if (!quant_.converts(module))
    fail(ErrorCode::kInvalidFile,
         "tensor {} is F8_E4M3 but its module {} is left unquantized by the quantization_config "
         "(modules_to_not_convert / ignore) of {}", nm, module, ckpt_.path());
  const int64_t N = want[0], K = want[1];
  DType type;
  try {
    type = fp8_row_type(K);
  } catch (const Error& e) {
    throw e.with_context(fmt::format("tensor {} {}", nm, shape_str(info.shape)));
  }
  // The scale grid the config names, and the scale tensor's shape it implies.
  Fp8ScaleGrid grid{std::max<int64_t>(N, 1), K};
  std::vector<std::vector<int64_t>> scale_shapes;
  switch (quant_.fp8_scales) {
    case Fp8Scales::kBlock:
      grid = {quant_.block_rows, quant_.block_cols};
      scale_shapes = {{(N + grid.block_rows - 1) / grid.block_rows, (K + grid.block_cols - 1) / grid.block_cols}};
      break;
    case Fp8Scales::kTensor: scale_shapes = {{}, {1}, {1, 1}}; break;
    case Fp8Scales::kChannel:
      grid = {1, K};
      scale_shapes = {{N}, {N, 1}};
      break;
  }
  const std::string sname = module + "." + quant_.scale_suffix;
  const TensorInfo* s = ckpt_.find(sname);
  if (!s)
    fail(ErrorCode::kNotFound, "missing tensor {} {} (the scales of FP8 weight {}) in {}", sname,
         shape_str(scale_shapes.front()), nm, ckpt_.path());
  const bool shape_ok = std::find(scale_shapes.begin(), scale_shapes.end(), s->shape) != scale_shapes.end();
  if (!shape_ok || (s->dtype != DType::F32 && s->dtype != DType::BF16 && s->dtype != DType::F16))
    fail(ErrorCode::kInvalidFile, "tensor {}: expected F32 {} (the scales of {} {}), found {} {} in {}", sname,
         shape_str(scale_shapes.front()), nm, shape_str(info.shape), dtype_name(s->dtype), shape_str(s->shape),
         ckpt_.path());
  std::vector<float> scales(static_cast<size_t>(s->numel()));
  dequantize_row(s->dtype, s->data, scales.data(), s->numel());
  host_storage_.push_back(Buffer::host(std::max<int64_t>(N * dtype_bytes(type, K), 1)));
  uint8_t* rows = static_cast<uint8_t*>(host_storage_.back().data());
  try {
    fp8_rows_from_scaled(info.data, scales.data(), N, K, grid, rows, type);
  } catch (const Error& e) {
    throw e.with_context(fmt::format("repacking FP8 weight {} {}", nm, shape_str(info.shape)));
  }
  const Tensor t(rows, type, want.data(), 2);
  fp8_rows_.emplace(nm, t);
  count(nm);  // a copy made while loading, whoever asked (routed experts too)
  count(sname);
  return t;
}

void WeightLoader::check_device_kernel(const std::string& name, const Tensor& h) const {
  if (ops_.device() != Device::kCuda || !dtype_info(h.dtype).is_quantized || cuda_has_weight_kernel(h.dtype)) return;
  fail(ErrorCode::kUnsupported,
       "tensor {} {}: the CUDA backend has no kernel for {} weights (it reads {}); run this file with --device cpu, "
       "or use a file of another type",
       name, h.shape_str(), dtype_name(h.dtype), cuda_weight_kernel_types());
}

Tensor WeightLoader::get(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  Tensor h = read(n, shape, kind);
  check_device_kernel(name(n), h);
  Buffer storage;
  Tensor t = ops_.make_resident(h, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  count(name(n));
  return t;
}

Tensor WeightLoader::unplaced(const WeightName& n, std::initializer_list<int64_t> shape) {
  Tensor h = read(n, shape, WeightKind::kMatrix);
  check_device_kernel(name(n), h);
  count(name(n));
  h.data = nullptr;
  return h;
}

Tensor WeightLoader::get_host_mapped(const WeightName& n, std::initializer_list<int64_t> shape) {
  Tensor h = read(n, shape, WeightKind::kMatrix);
  check_device_kernel(name(n), h);
  Buffer storage;
  Tensor t = ops_.make_host_mapped(h, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  count(name(n));
  return t;
}

std::vector<Tensor> WeightLoader::read_parts(const std::vector<WeightName>& names, const std::vector<int64_t>& rows,
                                             int64_t cols, int64_t& total) {
  std::vector<Tensor> parts;
  total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    parts.push_back(read(names[i], {rows[i], cols}, WeightKind::kMatrix));
    check_device_kernel(name(names[i]), parts.back());
    if (parts.back().dtype != parts.front().dtype) return {};
    total += rows[i];
  }
  return parts;
}

Tensor WeightLoader::get_stacked_host_mapped(const std::vector<WeightName>& names, const std::vector<int64_t>& rows,
                                             int64_t cols) {
  int64_t total = 0;
  const std::vector<Tensor> parts = read_parts(names, rows, cols, total);
  if (parts.empty()) return Tensor();
  Tensor stacked(nullptr, parts.front().dtype, {total, cols});
  bool adjacent = true;  // each part's bytes follow the previous one's (in the mapped file): one view
  for (size_t i = 1; i < parts.size(); ++i)
    adjacent = adjacent && parts[i].data == static_cast<const uint8_t*>(parts[i - 1].data) + parts[i - 1].bytes();
  if (adjacent) {
    stacked.data = parts.front().data;
    Buffer storage;
    Tensor t = ops_.make_host_mapped(stacked, storage);
    if (!storage.empty()) storage_.push_back(std::move(storage));
    for (const WeightName& n : names) count(name(n));
    return t;
  }
  const std::unique_ptr<HostAllocator> alloc = ops_.host_allocator();
  Buffer host = alloc->allocate(std::max<int64_t>(stacked.bytes(), 1));
  auto* dst = static_cast<uint8_t*>(host.data());
  for (const Tensor& p : parts) {  // host views of the mapped file: plain copies, no conversion
    std::memcpy(dst, p.data, static_cast<size_t>(p.bytes()));
    dst += p.bytes();
  }
  stacked.data = host.data();
  if (ops_.device() != Device::kCpu) {
    if (void* mapped = alloc->pin(host)) {
      stacked.data = mapped;
      stacked.device = ops_.device();
    } else {  // no device address for this allocator's memory: the backend's own host-mapped copy
      Buffer copy;
      stacked = ops_.make_host_mapped(stacked, copy);
      if (!copy.empty()) host = std::move(copy);  // else a view of `host` itself
    }
  }
  if (!host.empty()) storage_.push_back(std::move(host));
  for (const WeightName& n : names) count(name(n));
  return stacked;
}

Tensor WeightLoader::get_stacked(const std::vector<WeightName>& names, const std::vector<int64_t>& rows,
                                 int64_t cols) {
  int64_t total = 0;
  const std::vector<Tensor> parts = read_parts(names, rows, cols, total);
  if (parts.empty()) return Tensor();
  Tensor stacked(nullptr, parts.front().dtype, {total, cols}, ops_.device());
  storage_.push_back(ops_.alloc(stacked.bytes()));
  stacked.data = storage_.back().data();
  int64_t r0 = 0;
  for (const Tensor& p : parts) {
    ops_.copy(p, stacked.slice(r0, p.rows()));
    r0 += p.rows();
  }
  for (const WeightName& n : names) count(name(n));
  return stacked;
}

Tensor WeightLoader::get_rows(const WeightName& n, std::initializer_list<int64_t> shape,
                              const std::vector<int64_t>& rows) {
  const Tensor h = read(n, shape, WeightKind::kMatrix);
  check_device_kernel(name(n), h);
  const int64_t row = h.row_bytes();
  Buffer hb = Buffer::host(std::max<int64_t>(static_cast<int64_t>(rows.size()) * row, 1));
  for (size_t i = 0; i < rows.size(); ++i) {
    FT_CHECK(rows[i] >= 0 && rows[i] < h.rows());
    std::memcpy(static_cast<char*>(hb.data()) + static_cast<int64_t>(i) * row,
                static_cast<const char*>(h.data) + rows[i] * row, static_cast<size_t>(row));
  }
  const Tensor view(hb.data(), h.dtype, {static_cast<int64_t>(rows.size()), h.cols()});
  if (tp_.size > 1) tp_unloaded_bytes_ += std::max<int64_t>(h.bytes() - view.bytes(), 0);
  return place_copy(n, std::move(hb), view);
}

Tensor WeightLoader::place_copy(const WeightName& n, Buffer hb, const Tensor& view) {
  Buffer storage;
  Tensor t = ops_.make_resident(view, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  if (t.data == view.data) host_storage_.push_back(std::move(hb));  // read in place (CPU)
  count(name(n));
  return t;
}

Tensor WeightLoader::get_cols(const WeightName& n, std::initializer_list<int64_t> shape, int64_t col_begin,
                              int64_t n_cols) {
  const Tensor h = read(n, shape, WeightKind::kMatrix);
  check_device_kernel(name(n), h);
  FT_CHECK(h.ndim == 2 && col_begin >= 0 && n_cols > 0 && col_begin + n_cols <= h.cols());
  const DTypeInfo& info = dtype_info(h.dtype);
  if (col_begin % info.block_size != 0 || n_cols % info.block_size != 0)
    fail(ErrorCode::kUnsupported, "tensor {}: columns [{}, {}) do not fall on {} blocks of {}", name(n), col_begin,
         col_begin + n_cols, info.name, info.block_size);
  const int64_t row = h.row_bytes(), skip = dtype_bytes(h.dtype, col_begin), out_row = dtype_bytes(h.dtype, n_cols);
  Buffer hb = Buffer::host(std::max<int64_t>(h.rows() * out_row, 1));
  for (int64_t r = 0; r < h.rows(); ++r)
    std::memcpy(static_cast<char*>(hb.data()) + r * out_row, static_cast<const char*>(h.data) + r * row + skip,
                static_cast<size_t>(out_row));
  const Tensor view(hb.data(), h.dtype, {h.rows(), n_cols});
  if (tp_.size > 1) tp_unloaded_bytes_ += std::max<int64_t>(h.bytes() - view.bytes(), 0);
  return place_copy(n, std::move(hb), view);
}

Tensor WeightLoader::get_optional(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  return has(n) ? get(n, shape, kind) : Tensor();
}

std::vector<Tensor> WeightLoader::host_experts(int64_t layer, const std::string& gguf, const std::string& hf,
                                               int64_t n_expert, int64_t rows, int64_t cols) {
  std::vector<Tensor> out;
  if (gguf_) {
    Tensor stacked = read({fmt::format("blk.{}.{}.weight", layer, gguf), ""}, {n_expert, rows, cols}, WeightKind::kMatrix);
    for (int64_t e = 0; e < n_expert; ++e) out.push_back(stacked.index(e));
    return out;
  }
  for (int64_t e = 0; e < n_expert; ++e) {
    const std::string nm = fmt::format("model.layers.{}.{}.weight", layer, fmt::format(fmt::runtime(hf), e));
    out.push_back(read({"", nm}, {rows, cols}, WeightKind::kMatrix));
  }
  return out;
}

Tensor WeightLoader::host_f32(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  const Tensor h = read(n, shape, kind);
  host_storage_.push_back(Buffer::host(std::max<int64_t>(h.numel(), 1) * 4));
  Tensor f(host_storage_.back().data(), DType::F32, h.shape.data(), h.ndim);
  dequantize_row(h.dtype, h.data, static_cast<float*>(f.data), h.numel());
  count(name(n));
  return f;
}

Tensor WeightLoader::get_f32(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind) {
  const Tensor f = host_f32(n, shape, kind);
  Buffer storage;
  Tensor t = ops_.make_resident(f, storage);
  if (!storage.empty()) storage_.push_back(std::move(storage));
  return t;
}

ExpertBank WeightLoader::host_fused_experts(int64_t layer, const std::string& module, int64_t E, int64_t F, int64_t H) {
  const std::string p = fmt::format("model.layers.{}.{}.", layer, module);
  const bool mxfp4 = ckpt_.find(p + "gate_up_proj_blocks") || ckpt_.find(p + "down_proj_blocks");
  ExpertBank b = mxfp4 ? fused_mxfp4_matrices(p, E, F, H) : fused_plain_matrices(p, E, F, H);
  // Biases: F32 [E, F] each for gate and up (de-interleaved), [E, H] for down.
  const Tensor gub = host_f32({"", p + "gate_up_proj_bias"}, {E, 2 * F});
  host_storage_.push_back(Buffer::host(2 * E * F * 4));
  float* gb = static_cast<float*>(host_storage_.back().data());
  float* ub = gb + E * F;
  const float* s = static_cast<const float*>(gub.data);
  for (int64_t i = 0; i < E * F; ++i) gb[i] = s[2 * i], ub[i] = s[2 * i + 1];
  b.gate_bias = Tensor(gb, DType::F32, {E, F});
  b.up_bias = Tensor(ub, DType::F32, {E, F});
  b.down_bias = host_f32({"", p + "down_proj_bias"}, {E, H});
  return b;
}

ExpertBank WeightLoader::fused_plain_matrices(const std::string& p, int64_t E, int64_t F, int64_t H) {
  const Tensor gu = read({"", p + "gate_up_proj"}, {E, H, 2 * F}, WeightKind::kMatrix);
  const Tensor dn = read({"", p + "down_proj"}, {E, F, H}, WeightKind::kMatrix);
  for (const Tensor* t : {&gu, &dn})
    if (t->dtype != DType::F32 && t->dtype != DType::F16 && t->dtype != DType::BF16)
      fail(ErrorCode::kUnsupported, "tensor {}{} {}: fused experts are read as F32, F16 or BF16, not {}", p,
           t == &gu ? "gate_up_proj" : "down_proj", t->shape_str(), dtype_name(t->dtype));
  if (gu.dtype != dn.dtype)
    fail(ErrorCode::kInvalidFile, "tensors {}gate_up_proj and down_proj: dtypes {} and {} differ", p,
         dtype_name(gu.dtype), dtype_name(dn.dtype));
  const int64_t es = dtype_info(gu.dtype).block_bytes, mat = F * H * es;
  host_storage_.push_back(Buffer::host(3 * E * mat));  // per expert: gate, up, down
  uint8_t* base = static_cast<uint8_t*>(host_storage_.back().data());
  ExpertBank b;
  for (int64_t e = 0; e < E; ++e) {
    uint8_t* g = base + (3 * e) * mat;
    uint8_t* u = g + mat;
    uint8_t* d = u + mat;
    const uint8_t* src = gu.bytes_ptr() + e * H * 2 * F * es;  // [H, 2F]
    gather_transposed(src, es, 2 * F, 2, F, H, g);             // gate[f, h] = gate_up[h, 2f]
    gather_transposed(src + es, es, 2 * F, 2, F, H, u);        // up[f, h] = gate_up[h, 2f + 1]
    gather_transposed(dn.bytes_ptr() + e * F * H * es, es, H, 1, H, F, d);  // down[h, f] = down_proj[f, h]
    b.gate.push_back(Tensor(g, gu.dtype, {F, H}));
    b.up.push_back(Tensor(u, gu.dtype, {F, H}));
    b.down.push_back(Tensor(d, gu.dtype, {H, F}));
  }
  count(p + "gate_up_proj");
  count(p + "down_proj");
  return b;
}

const uint8_t* WeightLoader::u8_tensor(const std::string& name, const std::vector<int64_t>& shape) const {
  const TensorInfo* info = ckpt_.find(name);
  if (!info)
    fail(ErrorCode::kNotFound, "missing tensor {} (expected U8 {}) in {}", name, shape_str(shape), ckpt_.path());
  if (info->dtype != DType::U8 || info->shape != shape)
    fail(ErrorCode::kInvalidFile, "tensor {}: expected U8 {}, found {} {} in {}", name, shape_str(shape),
         dtype_name(info->dtype), shape_str(info->shape), ckpt_.path());
  return info->data;
}

ExpertBank WeightLoader::fused_mxfp4_matrices(const std::string& p, int64_t E, int64_t F, int64_t H) {
  for (const auto& [what, n] : {std::pair{"hidden size", H}, std::pair{"expert width", F}})
    if (n % 32 != 0)
      fail(ErrorCode::kInvalidFile, "{}gate_up_proj_blocks: MXFP4 experts need a {} that is a multiple of 32, not {}",
           p, what, n);
  // OCP layout, output-major: gate_up rows interleave gate (even) and up (odd).
  const uint8_t* gub = u8_tensor(p + "gate_up_proj_blocks", {E, 2 * F, H / 32, 16});
  const uint8_t* gus = u8_tensor(p + "gate_up_proj_scales", {E, 2 * F, H / 32});
  const uint8_t* dnb = u8_tensor(p + "down_proj_blocks", {E, H, F / 32, 16});
  const uint8_t* dns = u8_tensor(p + "down_proj_scales", {E, H, F / 32});
  const int64_t gu_row = dtype_bytes(DType::MXFP4, H);
  const int64_t mat = F * gu_row;  // gate, up [F, H]; down [H, F] has as many bytes
  host_storage_.push_back(Buffer::host(3 * E * mat));
  uint8_t* base = static_cast<uint8_t*>(host_storage_.back().data());
  ExpertBank b;
  try {
    for (int64_t e = 0; e < E; ++e) {
      uint8_t* g = base + (3 * e) * mat;
      uint8_t* u = g + mat;
      uint8_t* d = u + mat;
      for (int64_t r = 0; r < 2 * F; ++r)  // row r of gate_up: gate row r/2 (even r) or up row r/2 (odd r)
        mxfp4_rows_from_ocp(gub + (e * 2 * F + r) * (H / 32) * 16, gus + (e * 2 * F + r) * (H / 32), 1, H,
                            (r % 2 == 0 ? g : u) + (r / 2) * gu_row);
      mxfp4_rows_from_ocp(dnb + e * H * (F / 32) * 16, dns + e * H * (F / 32), H, F, d);
      b.gate.push_back(Tensor(g, DType::MXFP4, {F, H}));
      b.up.push_back(Tensor(u, DType::MXFP4, {F, H}));
      b.down.push_back(Tensor(d, DType::MXFP4, {H, F}));
    }
  } catch (const Error& err) {
    throw err.with_context(fmt::format("repacking the MXFP4 experts of {}", p.substr(0, p.size() - 1)));
  }
  for (const char* part : {"gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales"})
    count(p + part);
  return b;
}

}  // namespace ft
