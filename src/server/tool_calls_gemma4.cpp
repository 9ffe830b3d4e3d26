// Gemma 4 tool calls (the google gemma-4 chat templates; vLLM's "gemma4" tool parser). Each call is a
// block in Gemma's own object notation,
//   <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,opts:{metric:true},tags:[<|"|>a<|"|>]}<tool_call|>
// keys bare, strings between <|"|> quote tokens (their text as is, no escapes), numbers, true / false
// and null bare, objects {k:v,...} and lists [v,...] (the template's format_argument). The arguments
// become JSON. A block that is not of this form stays content as it was; a block the reply ends
// inside gives its call when the call is complete.
#include <cctype>

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kQuote = "<|\"|>";

/** A reader of Gemma's object notation over `s`; each read_* returns nothing on a malformed value. */
struct GemmaReader {
  std::string_view s;
  size_t i = 0;
  int depth = 0;

  void skip_space() {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  }
  bool at(std::string_view lit) const { return s.substr(i, lit.size()) == lit; }

  std::optional<std::string> read_quoted() {  // at kQuote
    const size_t end = s.find(kQuote, i + kQuote.size());
    if (end == std::string_view::npos) return std::nullopt;
    std::string v(s.substr(i + kQuote.size(), end - i - kQuote.size()));
    i = end + kQuote.size();
    return v;
  }

  std::optional<ojson> read_value() {
    skip_space();
    if (i >= s.size()) return std::nullopt;
    if (at(kQuote)) {
      std::optional<std::string> v = read_quoted();
      if (!v) return std::nullopt;
      return ojson(std::move(*v));
    }
    if (s[i] == '{') return read_object();
    if (s[i] == '[') return read_array();
    const size_t end = std::min(s.size(), s.find_first_of(",}]", i));
    const std::string_view bare = trim_view(s.substr(i, end - i));
    if (bare.empty() || bare.find(kQuote) != std::string_view::npos) return std::nullopt;
    i = end;
    if (bare == "true") return ojson(true);
    if (bare == "false") return ojson(false);
    if (bare == "null" || bare == "None") return ojson(nullptr);
    const ojson n = ojson::parse(bare, nullptr, /*allow_exceptions=*/false);
    if (n.is_number()) return n;
    return ojson(std::string(bare));  // a bare word the template would not write: kept as text
  }

  std::optional<ojson> read_object() {  // at '{'
    if (++depth > 64) return std::nullopt;
    ++i;
    ojson obj = ojson::object();
    skip_space();
    if (i < s.size() && s[i] == '}') return ++i, --depth, obj;
    for (;;) {
      skip_space();
      std::string key;
      if (at(kQuote)) {
        std::optional<std::string> k = read_quoted();
        if (!k) return std::nullopt;
        key = std::move(*k);
      } else {
        const size_t colon = s.find(':', i);
        if (colon == std::string_view::npos) return std::nullopt;
        key = std::string(trim_view(s.substr(i, colon - i)));
        if (key.empty() || key.find_first_of("{}[],") != std::string::npos) return std::nullopt;
        i = colon;
      }
      skip_space();
      if (i >= s.size() || s[i] != ':') return std::nullopt;
      ++i;
      std::optional<ojson> v = read_value();
      if (!v) return std::nullopt;
      obj[key] = std::move(*v);
      skip_space();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == '}') return ++i, --depth, obj;
      return std::nullopt;
    }
  }

  std::optional<ojson> read_array() {  // at '['
    if (++depth > 64) return std::nullopt;
    ++i;
    ojson arr = ojson::array();
    skip_space();
    if (i < s.size() && s[i] == ']') return ++i, --depth, arr;
    for (;;) {
      std::optional<ojson> v = read_value();
      if (!v) return std::nullopt;
      arr.push_back(std::move(*v));
      skip_space();
      if (i < s.size() && s[i] == ',') {
        ++i;
        continue;
      }
      if (i < s.size() && s[i] == ']') return ++i, --depth, arr;
      return std::nullopt;
    }
  }
};

class Gemma4Scanner : public BlockScanner {
 public:
  Gemma4Scanner() : BlockScanner("<|tool_call>", "<tool_call|>") {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    body = trim_view(body);
    if (body.substr(0, 5) != "call:") return std::nullopt;
    body.remove_prefix(5);
    const size_t brace = body.find('{');
    if (brace == std::string_view::npos) return std::nullopt;
    const std::string_view name = trim_view(body.substr(0, brace));
    if (!plausible_tool_name(name)) return std::nullopt;
    GemmaReader r{body, brace};
    std::optional<ojson> args = r.read_object();
    if (!args || !all_space(body.substr(r.i))) return std::nullopt;
    return std::vector<ToolCall>{ToolCall{std::string(name), args->dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)}};
  }
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_gemma4_scanner() { return std::make_unique<Gemma4Scanner>(); }

}  // namespace ft::server
