#include "formats/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "util/error.h"
#include "util/read_file.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

// The safetensors format caps the header at 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
constexpr uint64_t kMaxHeader = 100'000'000;

struct StName {
  const char* name;
  DType type;
};
constexpr StName kStTypes[] = {
    {"F64", DType::F64}, {"F32", DType::F32}, {"F16", DType::F16}, {"BF16", DType::BF16},
    {"F8_E4M3", DType::F8_E4M3}, {"F8_E5M2", DType::F8_E5M2}, {"I64", DType::I64}, {"I32", DType::I32},
    {"I16", DType::I16}, {"I8", DType::I8}, {"U8", DType::U8}, {"BOOL", DType::BOOL},
};

// A non-negative integer JSON value, or fail naming `what`.
uint64_t get_uint(const nlohmann::json& j, const std::string& path, const std::string& what) {
  if (!j.is_number_integer() || (j.is_number_integer() && !j.is_number_unsigned() && j.get<int64_t>() < 0))
    fail(ErrorCode::kInvalidFile, "{}: {}: expected a non-negative integer, got {}", path, what, j.dump());
  return j.get<uint64_t>();
}


}  // namespace

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& t : kStTypes)
    if (name == t.name) return t.type;
  return std::nullopt;
}

const char* safetensors_dtype_name(DType t) {
  for (const auto& s : kStTypes)
    if (s.type == t) return s.name;
  fail(ErrorCode::kInvalidArgument, "{} cannot be stored in safetensors", dtype_name(t));
}

SafetensorsFile::SafetensorsFile(const std::string& path) : name_(path), map_(path) {
  parse(map_.data(), map_.size());
}

SafetensorsFile::SafetensorsFile(const std::string& name, std::vector<uint8_t> bytes)
    : name_(name), owned_(std::move(bytes)) {
  parse(owned_.data(), owned_.size());
}

void SafetensorsFile::parse(const uint8_t* data, uint64_t size) {
  const std::string& p = name_;
  if (size < 8) fail(ErrorCode::kInvalidFile, "{}: header size at offset 0: file has only {} bytes (need 8)", p, size);
  uint64_t n = 0;
  std::memcpy(&n, data, 8);
  if (n > size - 8 || n > kMaxHeader)
    fail(ErrorCode::kInvalidFile, "{}: header size {} at offset 0 exceeds the {} bytes after it (max {})", p, n, size - 8,
         kMaxHeader);
  data_offset_ = 8 + n;
  const uint64_t data_size = size - data_offset_;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(data + 8, data + 8 + n);
  } catch (const nlohmann::json::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}: header JSON at offset {}: {}", p, 8 + e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large for a double (1e400)
    fail(ErrorCode::kInvalidFile, "{}: header JSON: {}", p, e.what());
  }
  if (!header.is_object()) fail(ErrorCode::kInvalidFile, "{}: header at offset 8 is not a JSON object", p);

  struct Span {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Span> spans;
  std::vector<TensorInfo> infos;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(ErrorCode::kInvalidFile, "{}: __metadata__ is not an object", p);
      for (auto m = v.begin(); m != v.end(); ++m)
        if (!m.value().is_string()) fail(ErrorCode::kInvalidFile, "{}: __metadata__.{} is not a string", p, m.key());
      metadata_ = v;
      continue;
    }
    std::string where = fmt::format("tensor {}", name);
    if (!v.is_object()) fail(ErrorCode::kInvalidFile, "{}: {}: entry is not an object", p, where);
    if (!v.contains("dtype") || !v["dtype"].is_string())
      fail(ErrorCode::kInvalidFile, "{}: {}: missing or non-string dtype", p, where);
    std::string dt = v["dtype"].get<std::string>();
    std::optional<DType> type = dtype_from_safetensors(dt);
    if (!type) fail(ErrorCode::kInvalidFile, "{}: {}: unknown dtype \"{}\"", p, where, dt);
    if (!v.contains("shape") || !v["shape"].is_array())
      fail(ErrorCode::kInvalidFile, "{}: {}: missing or non-array shape", p, where);
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      fail(ErrorCode::kInvalidFile, "{}: {}: data_offsets must be [begin, end]", p, where);
    TensorInfo t;
    t.name = name;
    t.dtype = *type;
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      uint64_t dim = get_uint(d, p, where + ": shape");
      if (dim != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / dim)
        fail(ErrorCode::kInvalidFile, "{}: {}: shape {} overflows", p, where, v["shape"].dump());
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t esize = static_cast<uint64_t>(dtype_info(*type).block_bytes);
    uint64_t begin = get_uint(v["data_offsets"][0], p, where + ": data_offsets[0]");
    uint64_t end = get_uint(v["data_offsets"][1], p, where + ": data_offsets[1]");
    if (begin > end || end > data_size)
      fail(ErrorCode::kInvalidFile, "{}: {}: data_offsets [{}, {}) outside the {}-byte data section at offset {}", p,
           where, begin, end, data_size, data_offset_);
    if (numel > std::numeric_limits<uint64_t>::max() / esize || numel * esize != end - begin)
      fail(ErrorCode::kInvalidFile, "{}: {}: data_offsets [{}, {}) hold {} bytes but shape {} of {} needs {} x {}", p,
           where, begin, end, end - begin, v["shape"].dump(), dt, numel, esize);
    t.bytes = static_cast<int64_t>(end - begin);
    t.data = end > begin ? data + data_offset_ + begin : nullptr;
    spans.push_back(Span{begin, end, infos.size()});
    infos.push_back(std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t prev_end = 0;
  const TensorInfo* prev = nullptr;
  for (const Span& s : spans) {
    if (s.end == s.begin) continue;
    if (prev && s.begin < prev_end)
      fail(ErrorCode::kInvalidFile, "{}: tensor {}: data_offsets [{}, {}) overlap tensor {} ending at {}", p,
           infos[s.index].name, s.begin, s.end, prev->name, prev_end);
    prev_end = s.end;
    prev = &infos[s.index];
  }
  tensors_.reserve(infos.size());
  for (const Span& s : spans) tensors_.push_back(std::move(infos[s.index]));
}

