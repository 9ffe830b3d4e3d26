#include "formats/gguf_reader.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "util/error.h"

namespace ft {
namespace {

constexpr int kMaxArrayDepth = 8;  // nested arrays deeper than this are rejected (stack safety)
constexpr uint64_t kMaxAlignment = uint64_t{1} << 30;

// Bounds-checked little-endian reader over the mapped file. `what` is a callable that names the
// field; it is only evaluated when something is wrong.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : data_(data), size_(size), path_(path) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  const std::string& path() const { return path_; }

  template <typename What>
  [[noreturn]] void error_at(size_t offset, const What& what, const std::string& why) const {
    fail(ErrorCode::kInvalidFile, "{}: {} at offset {}: {}", path_, what(), offset, why);
  }

  template <typename What>
  void need(size_t n, const What& what) const {
    if (n > remaining())
      error_at(pos_, what, fmt::format("file ends after {} of {} bytes", remaining(), n));
  }

  template <typename T, typename What>
  T read(const What& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  const uint8_t* take(size_t n) {
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <typename What>
  std::string read_string(const What& what) {
    size_t at = pos_;
    uint64_t len = read<uint64_t>([&] { return what() + " length"; });
    if (len > remaining())
      error_at(at, what, fmt::format("string length {} exceeds the {} bytes left in the file", len, remaining()));
    const uint8_t* p = take(static_cast<size_t>(len));
    return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
  const std::string& path_;
};

// Smallest number of bytes one element of type `t` can occupy (for checking counts before looping).
size_t min_encoded_size(GgufType t) {
  if (t == GgufType::STRING) return 8;       // u64 length
  if (t == GgufType::ARRAY) return 4 + 8;    // element type + count
  return gguf_scalar_size(t);
}

template <typename What>
GgufType read_type(Cursor& c, const What& what) {
  size_t at = c.pos();
  uint32_t id = c.read<uint32_t>(what);
  if (!gguf_type_valid(id)) c.error_at(at, what, fmt::format("unknown value type id {} (valid: 0-12)", id));
  return static_cast<GgufType>(id);
}

// Field names of values are type-erased: nested arrays recurse, and a template per nesting level would not end.
using WhatFn = std::function<std::string()>;

GgufValue read_array(Cursor& c, const WhatFn& what, int depth) {
  if (depth >= kMaxArrayDepth)
    c.error_at(c.pos(), what, fmt::format("arrays nested deeper than {} levels", kMaxArrayDepth));
  GgufType elem = read_type(c, [&] { return what() + " array element type"; });
  size_t count_at = c.pos();
  uint64_t count = c.read<uint64_t>([&] { return what() + " array length"; });
  size_t min = min_encoded_size(elem);
  if (count > c.remaining() / min)
    c.error_at(count_at, [&] { return what() + " array length"; },
               fmt::format("{} elements of {} cannot fit in the {} bytes left", count, gguf_type_name(elem),
                           c.remaining()));
  if (elem == GgufType::STRING) {
    std::vector<std::string> v;
    v.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) v.push_back(c.read_string([&] { return fmt::format("{} element {}", what(), i); }));
    return GgufValue::string_array(std::move(v));
  }
  if (elem == GgufType::ARRAY) {
    std::vector<GgufValue> v;
    v.reserve(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      v.push_back(read_array(c, WhatFn([&] { return fmt::format("{} element {}", what(), i); }), depth + 1));
    }
    return GgufValue::array_of_arrays(std::move(v));
  }
  const uint8_t* p = c.take(static_cast<size_t>(count) * min);  // bounds checked above
  if (elem == GgufType::BOOL) {
    for (uint64_t i = 0; i < count; ++i)
      if (p[i] > 1) c.error_at(count_at + 8 + i, what, fmt::format("bool element {} has value {} (not 0 or 1)", i, p[i]));
  }
  return GgufValue::numeric_array(elem, p, static_cast<size_t>(count));
}

GgufValue read_value(Cursor& c, GgufType type, const WhatFn& what, int depth) {
  if (type == GgufType::STRING) return GgufValue::string(c.read_string(what));
  if (type == GgufType::ARRAY) return read_array(c, what, depth);
  size_t n = gguf_scalar_size(type);
  size_t at = c.pos();
  c.need(n, what);
  uint64_t bits = 0;
  std::memcpy(&bits, c.take(n), n);
  if (type == GgufType::BOOL && bits > 1) c.error_at(at, what, fmt::format("bool has value {} (not 0 or 1)", bits));
  return GgufValue::from_bits(type, bits);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

GgufFile::GgufFile(const std::string& path) : name_(path), map_(path), data_(map_.data()), size_(map_.size()) {
  parse();
}

GgufFile::GgufFile(const std::string& name, std::vector<uint8_t> bytes)
    : name_(name), owned_(std::move(bytes)), data_(owned_.data()), size_(owned_.size()) {
  parse();
}

void GgufFile::parse() {
  Cursor c(data_, size_, name_);
  auto field = [](const char* name) { return [name] { return std::string(name); }; };

  // Header: magic, version, tensor count, metadata count.
  c.need(4, field("magic"));
  const uint8_t* magic = c.take(4);
  if (std::memcmp(magic, "GGUF", 4) != 0)
    c.error_at(0, field("magic"), fmt::format("expected \"GGUF\", got bytes {:02x} {:02x} {:02x} {:02x}", magic[0],
                                              magic[1], magic[2], magic[3]));
  version_ = c.read<uint32_t>(field("version"));
  if (version_ != 2 && version_ != 3) {
    uint32_t swapped = __builtin_bswap32(version_);
    c.error_at(4, field("version"),
               swapped == 2 || swapped == 3 ? std::string("big-endian GGUF is not supported")
                                            : fmt::format("version {} is not supported (only 2 and 3)", version_));
  }
  size_t n_tensors_at = c.pos();
  uint64_t n_tensors = c.read<uint64_t>(field("tensor count"));
  size_t n_kv_at = c.pos();
  uint64_t n_kv = c.read<uint64_t>(field("metadata count"));
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least 8 + 4 + 4 + 8.
  if (n_kv > c.remaining() / 13)
    c.error_at(n_kv_at, field("metadata count"),
               fmt::format("{} key/values cannot fit in the {} bytes left", n_kv, c.remaining()));
  if (n_tensors > c.remaining() / 24)
    c.error_at(n_tensors_at, field("tensor count"),
               fmt::format("{} tensor infos cannot fit in the {} bytes left", n_tensors, c.remaining()));

  // Metadata.
  kvs_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    size_t key_at = c.pos();
    std::string key = c.read_string([&] { return fmt::format("metadata {} key", i); });
    auto what = [&] { return fmt::format("metadata {} ({})", i, key); };
    if (kv_index_.count(key)) c.error_at(key_at, what, "duplicate key");
    GgufType type = read_type(c, [&] { return what() + " value type"; });
    GgufValue value = read_value(c, type, what, 0);
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back(GgufKV{std::move(key), std::move(value)});
  }
  if (const GgufValue* a = find("general.alignment")) {
    bool ok = a->is_integer();
    uint64_t v = ok ? a->bits() : 0;
    if (ok && (a->type() == GgufType::I8 || a->type() == GgufType::I16 || a->type() == GgufType::I32 ||
               a->type() == GgufType::I64))
      ok = a->as_int() > 0;
    if (!ok || v == 0 || !std::has_single_bit(v) || v > kMaxAlignment)
      fail(ErrorCode::kInvalidFile, "{}: general.alignment: {} value {} is not a power of two in [1, 2^30]",
           name_, gguf_type_name(a->type()), a->is_integer() ? std::to_string(v) : std::string("(non-integer)"));
    alignment_ = static_cast<uint32_t>(v);
  }

  // Tensor infos.
  if (n_tensors > c.remaining() / 24)
    c.error_at(n_tensors_at, field("tensor count"),
               fmt::format("{} tensor infos cannot fit in the {} bytes left after the metadata", n_tensors,
                           c.remaining()));
  tensors_.reserve(static_cast<size_t>(n_tensors));
  std::vector<size_t> offset_at;  // file offset of each tensor's `offset` field, for error messages
  offset_at.reserve(static_cast<size_t>(n_tensors));
  std::unordered_set<std::string> names;
  names.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    size_t name_at = c.pos();
    std::string name = c.read_string([&] { return fmt::format("tensor info {} name", i); });
    auto what = [&] { return fmt::format("tensor info {} ({})", i, name); };
    if (!names.insert(name).second) c.error_at(name_at, what, "duplicate tensor name");
    GgufTensor t;
    size_t n_dims_at = c.pos();
    uint32_t n_dims = c.read<uint32_t>([&] { return what() + ": n_dims"; });
    if (n_dims > kGgufMaxDims)
      c.error_at(n_dims_at, [&] { return what() + ": n_dims " + std::to_string(n_dims); },
                 fmt::format("exceeds {}", kGgufMaxDims));
    int64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      size_t dim_at = c.pos();
      auto dw = [&] { return fmt::format("{}: ne[{}]", what(), d); };
      uint64_t ne = c.read<uint64_t>(dw);
      if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        c.error_at(dim_at, dw, fmt::format("{} does not fit in int64", ne));
      auto sne = static_cast<int64_t>(ne);
      if (sne != 0 && numel > std::numeric_limits<int64_t>::max() / sne)
        c.error_at(dim_at, dw, fmt::format("element count overflows int64 ({} x {})", numel, ne));
      numel *= sne;
      t.ne.push_back(sne);
    }
    size_t type_at = c.pos();
    uint32_t type_id = c.read<uint32_t>([&] { return what() + ": type"; });
    try {
      t.info.dtype = dtype_from_gguf_id(type_id);
    } catch (const Error& e) {
      c.error_at(type_at, [&] { return what() + ": type"; }, e.what());
    }
    const DTypeInfo& ti = dtype_info(t.info.dtype);
    int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % ti.block_size != 0)
      c.error_at(type_at, [&] { return what() + ": type"; },
                 fmt::format("ne[0] = {} is not a multiple of the {} block size {}", ne0, ti.name, ti.block_size));
    // numel is a multiple of ne0, hence of the block size; bytes = blocks * block_bytes without overflow.
    int64_t blocks = numel / ti.block_size;
    if (blocks > std::numeric_limits<int64_t>::max() / ti.block_bytes)
      c.error_at(type_at, [&] { return what() + ": type"; }, fmt::format("byte size of {} elements overflows", numel));
    t.info.bytes = blocks * ti.block_bytes;
    size_t off_at = c.pos();
    t.offset = c.read<uint64_t>([&] { return what() + ": data offset field"; });
    if (t.offset % alignment_ != 0)
      c.error_at(off_at, [&] { return what() + ": data offset field"; },
                 fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, alignment_));
    t.info.name = std::move(name);
    t.info.shape.assign(t.ne.rbegin(), t.ne.rend());
    offset_at.push_back(off_at);
    tensors_.push_back(std::move(t));
  }
  header_end_ = c.pos();
  data_offset_ = align_up(header_end_, alignment_);

  // Tensor data: inside the file and not overlapping.
  const uint64_t size = size_;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    uint64_t bytes = static_cast<uint64_t>(t.info.bytes);
    if (bytes == 0) continue;
    if (data_offset_ > size || t.offset > size - data_offset_ || bytes > size - data_offset_ - t.offset)
      c.error_at(offset_at[i], [&] { return fmt::format("tensor info {} ({}): data offset field", i, t.info.name); },
                 fmt::format("data [{}, {}) relative to the data section at {} runs past the end of the {}-byte file",
                             t.offset, t.offset + bytes, data_offset_, size));
    t.info.data = data_ + data_offset_ + t.offset;
  }
  std::vector<size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  const GgufTensor* prev = nullptr;
  for (size_t idx : order) {
    const GgufTensor& t = tensors_[idx];
    if (t.info.bytes == 0) continue;
    if (prev && prev->offset + static_cast<uint64_t>(prev->info.bytes) > t.offset)
      c.error_at(offset_at[idx], [&] { return fmt::format("tensor info {} ({}): data offset field", idx, t.info.name); },
                 fmt::format("data [{}, {}) overlaps tensor {} at [{}, {})", t.offset, t.offset + t.info.bytes,
                             prev->info.name, prev->offset, prev->offset + prev->info.bytes));
    prev = &t;
  }
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = kv_index_.find(std::string(key));
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

