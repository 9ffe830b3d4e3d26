// --kv-host-gib, --prompt-cache-dir and --prompt-cache-gib (issue 39) on the command line: ft run and
// ft bench, which generate without the serving loop's prefix cache, refuse them naming the flag
// instead of ignoring them; bad values are refused before the model loads.
#include <gtest/gtest.h>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string stories() { return quote(::ft::testing::shared_dir() + "/data/models/stories260K.gguf"); }

TEST(KvTierFlags, RunAndBenchRefuseThem) {
  const std::string gen = " --prompt-ids 1,400 -n 2 --temp 0 -t 1";
  const Result run = run_ft("run " + stories() + gen + " --kv-host-gib 1");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.err.find("--kv-host-gib: ft run runs its prompts without the prefix cache"), std::string::npos)
      << run.err;
  const Result bench = run_ft("bench --model " + stories() +
                              " --device cpu -t 1 --prompt-tokens 8 --gen-tokens 1 --batch 1 --prompt-cache-dir /tmp/x");
  EXPECT_EQ(bench.code, 2);
  EXPECT_NE(bench.err.find("--prompt-cache-dir: ft bench runs its prompts without the prefix cache"), std::string::npos)
      << bench.err;
  const Result neg = run_ft("run " + stories() + gen + " --kv-host-gib -1");
  EXPECT_EQ(neg.code, 2);
  EXPECT_NE(neg.err.find("--kv-host-gib must be between 0 (off) and 1e6 GiB (got -1)"), std::string::npos) << neg.err;
  const Result zero = run_ft("run " + stories() + gen + " --prompt-cache-gib 0");
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--prompt-cache-gib must be > 0"), std::string::npos) << zero.err;
}

TEST(KvTierFlags, PromptCacheGibNeedsTheFolder) {
  // It was taken and ignored: the bound of a prompt cache that was never opened.
  const std::string says = "--prompt-cache-gib 2 bounds the files of the prompt cache, which needs --prompt-cache-dir DIR";
  const Result run = run_ft("run " + stories() + " --prompt-ids 1,400 -n 2 --temp 0 -t 1 --prompt-cache-gib 2");
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.err.find(says), std::string::npos) << run.err;
  // (The missing template would stop serve later, had the flag been taken: the test cannot hang.)
  const Result serve = run_ft("serve " + stories() + " --port 0 -t 1 --prompt-cache-gib 2 --chat-template /nonexistent.jinja");
  EXPECT_EQ(serve.code, 2);
  EXPECT_NE(serve.err.find(says), std::string::npos) << serve.err;
  EXPECT_EQ(serve.out.find("Loading"), std::string::npos) << serve.out;  // refused before the model loads
}

}  // namespace
}  // namespace ft
