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

TEST(Run, LogsTheMemoryPlanAsServeDoes) {
  // ft run sizes its KV cache for prompt + --max-tokens + 1 = 9 tokens: one page of 16. stories260K keeps
  // 5 layers x K and V x 4 heads x 8 values a token: 1280 bytes in f32 (auto on the CPU), 400 in q8_0
  // (8 codes and one f16 scale a head row); ft serve's banner line and table say it, on stderr here.
  const std::string args = " --threads 1 --prompt-ids 1,403,407 --max-tokens 5 --temperature 0 --print-ids --page-size 16";
  Result r = run_ft("run --model " + stories() + args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("memory    weights 1.1 MiB (mapped); KV 16 tokens = 1 pages x 16 (20.0 KiB); device cpu, 1 thread"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("KV cache              20.0 KiB           -  16 tokens, 1.2 KiB a token, f32"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("KV"), std::string::npos) << r.out;  // stdout keeps only the generated ids
  Result q8 = run_ft("run --model " + stories() + args + " --kv-cache-dtype q8_0");
  ASSERT_EQ(q8.code, 0) << q8.err;
  EXPECT_NE(q8.err.find("KV cache               6.2 KiB           -  16 tokens, 400 B a token, q8_0"), std::string::npos)
      << q8.err;
  Result quiet = run_ft("run --model " + stories() + args + " --log-level warn");
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.err.find("KV cache"), std::string::npos) << quiet.err;  // a log line: --log-level hides it
}

}  // namespace
}  // namespace ft
