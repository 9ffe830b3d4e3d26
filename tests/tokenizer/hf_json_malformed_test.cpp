// Malformed tokenizer.json that fuzz/tokenizer_fuzz.cpp found escaping Vocab::from_hf_json as something
// other than an ft::Error or a working vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/detokenizer.h"
#include "tokenizer/vocab.h"

namespace ft {
namespace {

TEST(HfJsonMalformed, ByteTokenWithoutHexDigitsIsText) {
  // A byte-fallback vocabulary's "<0x..>" token whose digits are not hex: std::stoi threw
  // std::invalid_argument out of the loader. It is now an ordinary token whose text is itself.
  const auto tok = nlohmann::json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true}],
    "normalizer": null, "pre_tokenizer": null, "decoder": null,
    "model": {"type": "BPE", "unk_token": "<unk>", "byte_fallback": true,
              "vocab": {"<unk>": 0, "<0x41>": 1, "<0xZZ>": 2, "<0x-1>": 3, "a": 4}, "merges": []}})");
  const Vocab v = Vocab::from_hf_json(tok);
  EXPECT_EQ(v.piece(1), "A");
  EXPECT_EQ(v.piece(2), "<0xZZ>");
  EXPECT_EQ(v.piece(3), "<0x-1>");
  const std::vector<int32_t> ids = {4, 2, 1};
  EXPECT_EQ(v.decode(ids), "a<0xZZ>A");
  Detokenizer d(v);
  std::string streamed;
  for (int32_t id : ids) streamed += d.feed(id);
  EXPECT_EQ(streamed + d.flush(), "a<0xZZ>A");
}

}  // namespace
}  // namespace ft
