// `ft tokenize` as a user runs it: ids of a text with and without special-token parsing, decoding
// ids back, and bad input exiting 2. Expected ids come from shared/fixtures/gguf/qwen3/tokenizer_cases.json
// (Hugging Face tokenizers) and the stories260K README ("Once upon a time" -> 1, 403, 407, 261, 378).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string shared(const std::string& rel) { return ::ft::testing::shared_dir() + "/" + rel; }

TEST(Tokenize, SentencePieceAddsBos) {
  Result r = run_ft("tokenize --model " + quote(shared("data/models/stories260K.gguf")) + " 'Once upon a time'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1,403,407,261,378\n");
}

TEST(Tokenize, TextStartingWithBosWarnsOfTwo) {
  // The model adds BOS and the text's own "<s>" parses as BOS too: both are kept (as llama.cpp does),
  // with a warning.
  Result r = run_ft("tokenize --model " + quote(shared("data/models/stories260K.gguf")) + " --special '<s>Once'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "1,1,403\n");
  EXPECT_NE(r.err.find("2 BOS tokens"), std::string::npos) << r.err;
  Result one = run_ft("tokenize --model " + quote(shared("data/models/stories260K.gguf")) + " --special 'Once'");
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.err.find("BOS"), std::string::npos) << one.err;
}

TEST(Tokenize, MatchesHuggingFaceCasesAndRoundTrips) {
  auto cases = nlohmann::json::parse(::ft::testing::read_file(shared("fixtures/gguf/qwen3/tokenizer_cases.json")));
  const std::string model = quote(shared("fixtures/gguf/qwen3/qwen3-bf16.gguf"));
  int checked = 0;
  for (const auto& c : cases["cases"]) {
    const std::string text = c["text"].get<std::string>();
    if (text.empty() || text.find('\n') != std::string::npos || text.find('\'') != std::string::npos) continue;
    std::string want;
    for (const auto& id : c["ids"]) {
      if (!want.empty()) want += ',';
      want += std::to_string(id.get<int>());
    }
    Result r = run_ft("tokenize --model " + model + " " + quote(text));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, want + "\n") << text;
    Result back = run_ft("tokenize --model " + model + " --ids " + want);
    ASSERT_EQ(back.code, 0) << back.err;
    EXPECT_EQ(back.out, text + "\n");
    if (++checked == 4) break;
  }
  EXPECT_EQ(checked, 4);
}

TEST(Tokenize, SpecialTokensOnlyWhenAsked) {
  const std::string model = quote(shared("fixtures/gguf/qwen3/qwen3-bf16.gguf"));
  Result plain = run_ft("tokenize --model " + model + " '<|im_start|>'");
  Result special = run_ft("tokenize --special --model " + model + " '<|im_start|>'");
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(special.code, 0) << special.err;
  EXPECT_EQ(special.out, "1\n");  // <|im_start|> is id 1 in the fixture tokenizer
  EXPECT_NE(plain.out, "1\n");
}

TEST(Tokenize, BadInputExits2) {
  Result r = run_ft("tokenize --model " + quote(shared("fixtures/gguf/qwen3/qwen3-bf16.gguf")) + " --ids 1,x");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--ids"), std::string::npos) << r.err;
  Result out_of_range = run_ft("tokenize --model " + quote(shared("fixtures/gguf/qwen3/qwen3-bf16.gguf")) + " --ids 999999");
  EXPECT_EQ(out_of_range.code, 2);
  Result missing = run_ft("tokenize --model /nonexistent.gguf hi");
  EXPECT_EQ(missing.code, 2);
}

}  // namespace
}  // namespace ft
