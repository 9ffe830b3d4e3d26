#include "tokenizer/stop_matcher.h"

#include <gtest/gtest.h>

#include <random>

#include "tokenizer/detokenizer.h"
#include "vocab_fixtures.h"

namespace ft {
namespace {

// Feeds chunks; returns everything streamed and whether/which stop fired.
struct Streamed {
  std::string text;
  bool stopped = false;
  int index = -1;
};

Streamed run(StopMatcher& m, const std::vector<std::string>& chunks, std::vector<std::string>* outs = nullptr) {
  Streamed s;
  for (const std::string& c : chunks) {
    StopMatcher::Result r = m.feed(c);
    if (outs) outs->push_back(r.text);
    s.text += r.text;
    if (r.stopped) {
      s.stopped = true;
      s.index = r.stop_index;
      return s;
    }
  }
  s.text += m.flush();
  return s;
}

TEST(StopMatcher, StopSpanningChunksIsCutAndNeverStreamed) {
  StopMatcher m({"</answer>"});
  std::vector<std::string> outs;
  Streamed s = run(m, {"The answer is 42", "</", "ans", "wer>", " trailing"}, &outs);
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.index, 0);
  EXPECT_EQ(s.text, "The answer is 42");
  EXPECT_EQ(outs, (std::vector<std::string>{"The answer is 42", "", "", ""}));
}

TEST(StopMatcher, HeldPrefixIsReleasedWhenItDoesNotMatch) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("abc ST").text, "abc ");
  EXPECT_EQ(m.held_bytes(), 2u);
  EXPECT_EQ(m.feed("O").text, "");
  StopMatcher::Result r = m.feed("P!");  // "STOP!" would stop; "STOx" must release
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.stop, "STOP");  // the matched string itself (include_stop_str_in_output appends it)
  StopMatcher m2({"STOP"});
  EXPECT_EQ(m2.feed("abc STO").text, "abc ");
  EXPECT_EQ(m2.feed("x and more").text, "STOx and more");
  EXPECT_EQ(m2.feed("S").text, "");
  EXPECT_EQ(m2.flush(), "S");  // end of generation: held text is released
}

TEST(StopMatcher, PassedTextIsNotSearched) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.feed("a ST").text, "a ");
  EXPECT_EQ(m.pass("OP b"), "STOP b");  // the held "ST" goes out with it, unsearched
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.feed(" STOP c").text, " ");  // searched again from here
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.pass("more"), "");  // nothing after a stop
}

TEST(StopMatcher, EarliestStopWinsAndOverlappingPrefixes) {
  StopMatcher m({"world", "lo w", "\n\n"});
  Streamed s = run(m, {"hel", "lo wor", "ld"});
  EXPECT_TRUE(s.stopped);
  EXPECT_EQ(s.index, 1);  // "lo w" starts before "world"
  EXPECT_EQ(s.text, "hel");
  // A stop string that is a repeated character: "aab" in "aaab".
  StopMatcher m2({"aab"});
  Streamed s2 = run(m2, {"a", "a", "a", "b"});
  EXPECT_TRUE(s2.stopped);
  EXPECT_EQ(s2.text, "a");
  // Stop at the very start; empty stop strings are ignored.
  StopMatcher m3({"", "x"});
  Streamed s3 = run(m3, {"xyz"});
  EXPECT_TRUE(s3.stopped);
  EXPECT_EQ(s3.index, 1);
  EXPECT_EQ(s3.text, "");
  EXPECT_EQ(m3.feed("more").text, "");  // nothing after a stop
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.feed("abc").text, "abc");
  EXPECT_EQ(m.held_bytes(), 0u);
}

// Randomised: whatever the chunking, the streamed text equals the text before the first stop
// occurrence (or everything), and no streamed prefix ever contains the start of a stop string that
// later completes.
TEST(StopMatcher, RandomChunkingMatchesReference) {
  std::mt19937 rng(7);
  const std::vector<std::string> stops = {"<|end|>", "##", "über", "\n\nUser:"};
  const std::string alphabet[] = {"<", "|", "e", "n", "d", ">", "#", "ü", "b", "r", "\n", "U", "s", ":", " ", "x"};
  for (int round = 0; round < 2000; ++round) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) text += alphabet[rng() % 16];
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    std::vector<std::string> chunks;
    for (size_t i = 0; i < text.size();) {
      size_t n = 1 + rng() % 5;
      while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;  // UTF-8 boundary
      chunks.push_back(text.substr(i, n));
      i += n;
    }
    StopMatcher m(stops);
    std::string streamed;
    bool stopped = false;
    for (const auto& c : chunks) {
      StopMatcher::Result r = m.feed(c);
      streamed += r.text;
      if (first != std::string::npos) {
        ASSERT_LE(streamed.size(), first) << "streamed part of a stop string: " << text;
      }
      if (r.stopped) {
        stopped = true;
        break;
      }
    }
    if (!stopped) streamed += m.flush();
    EXPECT_EQ(stopped, first != std::string::npos) << text;
    EXPECT_EQ(streamed, first == std::string::npos ? text : text.substr(0, first)) << text;
  }
}

// Detokenizer + StopMatcher: a stop string split over several tokens of a real vocabulary.
TEST(StopMatcher, OverTokens) {
  const Vocab* v = testing::shared_vocab("gpt-2");
  ASSERT_NE(v, nullptr);
  const auto ids = v->encode("Sure. ###Human: hi", {.add_special = false});
  ASSERT_GE(ids.size(), 5u);
  Detokenizer d(*v);
  StopMatcher m({"###Human:"});
  std::string out;
  bool stopped = false;
  for (int32_t id : ids) {
    StopMatcher::Result r = m.feed(d.feed(id));
    out += r.text;
    if (r.stopped) {
      stopped = true;
      break;
    }
  }
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "Sure. ");
}

}  // namespace
}  // namespace ft
