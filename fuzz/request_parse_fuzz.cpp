// libFuzzer harness: a request body through parse_json_body and each endpoint's request parser
// (chat completions, completions, Anthropic messages, the Responses API). Refusals (ApiException, ft::Error) are the
// expected outcome of bad input; anything else (a crash, a leak, undefined behaviour under ASan and
// UBSan, an uncaught exception) fails. Built and run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "server/errors.h"
#include "server/request_parse.h"
#include "server/responses.h"
#include "util/error.h"

namespace {

template <typename F>
void refused_or_parsed(F&& parse) {
  try {
    parse();
  } catch (const ft::server::ApiException&) {
  } catch (const ft::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::ordered_json body;
  try {
    body = ft::server::parse_json_body(text);
  } catch (const ft::server::ApiException&) {
    return 0;
  }
  refused_or_parsed([&] { ft::server::parse_chat_request(body); });
  refused_or_parsed([&] { ft::server::parse_completion_request(body); });
  refused_or_parsed([&] { ft::server::parse_anthropic_request(body, /*count_only=*/false); });
  refused_or_parsed([&] { ft::server::parse_anthropic_request(body, /*count_only=*/true); });
  static ft::server::ResponseStore store;  // empty: previous_response_id names nothing
  refused_or_parsed([&] { ft::server::parse_responses_request(body, store); });
  return 0;
}
