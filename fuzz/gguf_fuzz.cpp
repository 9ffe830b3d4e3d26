// libFuzzer harness: a GGUF file through the reader (formats/gguf_reader), parsed from an exact-size
// heap buffer so ASan sees any read past the end. Refusals (ft::Error) are the expected outcome of bad
// files. Invariants checked on a file that parses: every tensor's data lies inside the file at an
// aligned offset with the byte size its type and shape give, no two tensors overlap, and the file
// written back by GgufWriter from the reader's metadata and tensors re-reads with equal metadata and
// tensor bytes (gguf_writer.h promises that). The metadata then goes through config_from_gguf
// (model/config), which must refuse with ft::Error or give a config. Built and run by `make fuzz`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "model/config.h"
#include "util/error.h"

namespace {

void check_layout(const ft::GgufFile& f) {
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const ft::GgufTensor& t : f.tensors()) {
    const ft::DTypeInfo& ti = ft::dtype_info(t.info.dtype);
    int64_t numel = 1;
    for (int64_t d : t.ne) numel *= d;
    if (t.ne.size() > ft::kGgufMaxDims) std::abort();
    if (t.info.numel() != numel || numel % ti.block_size != 0) std::abort();
    if (t.info.bytes != numel / ti.block_size * ti.block_bytes) std::abort();
    if (t.offset % f.alignment() != 0) std::abort();
    if (t.info.bytes == 0) continue;
    const uint64_t begin = f.data_offset() + t.offset, end = begin + static_cast<uint64_t>(t.info.bytes);
    if (end > f.file_size() || t.info.data != f.file_data() + begin) std::abort();  // inside the file
    spans.emplace_back(begin, end);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) std::abort();  // no overlap
}

// Writes `f` back and re-reads it: the same metadata (exact values) and tensors (type, shape, bytes).
void check_round_trip(const ft::GgufFile& f) {
  ft::GgufWriter w(f.version());
  for (const ft::GgufKV& kv : f.kvs()) w.add(kv.key, kv.value);
  for (const ft::GgufTensor& t : f.tensors())
    w.add_tensor_ref(t.info.name, t.info.dtype, t.info.shape, t.info.data, t.info.bytes);
  const std::string bytes = w.serialize();
  const ft::GgufFile g("round-trip.gguf", std::vector<uint8_t>(bytes.begin(), bytes.end()));
  if (g.kvs().size() != f.kvs().size() || g.tensors().size() != f.tensors().size()) std::abort();
  for (size_t i = 0; i < f.kvs().size(); ++i)
    if (g.kvs()[i].key != f.kvs()[i].key || !(g.kvs()[i].value == f.kvs()[i].value)) std::abort();
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const ft::TensorInfo &a = f.tensors()[i].info, &b = g.tensors()[i].info;
    if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.bytes != b.bytes) std::abort();
    if (a.bytes > 0 && std::memcmp(a.data, b.data, static_cast<size_t>(a.bytes)) != 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const ft::GgufFile f("fuzz.gguf", std::move(bytes));
    check_layout(f);
    check_round_trip(f);
    nlohmann::json meta = nlohmann::json::object();
    for (const ft::GgufKV& kv : f.kvs()) meta[kv.key] = kv.value.to_json();
    const ft::GgufValue* arch = f.find("general.architecture");
    if (arch && arch->type() == ft::GgufType::STRING) {
      const ft::ModelConfig c = ft::config_from_gguf(meta, arch->as_string(), arch->as_string());
      c.validate();
    }
  } catch (const ft::Error&) {
  }
  return 0;
}
