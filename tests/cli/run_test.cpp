// `ft run` as a user runs it: prompt + --max-tokens is checked against the model's context length the
// way `ft serve` checks a request (stories260K's context is 2048 tokens), before the model loads.
#include <gtest/gtest.h>

#include <algorithm>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string stories() { return quote(::ft::testing::shared_dir() + "/data/models/stories260K.gguf"); }

TEST(Run, PromptPlusMaxTokensMustFitTheContext) {
  Result r = run_ft("run --model " + stories() + " --threads 1 --prompt-ids 1,403,407 --max-tokens 2046");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("maximum context length is 2048 tokens"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2049"), std::string::npos) << r.err;  // 3 prompt + 2046
  EXPECT_NE(r.err.find("--max-tokens"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  // A request that fits still runs.
  Result ok = run_ft("run --model " + stories() + " --threads 1 --prompt-ids 1,403,407 --max-tokens 5 --temperature 0 --print-ids");
  ASSERT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(std::count(ok.out.begin(), ok.out.end(), ','), 4) << ok.out;
}

TEST(Run, ThreadsAreBoundedAtParseTime) {
  // --threads 100000 once started that many executor workers and exhausted the process limit.
  Result r = run_ft("run --model " + stories() + " --threads 100000 --prompt-ids 1,403 --max-tokens 1");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("must be <= 1024, got 100000"), std::string::npos) << r.err;
}

TEST(Run, SeedBelowMinusOneIsRefused) {
  // -1 means a random seed; -5 was accepted and silently meant the same.
  Result r = run_ft("run --model " + stories() + " --threads 1 --prompt-ids 1,403 --max-tokens 1 --seed -5");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("--seed"), std::string::npos) << r.err;
  Result ok = run_ft("run --model " + stories() + " --threads 1 --prompt-ids 1,403 --max-tokens 1 --seed -1");
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST(Run, GeneratedTextContinuesThePrompt) {
  // stories260K is SentencePiece: "Once" is followed by the piece "▁upon". The generated text keeps
  // its leading space, so prompt + output reads "Once upon a time" (the text once dropped it).
  Result r = run_ft("run --model " + stories() + " --threads 1 --prompt Once --max-tokens 3 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(" upon a time", 0), 0u) << r.out;
}

}  // namespace
}  // namespace ft
