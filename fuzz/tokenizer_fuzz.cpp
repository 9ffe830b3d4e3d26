// libFuzzer harness: a Hugging Face tokenizer.json (up to the input's first NUL byte) through
// Vocab::from_hf_json, then the input's tail as text through encode and as token ids through decode
// and the streaming Detokenizer. Refusals (ft::Error: unsupported components, malformed fields, text
// that is not UTF-8) are the expected outcome of bad input; any other exception, a crash, a leak or UB
// fails. Invariants checked: every encoded id is in the vocabulary; decoding text the vocabulary
// encoded gives valid UTF-8; the Detokenizer fed the ids one at a time (and flushed) gives exactly
// what decode gives for the whole sequence (detokenizer.h promises it), for the encoded ids and for
// ids taken from the tail's bytes, with and without special tokens. Built and run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace {

// Feeds `ids` one at a time; the concatenated chunks must equal decode(ids).
void check_streaming(const ft::Vocab& v, const std::vector<int32_t>& ids, bool skip_special) {
  ft::Detokenizer d(v, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += d.feed(id);
  streamed += d.flush();
  if (streamed != v.decode(ids, skip_special)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\0');
  if (cut == std::string_view::npos) return 0;
  const auto json = nlohmann::json::parse(input.substr(0, cut), nullptr, false);
  if (json.is_discarded()) return 0;
  const std::string_view tail = input.substr(cut + 1);
  try {
    const ft::Vocab v = ft::Vocab::from_hf_json(json);
    if (v.n_tokens() <= 0) return 0;
    for (bool special : {false, true}) {
      ft::EncodeOptions opts;
      opts.parse_special = special;
      std::vector<int32_t> ids;
      try {
        ids = v.encode(tail, opts);
      } catch (const ft::Error&) {
        if (ft::utf8_first_invalid(tail) == std::string_view::npos) std::abort();  // only text that is not UTF-8 is refused
        continue;
      }
      for (int32_t id : ids)
        if (id < 0 || id >= v.n_tokens()) std::abort();
      if (ft::utf8_first_invalid(v.decode(ids, false)) != std::string_view::npos) std::abort();
      check_streaming(v, ids, true);
      check_streaming(v, ids, false);
    }
    // Arbitrary ids: two bytes each, taken modulo the vocabulary size.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < tail.size(); i += 2)
      ids.push_back(static_cast<int32_t>((static_cast<uint8_t>(tail[i]) << 8 | static_cast<uint8_t>(tail[i + 1])) %
                                         v.n_tokens()));
    check_streaming(v, ids, true);
    check_streaming(v, ids, false);
  } catch (const ft::Error&) {
  }
  return 0;
}