std::vector<std::string> gguf_split_paths(const std::string& path) {
  // <prefix>-NNNNN-of-MMMMM.gguf
  constexpr std::string_view kExt = ".gguf";
  constexpr size_t kSuffix = 1 + 5 + 4 + 5;  // "-00001-of-00003"
  if (path.size() < kSuffix + kExt.size() || path.compare(path.size() - kExt.size(), kExt.size(), kExt) != 0)
    return {path};
  std::string_view s(path);
  s.remove_suffix(kExt.size());
  std::string_view tail = s.substr(s.size() - kSuffix);
  auto digits = [](std::string_view d) { return std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; }); };
  if (tail[0] != '-' || tail.substr(6, 4) != "-of-" || !digits(tail.substr(1, 5)) || !digits(tail.substr(10, 5)))
    return {path};
  int no = std::stoi(std::string(tail.substr(1, 5)));
  int count = std::stoi(std::string(tail.substr(10, 5)));
  if (count < 1 || no < 1 || no > count) return {path};
  std::string prefix(s.substr(0, s.size() - kSuffix));
  std::vector<std::string> out;
  for (int i = 1; i <= count; ++i) out.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", prefix, i, count));
  return out;
}

GgufReader::GgufReader(const std::string& path) {
  std::vector<std::string> paths = gguf_split_paths(path);
  files_.reserve(paths.size());
  for (const auto& p : paths) files_.emplace_back(p);
  const size_t n = files_.size();

  auto int_key = [](const GgufFile& f, const char* key, int64_t& out) {
    const GgufValue* v = f.find(key);
    if (!v) return false;
    if (!v->is_integer()) fail(ErrorCode::kInvalidFile, "{}: {}: expected an integer, got {}", f.path(), key, gguf_type_name(v->type()));
    out = v->as_int();
    return true;
  };
  for (size_t i = 0; i < n; ++i) {
    const GgufFile& f = files_[i];
    int64_t v = 0;
    if (int_key(f, "split.count", v) && v != static_cast<int64_t>(n))
      fail(ErrorCode::kInvalidFile, "{}: split.count is {} but the file name says {} splits", f.path(), v, n);
    if (n > 1 && int_key(f, "split.no", v) && v != static_cast<int64_t>(i))
      fail(ErrorCode::kInvalidFile, "{}: split.no is {} but the file name says split {} (0-based)", f.path(), v, i);
  }
  int64_t declared = 0;
  if (n == 1 && int_key(files_[0], "split.count", declared) && declared > 1)
    fail(ErrorCode::kInvalidFile, "{}: split.count is {} but the name is not of the form <name>-00001-of-{:05d}.gguf",
         files_[0].path(), declared, declared);

  std::unordered_set<std::string> names;
  for (size_t i = 0; i < n; ++i) {
    for (const GgufTensor& t : files_[i].tensors()) {
      if (!names.insert(t.info.name).second)
        fail(ErrorCode::kInvalidFile, "{}: tensor {} also appears in an earlier split", files_[i].path(), t.info.name);
      tensors_.push_back(t);
      tensors_.back().split = static_cast<uint32_t>(i);
    }
  }
  if (n > 1 && int_key(files_[0], "split.tensors.count", declared) && declared != static_cast<int64_t>(tensors_.size()))
    fail(ErrorCode::kInvalidFile, "{}: split.tensors.count is {} but the {} splits hold {} tensors", files_[0].path(),
         declared, n, tensors_.size());
}

nlohmann::json GgufReader::metadata_json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& kv : kvs()) j[kv.key] = kv.value.to_json();
  return j;
}

}  // namespace ft
