// Random bytes and random ids into encoder and decoder: either a result or an ft::Error, never a
// crash (run under the ASan build to catch memory errors).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "util/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/utf8.h"
#include "vocab_fixtures.h"

namespace ft::testing {
namespace {

std::string random_utf8(std::mt19937& rng, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    uint32_t cp;
    switch (rng() % 6) {
      case 0: cp = rng() % 0x80; break;
      case 1: cp = 0x80 + rng() % 0x780; break;
      case 2: cp = 0x800 + rng() % 0xF800; break;
      case 3: cp = 0x10000 + rng() % 0x100000; break;
      case 4: cp = " \t\n<|>'sS"[rng() % 9]; break;
      default: cp = 0x2581; break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    utf8_append(s, cp);
  }
  return s;
}

// True when every byte has a token (byte-level character or <0xXX>), so encoding is lossless.
// Falcon, MPT, StarCoder and Refact lack some rare byte-level characters (control bytes, 0xF5..);
// those bytes are dropped, as in llama.cpp.
bool covers_all_bytes(const Vocab& v) {
  if (v.type() == VocabType::kWordPiece) return false;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    if (v.find(hex) < 0 && v.find(byte_level_encode(std::string(1, static_cast<char>(b)))) < 0) return false;
  }
  return true;
}

TEST(TokenizerFuzz, RandomInputNeverCrashes) {
  std::mt19937 rng(99);
  for (const std::string& name : loadable_vocab_names()) {
    const Vocab* v = shared_vocab(name);
    const bool lossless = covers_all_bytes(*v);
    for (const char* full : {"gpt-2", "llama-spm", "llama-bpe", "phi-3", "deepseek-coder", "deepseek-llm"})
      if (name == full) {
        EXPECT_TRUE(lossless) << name;
      }
    for (int round = 0; round < 60; ++round) {
      // Random bytes: invalid UTF-8 must be rejected with a clear error; valid input must encode.
      std::string bytes(rng() % 64, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      const bool valid = utf8_first_invalid(bytes) == std::string::npos;
      try {
        v->encode(bytes, {.add_special = true, .parse_special = (round % 2) == 1});
        EXPECT_TRUE(valid) << name;
      } catch (const Error& e) {
        EXPECT_FALSE(valid) << name << ": " << e.what();
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      }
      // Random valid UTF-8 with special-looking characters.
      const std::string text = random_utf8(rng, rng() % 80);
      const auto ids = v->encode(text, {.add_special = true, .parse_special = (round % 2) == 0});
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < v->n_tokens()) << name;
      if (lossless && round % 2 == 1) {
        // SentencePiece cannot tell U+2581 in the input from an escaped space: leave it out.
        std::string plain;
        for (size_t i = 0; i < text.size(); ++i) {
          if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
            plain += '_';
            i += 2;
          } else {
            plain += text[i];
          }
        }
        EXPECT_EQ(v->decode(v->encode(plain, {.add_special = false})), plain) << name;
      }
      // Random ids, some out of range.
      std::vector<int32_t> rid(rng() % 16);
      bool out_of_range = false;
      for (int32_t& id : rid) {
        id = static_cast<int32_t>(rng() % (v->n_tokens() + 8)) - 4;
        out_of_range |= id < 0 || id >= v->n_tokens();
      }
      try {
        const std::string s = v->decode(rid, round % 3 == 0);
        EXPECT_FALSE(out_of_range);
        EXPECT_EQ(utf8_first_invalid(s), std::string::npos);
      } catch (const Error& e) {
        EXPECT_TRUE(out_of_range) << e.what();
        EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos);
      }
    }
  }
}

TEST(TokenizerFuzz, Utf8Repair) {
  EXPECT_EQ(utf8_repaired("a\xC3"), "a\xEF\xBF\xBD");
  EXPECT_EQ(utf8_repaired("\xE2\x82"), "\xEF\xBF\xBD");                                // one maximal subpart
  EXPECT_EQ(utf8_repaired("\xF0\x9F\xA6\x99"), "\xF0\x9F\xA6\x99");                    // 🦙
  EXPECT_EQ(utf8_repaired("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                    // overlong
  EXPECT_EQ(utf8_repaired("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");    // surrogate
  std::string out;
  EXPECT_EQ(utf8_repair("ab\xF0\x9F", out, false), 2u);  // incomplete tail left unconsumed
  EXPECT_EQ(out, "ab");
}

}  // namespace
}  // namespace ft::testing

namespace ft::testing {
namespace {

// Long runs stress the regex engine (backtracking, JIT stack) and the merge loops.
TEST(TokenizerFuzz, LongRunsEncodeAndRoundTrip) {
  std::vector<std::string> runs = {
      std::string(30000, ' '), std::string(30000, 'a'), std::string(20000, '7'),
      std::string(20000, '\n'), std::string(20000, '!'), std::string(),
  };
  for (int i = 0; i < 10000; ++i) runs.back() += "\xE6\x88\x91";  // 我
  for (const std::string& name : loadable_vocab_names()) {
    const Vocab* v = shared_vocab(name);
    for (const std::string& s : runs) {
      const auto ids = v->encode(s, {.add_special = false});
      ASSERT_TRUE(!ids.empty() || v->type() == VocabType::kWordPiece) << name;  // WordPiece drops whitespace
      if (covers_all_bytes(*v)) {
        EXPECT_EQ(v->decode(ids), s) << name << " run of " << s.substr(0, 3);
      }
    }
  }
}

}  // namespace
}  // namespace ft::testing
