// Streaming detokenization: feeding ids one by one gives the whole-sequence decode, in valid UTF-8
// chunks, for every vocabulary in shared/data and the fixture tokenizer.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "util/error.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"
#include "vocab_fixtures.h"

namespace ft::testing {
namespace {

size_t count_codepoints(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// Streams `ids`, checking every chunk is valid UTF-8; returns the concatenation.
std::string stream(const Vocab& v, const std::vector<int32_t>& ids, bool skip_special, size_t* max_pending = nullptr) {
  Detokenizer d(v, skip_special);
  std::string all;
  for (int32_t id : ids) {
    const std::string chunk = d.feed(id);
    EXPECT_EQ(utf8_first_invalid(chunk), std::string::npos) << "invalid UTF-8 chunk after id " << id;
    if (max_pending) *max_pending = std::max(*max_pending, d.pending_bytes());
    all += chunk;
  }
  const std::string tail = d.flush();
  EXPECT_EQ(utf8_first_invalid(tail), std::string::npos);
  return all + tail;
}

class DetokenizerVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DetokenizerVocabTest, MixedScriptTextStreamsLikeWholeDecode) {
  const Vocab* v = shared_vocab(GetParam());
  ASSERT_NE(v, nullptr);
  const std::string& text = mixed_script_text();
  ASSERT_GE(count_codepoints(text), 2000u);
  const auto ids = v->encode(text, {.add_special = true, .parse_special = false});
  const std::string whole = v->decode(ids);
  EXPECT_EQ(stream(*v, ids, true), whole);
  EXPECT_EQ(stream(*v, ids, false), v->decode(ids, false));
  if (v->type() != VocabType::kWordPiece) {
    EXPECT_EQ(whole, text);  // lossless vocabularies give the text back
  }
}

TEST_P(DetokenizerVocabTest, RandomIdsStreamLikeWholeDecode) {
  const Vocab* v = shared_vocab(GetParam());
  ASSERT_NE(v, nullptr);
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(0, v->n_tokens() - 1);
  // Byte tokens (byte fallback or the 256 byte-level characters) make broken UTF-8 likely.
  std::vector<int32_t> bytes;
  for (int32_t id = 0; id < v->n_tokens(); ++id)
    if (v->piece(id).size() == 1 && static_cast<unsigned char>(v->piece(id)[0]) >= 0x80) bytes.push_back(id);
  size_t max_pending = 0;
  for (int round = 0; round < 200; ++round) {
    std::vector<int32_t> ids(1 + rng() % 40);
    for (int32_t& id : ids) id = (!bytes.empty() && rng() % 2) ? bytes[rng() % bytes.size()] : any(rng);
    const bool skip = round % 2 == 0;
    const std::string whole = v->decode(ids, skip);
    EXPECT_EQ(utf8_first_invalid(whole), std::string::npos);
    ASSERT_EQ(stream(*v, ids, skip, &max_pending), whole) << GetParam() << " round " << round;
  }
  EXPECT_LE(max_pending, 3u);
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, DetokenizerVocabTest, ::testing::ValuesIn(loadable_vocab_names()),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(Detokenizer, HoldsBackBytesOfAnUnfinishedCharacter) {
  const Vocab* v = shared_vocab("llama-spm");
  ASSERT_NE(v, nullptr);
  // "🦙" has no token in Llama 2: ▁ then byte fallback <0xF0> <0x9F> <0xA6> <0x99>.
  const auto ids = v->encode("🦙", {.add_special = false});
  ASSERT_EQ(ids, (std::vector<int32_t>{29871, 243, 162, 169, 156}));
  Detokenizer d(*v);
  EXPECT_EQ(d.feed(ids[0]), "");  // the leading space of the first piece is dropped
  EXPECT_EQ(d.feed(ids[1]), "");
  EXPECT_EQ(d.feed(ids[2]), "");
  EXPECT_EQ(d.feed(ids[3]), "");
  EXPECT_EQ(d.pending_bytes(), 3u);
  EXPECT_EQ(d.feed(ids[4]), "🦙");
  EXPECT_EQ(d.pending_bytes(), 0u);
  EXPECT_EQ(d.flush(), "");
  // An unfinished sequence at the end becomes U+FFFD, as in whole decoding.
  EXPECT_EQ(d.feed(243), "");
  EXPECT_EQ(d.feed(162), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(v->decode(std::vector<int32_t>{243, 162}), "\xEF\xBF\xBD");
  // A broken sequence followed by ASCII: U+FFFD then the text, never raw bytes.
  EXPECT_EQ(d.feed(243), "");
  ASSERT_EQ(v->token(29874).text, "a");
  EXPECT_EQ(d.feed(29874), "\xEF\xBF\xBD" "a");
}

TEST(Detokenizer, SentencePieceLeadingSpace) {
  const Vocab* v = shared_vocab("llama-spm");
  ASSERT_NE(v, nullptr);
  const auto ids = v->encode("Hello world");  // <s> ▁Hello ▁world
  Detokenizer d(*v);
  EXPECT_EQ(d.feed(ids[0]), "");        // BOS skipped
  EXPECT_EQ(d.feed(ids[1]), "Hello");   // first piece: leading space dropped
  EXPECT_EQ(d.feed(ids[2]), " world");  // later pieces keep theirs
  Detokenizer raw(*v, /*skip_special=*/false);
  EXPECT_EQ(raw.feed(ids[0]), "<s>");
  EXPECT_EQ(raw.feed(ids[1]), " Hello");
  EXPECT_EQ(v->decode(ids, false), "<s> Hello world");
  // Generated tokens continue their prompt: "Once" + " upon", never "Onceupon".
  Detokenizer gen(*v, /*skip_special=*/true, /*starts_text=*/false);
  EXPECT_EQ(gen.feed(ids[1]), " Hello");
  EXPECT_EQ(gen.feed(ids[2]), " world");
  EXPECT_EQ(gen.flush(), "");
  EXPECT_EQ(gen.feed(ids[1]), " Hello");  // flush keeps the kind of stream
  // Which kind a generation is: a BOS-only prompt has no text (the output starts it), "Hello" has.
  EXPECT_FALSE(prompt_has_text(*v, std::vector<int32_t>{ids[0]}));
  EXPECT_FALSE(prompt_has_text(*v, std::vector<int32_t>{}));
  EXPECT_TRUE(prompt_has_text(*v, std::vector<int32_t>{ids[0], ids[1]}));
}

TEST(Detokenizer, ByteLevelPieces) {
  const Vocab* v = shared_vocab("gpt-2");
  ASSERT_NE(v, nullptr);
  const std::string text = "héllo 世界 🦙!";
  const auto ids = v->encode(text, {.add_special = false});
  EXPECT_EQ(stream(*v, ids, true), text);
  EXPECT_THROW(Detokenizer(*v).feed(v->n_tokens()), Error);
  EXPECT_THROW(Detokenizer(*v).feed(-1), Error);
}

}  // namespace
}  // namespace ft::testing
