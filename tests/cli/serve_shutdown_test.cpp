// `ft serve` stopped by SIGINT (or SIGHUP, a closed terminal) while a stream is running: the request
// finishes within the grace period and its stream ends with finish_reason and `data: [DONE]` (it used
// to be cut off mid-stream because the HTTP listener closed before the running requests finished;
// SIGHUP's default action killed the process mid-stream), and the server exits 0.
#include <gtest/gtest.h>

#include <filesystem>

#include "cli/run_ft.h"

namespace ft {
namespace {

class ServeShutdown : public ::testing::TestWithParam<const char*> {};

TEST_P(ServeShutdown, SignalLetsRunningStreamsFinish) {
  const std::string sig = GetParam();
  const std::string model = ::ft::testing::shared_dir() + "/data/models/stories260K.gguf";
  const std::string dir = (std::filesystem::temp_directory_path() / ("ft_shutdown_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  // Port 0 is not printed in a parseable way, so pick one from the pid (collisions only fail this test).
  const std::string port = std::to_string(20000 + ::getpid() % 20000);
  const std::string script =
      "FT=" + quote(FT_BINARY) + "; D=" + quote(dir) + "; P=" + port + ";"
      "$FT serve --model " + quote(model) + " --port $P --threads 1 --shutdown-grace 30 > $D/srv.log 2>&1 & pid=$!;"
      "for i in $(seq 300); do curl -sf localhost:$P/health >/dev/null && break; sleep 0.05; done;"
      "curl -sN localhost:$P/v1/completions -H 'Content-Type: application/json'"
      " -d '{\"prompt\":\"Once\",\"max_tokens\":1500,\"stream\":true,\"ignore_eos\":true}' > $D/out.txt & cpid=$!;"
      "for i in $(seq 200); do [ -s $D/out.txt ] && break; sleep 0.01; done;"
      "kill -" + sig + " $pid; wait $pid; echo server=$?; wait $cpid; echo curl=$?";
  FILE* p = popen(("bash -c " + quote(script)).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  pclose(p);
  const std::string stream = ::ft::testing::read_file(dir + "/out.txt");
  const std::string log = ::ft::testing::read_file(dir + "/srv.log");
  std::filesystem::remove_all(dir);
  EXPECT_NE(out.find("server=0"), std::string::npos) << out << log;
  EXPECT_NE(out.find("curl=0"), std::string::npos) << out;
  EXPECT_NE(log.find("SIG" + sig + " received"), std::string::npos) << log;  // the signal came mid-stream
  EXPECT_NE(stream.find("\"finish_reason\":\"length\""), std::string::npos) << stream.substr(stream.size() > 300 ? stream.size() - 300 : 0);
  ASSERT_GE(stream.size(), 15u);
  EXPECT_EQ(stream.substr(stream.size() - 14), "data: [DONE]\n\n");
}

INSTANTIATE_TEST_SUITE_P(Signals, ServeShutdown, ::testing::Values("INT", "HUP"));

}  // namespace
}  // namespace ft

namespace ft {
namespace {

TEST(ServeFlags, ReachableHostWithoutApiKeyIsRefused) {
  // Binding an address other machines can reach without a key needs saying so (issue 40); refused
  // before any weight is read.
  Result r = run_ft("serve --host 0.0.0.0 --port 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--host 0.0.0.0 is reachable from other machines and no --api-key is set"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--allow-unauthenticated"), std::string::npos) << r.err;
}

TEST(ServeFlags, EmptyApiKeyIsRefused) {
  // An unset variable in `--api-key "$KEY"` must not silently serve without auth.
  Result r = run_ft("serve --api-key '' --port 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("error: --api-key: must not be empty"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--api-key: --api-key"), std::string::npos) << "the flag named once: " << r.err;
}

TEST(ServeFlags, MissingTokenizerIsRefusedBeforeTheWeightsLoad) {
  // An HF folder without tokenizer.json was refused only after Engine::load had read every weight
  // (minutes for a large MoE model); the engine's "moe:" plan line showed that it had.
  const std::string model = ::ft::testing::shared_dir() + "/fixtures/hf/qwen3_moe";  // no tokenizer.json
  Result r = run_ft("serve --model " + quote(model) + " --port 1 --device cpu --threads 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("no tokenizer.json in the checkpoint folder"), std::string::npos) << r.err;
  // ... and says what works: the file beside the weights, or ft run on token ids.
  for (const std::string& part : {std::string("put its tokenizer.json"), "in " + model, std::string("--prompt-ids")})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " in: " << r.err;
  EXPECT_EQ(r.err.find("moe: strategy"), std::string::npos) << "the weights were loaded first: " << r.err;
}

TEST(ServeFlags, EmptyServedModelNameIsRefused) {
  // It was taken as "no name given" and the file's name served instead.
  Result r = run_ft("serve --served-model-name '' --port 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("error: --served-model-name: must not be empty"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ft