SafetensorsSet::SafetensorsSet(const std::string& path) {
  std::string index;
  if (fs::is_directory(path)) {
    fs::path dir(path);
    if (fs::exists(dir / "model.safetensors.index.json")) {
      index = (dir / "model.safetensors.index.json").string();
    } else if (fs::exists(dir / "model.safetensors")) {
      files_.emplace_back((dir / "model.safetensors").string());
    } else {
      fail(ErrorCode::kNotFound, "{}: no model.safetensors or model.safetensors.index.json", path);
    }
  } else if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index = path;
  } else {
    files_.emplace_back(path);
  }

  if (index.empty()) {
    tensors_ = files_.front().tensors();
    return;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(index));
  } catch (const nlohmann::json::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}: JSON at offset {}: {}", index, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large for a double
    fail(ErrorCode::kInvalidFile, "{}: JSON: {}", index, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail(ErrorCode::kInvalidFile, "{}: missing weight_map object", index);
  fs::path dir = fs::path(index).parent_path();
  std::vector<std::string> shard_names;
  std::unordered_map<std::string, size_t> shard_of;  // shard file name -> index in files_
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail(ErrorCode::kInvalidFile, "{}: weight_map.{} is not a string", index, it.key());
    std::string shard = it.value().get<std::string>();
    fs::path sp(shard);
    bool bad = shard.empty() || sp.is_absolute();
    for (const auto& part : sp) bad = bad || part == "..";
    if (bad) fail(ErrorCode::kInvalidFile, "{}: weight_map.{}: shard \"{}\" is not a file name in the folder", index, it.key(), shard);
    if (!shard_of.count(shard)) {
      shard_of.emplace(shard, shard_names.size());
      shard_names.push_back(shard);
    }
  }
  // nlohmann::json objects iterate in key order; open shards in name order (model-00001-of-N, ...).
  std::sort(shard_names.begin(), shard_names.end());
  for (size_t i = 0; i < shard_names.size(); ++i) {
    shard_of[shard_names[i]] = i;
    files_.emplace_back((dir / shard_names[i]).string());
  }
  std::unordered_map<std::string, size_t> where;  // tensor -> shard index
  for (size_t i = 0; i < files_.size(); ++i) {
    for (const TensorInfo& t : files_[i].tensors()) {
      auto [it, inserted] = where.emplace(t.name, i);
      if (!inserted)
        fail(ErrorCode::kInvalidFile, "{}: tensor {} is also in {}", files_[i].path(), t.name, files_[it->second].path());
      tensors_.push_back(t);
    }
  }
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    size_t want = shard_of.at(it.value().get<std::string>());
    auto w = where.find(it.key());
    if (w == where.end() || w->second != want)
      fail(ErrorCode::kInvalidFile, "{}: weight_map says tensor {} is in {}, but it is not there", index, it.key(),
           shard_names[want]);
  }
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const nlohmann::json& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<uint64_t> sizes;
  for (const auto& t : tensors) {
    int64_t numel = 1;
    for (int64_t d : t.shape) numel *= d;
    uint64_t bytes = static_cast<uint64_t>(numel) * static_cast<uint64_t>(dtype_info(t.dtype).block_bytes);
    header[t.name] = {{"dtype", safetensors_dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
    sizes.push_back(bytes);
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(ErrorCode::kIo, "{}: cannot open for writing: {}", path, std::strerror(errno));
  uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (size_t i = 0; i < tensors.size(); ++i)
    f.write(static_cast<const char*>(tensors[i].data), static_cast<std::streamsize>(sizes[i]));
  f.close();
  if (!f) fail(ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace ft
