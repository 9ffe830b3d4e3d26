// libFuzzer harness: a JSON Schema through the structured-output compiler (server/json_schema_grammar)
// and, when it compiles, a walk of the grammar over a small byte-level vocabulary (every byte and a
// few multi-byte pieces), choosing among the allowed tokens by the input's own bytes under a budget.
// Refusals (ApiException 400, ft::Error) are the expected outcome of bad schemas. Invariants checked:
// every token the mask allows is accepted, and a walk that ends complete parses as JSON. Built and run
// by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/grammar/grammar_constraint.h"
#include "server/errors.h"
#include "server/json_schema_grammar.h"
#include "util/error.h"

namespace {

std::shared_ptr<const ft::grammar::TokenTrie> small_trie() {
  static const auto trie = [] {
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.emplace_back(1, static_cast<char>(b));
    for (const char* p : {"\":", "\",\"", "{\"", "\"}", "true", "false", "null", "12", "-0", "e+", "\xC3\xA9", "\\u00"})
      pieces.emplace_back(p);
    std::vector<uint8_t> usable(pieces.size(), 1);
    return std::make_shared<const ft::grammar::TokenTrie>(pieces, usable);
  }();
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  // The schema is the input up to its first NUL; the bytes after it steer the walk.
  const size_t cut = text.find('\0');
  const auto schema = nlohmann::ordered_json::parse(text.substr(0, cut), nullptr, false);
  if (schema.is_discarded()) return 0;
  std::shared_ptr<const ft::grammar::Grammar> g;
  try {
    g = ft::server::json_schema_grammar(schema, "schema");
  } catch (const ft::server::ApiException&) {
    return 0;
  } catch (const ft::Error&) {
    return 0;
  }
  ft::grammar::GrammarConstraint c(g, small_trie());
  const std::string_view steer = cut == std::string_view::npos ? std::string_view() : text.substr(cut + 1);
  const int64_t V = small_trie()->vocab_size(), budget = 64;
  std::vector<uint32_t> mask(static_cast<size_t>((V + 31) / 32));
  std::string out;
  for (int64_t step = 0; step < budget; ++step) {
    std::fill(mask.begin(), mask.end(), 0u);
    const int64_t n = c.allowed(mask, budget - step);
    if (n == 0) break;
    // The k-th allowed token, k from the steering bytes.
    const uint64_t pick = steer.empty() ? 0 : static_cast<uint8_t>(steer[static_cast<size_t>(step) % steer.size()]) *
                                                  2654435761u;
    int64_t k = static_cast<int64_t>(pick % static_cast<uint64_t>(n)), id = -1;
    for (int64_t t = 0; t < V && id < 0; ++t)
      if ((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u)
        if (k-- == 0) id = t;
    if (id < 0 || !c.accept(static_cast<int32_t>(id))) std::abort();  // an allowed token must be accepted
    out += small_trie()->piece(static_cast<int32_t>(id));
    if (c.complete() && (steer.empty() || steer[static_cast<size_t>(step) % steer.size()] & 1)) break;
  }
  if (c.complete() && nlohmann::json::parse(out, nullptr, false).is_discarded()) std::abort();  // complete = JSON
  return 0;
}
