// Usage errors a fresh user runs into: an unknown subcommand, --version, `ft tokenize` without text,
// out-of-range numeric flags (refused while parsing, naming the flag, exit 2), and `ft serve
// --max-seq-len` beyond the model's context or a small --kv-tokens (warnings that say what they do).
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string stories() { return quote(::ft::testing::shared_dir() + "/data/models/stories260K.gguf"); }

TEST(Usage, UnknownSubcommandAndVersion) {
  Result bogus = run_ft("bogus");
  EXPECT_EQ(bogus.code, 2);
  EXPECT_NE(bogus.err.find("unknown subcommand 'bogus'"), std::string::npos) << bogus.err;
  EXPECT_NE(bogus.err.find("serve"), std::string::npos) << bogus.err;  // lists the real ones
  Result version = run_ft("--version");
  EXPECT_EQ(version.code, 0) << version.err;
  EXPECT_EQ(version.out.rfind("ft 0.", 0), 0u) << version.out;
  Result none = run_ft("");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("subcommand is required"), std::string::npos) << none.err;
}

TEST(Usage, GlobalLogLevelAfterTheSubcommand) {
  // `ft serve --log-level debug` as llama-server users type it: the global flag is taken after the
  // subcommand as before it, and a bad level is refused either way.
  for (const std::string& args : {"--log-level error tokenize --model " + stories() + " hi",
                                  "tokenize --log-level error --model " + stories() + " hi"}) {
    Result r = run_ft(args);
    EXPECT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << args;
    EXPECT_EQ(r.err.find("[info]"), std::string::npos) << args << ": " << r.err;  // error level: no info lines
  }
  Result bad = run_ft("tokenize --model " + stories() + " --log-level loud hi");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("loud"), std::string::npos) << bad.err;
}

TEST(Usage, TokenizeNeedsTextOrIds) {
  Result r = run_ft("tokenize --model " + stories());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("TEXT"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(run_ft("tokenize --model " + stories() + " hi --ids 1").code, 2);
  Result empty = run_ft("tokenize --model " + stories() + " ''");  // an explicit empty text is a text
  EXPECT_EQ(empty.code, 0) << empty.err;
  EXPECT_EQ(empty.out, "1\n");
}

TEST(Usage, NumericFlagsAreCheckedAtTheFlag) {
  const std::string run = "run --model " + stories() + " --prompt-ids 1,2 --max-tokens 2 ";
  struct Case {
    std::string args, flag, says;
  };
  const Case cases[] = {
      {run + "--top-k -1", "--top-k", ">= 0"},
      {run + "--threads -2", "--threads", ">= 0"},
      {run + "--page-size 0", "--page-size", ">= 1"},
      {run + "--max-prefill-tokens 0", "--max-prefill-tokens", ">= 1"},
      {"serve --port 0 --threads -1", "--threads", ">= 0"},
      {"serve --port 0 --page-size 0", "--page-size", ">= 1"},
      {"serve --port 0 --max-running-requests 0", "--max-running-requests", ">= 1"},
      {"serve --port 0 --max-prefill-tokens 0", "--max-prefill-tokens", ">= 1"},
      {"serve --port 0 --kv-tokens 0", "--kv-tokens", ">= 1"},  // was taken silently as the default
      {"serve --port 0 --seed -2", "--seed", ">= -1"},          // -1 wrapped to 2^64 - 1, a fixed seed
  };
  for (const Case& c : cases) {
    Result r = run_ft(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find("error: " + c.flag + ": must be " + c.says), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.find("Loading"), std::string::npos) << c.args;  // refused before anything loads
  }
}

/** Starts `ft serve --model stories260K --port 0 --threads 1 ARGS`, stops it with SIGINT once it
 *  listens, and returns its stdout and stderr (code 0 when it ran and stopped cleanly). */
Result serve_until_listening(const std::string& args, const std::string& tag) {
  const std::string dir = (std::filesystem::temp_directory_path() / (tag + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  const std::string script = "D=" + quote(dir) + "; " + quote(FT_BINARY) + " serve --model " + stories() +
                             " --port 0 --threads 1 " + args + " > $D/out 2> $D/err & pid=$!;"
                             "for i in $(seq 400); do grep -q listening $D/out && break; sleep 0.05; done;"
                             "kill -INT $pid; wait $pid";
  Result r;
  r.code = std::system(("bash -c " + quote(script)).c_str());
  r.out = ::ft::testing::read_file(dir + "/out"), r.err = ::ft::testing::read_file(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

TEST(Usage, ServeParserNamesAreCheckedAtTheFlag) {
  // The parser flags name ServerOptions' typed formats: an unknown name is refused while parsing
  // (exit 2, the valid names listed), before the model loads.
  for (const std::string flag : {"--tool-call-parser", "--reasoning-parser"}) {
    Result r = run_ft("serve --port 0 " + flag + " bogus");
    EXPECT_EQ(r.code, 2) << flag << "\n" << r.err;
    EXPECT_NE(r.err.find("unknown parser 'bogus'; valid: auto, "), std::string::npos) << flag << "\n" << r.err;
    EXPECT_EQ(r.err.find("Loading"), std::string::npos) << flag;
  }
  Result fmt = run_ft("serve --port 0 --reasoning-format bogus");
  EXPECT_EQ(fmt.code, 2) << fmt.err;
  EXPECT_NE(fmt.err.find("--reasoning-format"), std::string::npos) << fmt.err;
}

TEST(Usage, ServeParserFlagsReachTheBanner) {
  // --reasoning-parser wins over llama.cpp's --reasoning-format, given in either order.
  for (const std::string args : {"--tool-call-parser hermes --reasoning-format none --reasoning-parser deepseek_r1",
                                 "--reasoning-parser deepseek_r1 --reasoning-format none --tool-call-parser hermes"}) {
    const std::string tmpl = quote(::ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja");
    const Result r = serve_until_listening(args + " --chat-template " + tmpl, "ft_parsers_");  // renders tools
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("tool calls: hermes (--tool-call-parser)"), std::string::npos) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("(<think>...</think>) (flag)"), std::string::npos) << args << "\n" << r.out;
  }
  const Result none = serve_until_listening("--reasoning-format none", "ft_parsers_");
  ASSERT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.out.find("reasoning: none"), std::string::npos) << none.out;
}

TEST(Usage, ServeWarnsWhenMaxSeqLenIsClamped) {
  const Result r = serve_until_listening("--max-seq-len 100000 --kv-tokens 4096", "ft_seqlen_");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--max-seq-len 100000 is more than the model's context length: clamped to 2048"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("context 2048 tokens"), std::string::npos) << r.out;
}

TEST(Usage, ServeSaysWhatASmallKvCacheDoes) {
  // --kv-tokens below a page is rounded up, and a KV cache below the model's context caps every request.
  const Result r = serve_until_listening("--page-size 64 --kv-tokens 10", "ft_kv_");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--kv-tokens 10 is rounded up to 64 (whole pages of 64 tokens)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the KV cache holds 64 tokens: the context limit per request is clamped from 2048 to 64"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("context 64 tokens"), std::string::npos) << r.out;
}

TEST(Usage, BenchWarnsPastTheContextLength) {
  // stories260K's context is 2048 tokens; bench measures past it, but says so.
  const Result r = run_ft("bench --model " + stories() +
                          " --device cpu --threads 1 --prompt-tokens 2100 --gen-tokens 1 --batch 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("--prompt-tokens 2100 + --gen-tokens 1 is more than the model's context length 2048"),
            std::string::npos)
      << r.err;
}

}  // namespace
}  // namespace ft
