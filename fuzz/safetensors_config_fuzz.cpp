// libFuzzer harness: a Hugging Face checkpoint's text parts. Input: config.json text up to the first
// NUL byte, then a .safetensors file (its u64 header size starts with NUL bytes for any header under
// 16 MiB). The config goes through parse_hf_config (formats/hf_config) and config_from_hf +
// ModelConfig::validate (model/config), the safetensors file through SafetensorsFile from an
// exact-size heap buffer (ASan sees any read past the end). Refusals (ft::Error) are the expected
// outcome of bad input; any other exception, a crash, a leak or UB fails. Invariants checked on a file
// that parses: tensors come in data-offset order inside the data section, do not overlap, and hold
// exactly numel x element-size bytes at the pointer their offsets give; __metadata__ values are
// strings. Built and run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "util/error.h"

namespace {

void config_part(std::string_view text) {
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return;
  try {
    const ft::HfConfig h = ft::parse_hf_config(j, "config.json");
    if (h.hidden_size <= 0 || h.num_hidden_layers <= 0 || h.num_attention_heads <= 0 || h.vocab_size <= 0)
      std::abort();  // parse_hf_config refuses a config without them
    const nlohmann::json& text_config =
        !j.contains("hidden_size") && j.contains("text_config") && j["text_config"].is_object() ? j["text_config"] : j;
    const ft::ModelConfig c = ft::config_from_hf(text_config, h.model_type);
    c.validate();
  } catch (const ft::Error&) {
  }
}

void safetensors_part(std::string_view bytes) {
  try {
    const ft::SafetensorsFile f("fuzz.safetensors", std::vector<uint8_t>(bytes.begin(), bytes.end()));
    if (f.data_offset() < 8 || f.data_offset() > bytes.size()) std::abort();
    const uint64_t data_size = bytes.size() - f.data_offset();
    // The header as the file says it (it parsed, so it is a JSON object).
    const auto header = nlohmann::json::parse(bytes.substr(8, f.data_offset() - 8));
    uint64_t prev_begin = 0, prev_end = 0;
    for (const ft::TensorInfo& t : f.tensors()) {
      int64_t numel = 1;
      for (int64_t d : t.shape) {
        if (d < 0) std::abort();
        numel *= d;
      }
      if (t.bytes != numel * ft::dtype_info(t.dtype).block_bytes) std::abort();
      const auto& offsets = header.at(t.name).at("data_offsets");
      const auto begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
      if (end - begin != static_cast<uint64_t>(t.bytes) || end > data_size) std::abort();  // inside the data
      if (begin < prev_begin) std::abort();                                               // in offset order
      if (t.bytes == 0) {
        if (t.data != nullptr) std::abort();
        continue;
      }
      if (begin < prev_end) std::abort();  // disjoint
      prev_begin = begin, prev_end = end;
      // The pointer shows the tensor's own bytes.
      if (!t.data || bytes.compare(f.data_offset() + begin, end - begin,
                                   std::string_view(reinterpret_cast<const char*>(t.data), end - begin)) != 0)
        std::abort();
    }
    for (auto m = f.metadata().begin(); m != f.metadata().end(); ++m)
      if (!m.value().is_string()) std::abort();
  } catch (const ft::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t cut = text.find('\0');
  config_part(text.substr(0, cut));
  if (cut != std::string_view::npos) safetensors_part(text.substr(cut));
  return 0;
}
