#include "tokenizer/stop_matcher.h"

#include <gtest/gtest.h>

#include <chrono>
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

// Self-overlapping stop strings over a two-letter alphabet (the KMP automaton's failure links: a
// mismatch must fall back to the longest border, not to the start), byte by byte and in random chunks.
// No stop is inside another, so the first to complete is the first to start whatever the chunking.
TEST(StopMatcher, SelfOverlappingStopsMatchReference) {
  std::mt19937 rng(11);
  const std::vector<std::string> stops = {"aabab", "abaa", "bbab"};
  for (int round = 0; round < 3000; ++round) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 30);
    for (int i = 0; i < len; ++i) text += "ab"[rng() % 2];
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    StopMatcher m(stops);
    std::string streamed;
    bool stopped = false;
    for (size_t i = 0; i < text.size() && !stopped;) {
      const size_t n = round % 2 ? 1 : 1 + rng() % 4;
      StopMatcher::Result r = m.feed(text.substr(i, n));
      streamed += r.text;
      stopped = r.stopped;
      i += n;
    }
    if (!stopped) streamed += m.flush();
    EXPECT_EQ(stopped, first != std::string::npos) << text;
    EXPECT_EQ(streamed, first == std::string::npos ? text : text.substr(0, first)) << text;
  }
}

// A long stop string fed byte by byte costs time linear in the text (issue 40: rescanning the held
// tail made it quadratic): 4x the text takes about 4x as long, not 16x.
TEST(StopMatcher, LongStopStringsCostLinearTime) {
  auto seconds = [](size_t n) {
    double best = 1e9;
    for (int rep = 0; rep < 5; ++rep) {
      StopMatcher m({std::string(n, 'a') + "b"});  // never completes below; the whole text stays a prefix
      const auto t0 = std::chrono::steady_clock::now();
      size_t streamed = 0;
      for (size_t i = 0; i < n; ++i) streamed += m.feed("a").text.size();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      EXPECT_EQ(streamed, 0u);
      EXPECT_EQ(m.held_bytes(), n);
    }
    return best;
  };
  const double ratio = seconds(160000) / seconds(40000);
  EXPECT_LT(ratio, 9.0);
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
