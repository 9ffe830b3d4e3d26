// End-to-end: starts `ft serve` twice on the qwen3_moe fixture (free loopback ports), runs the node tests
// in tests/e2e/serve.test.mjs (the official `openai` package + curl) and tests/e2e/messages.test.mjs (the
// official `@anthropic-ai/sdk` package against /v1/messages) and tests/e2e/responses.test.mjs (the `openai`
// package's Responses API) and tests/e2e/structured.test.mjs (structured outputs through `openai`, checked
// with ajv and zod) and tests/e2e/ai_sdk.test.mjs (the Vercel AI SDK's `@ai-sdk/openai` provider) against
// them, and tests/e2e/thinking.test.mjs (Anthropic thinking streams) against a third server: the demo
// model (its context has room for Anthropic's budget_tokens >= 1024) with tests/e2e/thinking_template.jinja,
// whose prompt opens a <think> block. Then stops the servers with SIGTERM and checks they exit 0. Fails,
// never skips, when node, curl, the fixture or tests/e2e/node_modules (installed by `make deps`: npm ci)
// is missing. WebChatPageInChromium (below) drives the chat page at / in Debian's Chromium.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kE2eDir = fs::path(__FILE__).parent_path();

bool have_program(const std::string& name) {
  return std::system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

/** A child process with its stdout on a pipe and stderr in a log file. */
class Server {
 public:
  Server(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(fds[1], STDOUT_FILENO);
      FILE* err = std::fopen(log.c_str(), "w");
      if (err) dup2(fileno(err), STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      std::vector<char*> argv;
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    out_ = fdopen(fds[0], "r");
  }
  ~Server() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_) std::fclose(out_);
  }

  /** Reads stdout until the "listening on http://HOST:PORT/v1" line; returns "http://HOST:PORT" or "". */
  std::string wait_listening(std::string& seen) {
    char line[4096];
    static const std::regex re(R"(listening on (http://[0-9.]+:[0-9]+)/v1)");
    while (std::fgets(line, sizeof line, out_)) {
      seen += line;
      std::cmatch m;
      if (std::regex_search(line, m, re)) return m[1].str();
    }
    return "";
  }

  /** The next line of stdout, or "" at its end. */
  std::string next_line() {
    char line[4096];
    return std::fgets(line, sizeof line, out_) ? std::string(line) : std::string();
  }

  /** SIGTERM, then waits up to `limit`; returns the exit status, or -1 if it had to be killed. */
  int terminate(std::chrono::seconds limit) { return stop_with(SIGTERM, limit); }
  int interrupt(std::chrono::seconds limit) { return stop_with(SIGINT, limit); }

 private:
  int stop_with(int sig, std::chrono::seconds limit) {
    kill(pid_, sig);
    const auto end = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 public:
  /** Drains stdout in the background so the server never blocks on a full pipe. */
  void drain() {
    FILE* f = out_;
    out_ = nullptr;
    std::thread([f] {
      char buf[4096];
      while (std::fgets(buf, sizeof buf, f)) {
      }
      std::fclose(f);
    }).detach();
  }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  FILE* out_ = nullptr;
  std::string log_;
};

std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(E2E, OpenAIAndAnthropicClientsAndCurlAgainstFtServe) {
  ASSERT_TRUE(have_program("node")) << "node is not installed: run `make deps`";
  ASSERT_TRUE(have_program("curl")) << "curl is not installed";
  for (const char* pkg : {"openai", "@anthropic-ai/sdk", "ai", "@ai-sdk/openai", "ajv", "ajv-formats", "zod"})
    ASSERT_TRUE(fs::exists(kE2eDir / "node_modules" / pkg / "package.json"))
        << kE2eDir / "node_modules" / pkg << " is missing: run `make deps` (it runs `npm ci` in tests/e2e) before the tests";
  const std::string model = testing::shared_dir() + "/fixtures/gguf/qwen3_moe/qwen3_moe-bf16.gguf";
  ASSERT_TRUE(fs::exists(model)) << model << " is missing (set FT_SHARED_DIR)";
  const std::string key = "e2e-key-" + std::to_string(getpid());
  const std::string tmp = fs::temp_directory_path().string();
  const std::string log_main = tmp + "/ft-e2e-main-" + std::to_string(getpid()) + ".log";
  const std::string log_small = tmp + "/ft-e2e-small-" + std::to_string(getpid()) + ".log";
  const std::string log_think = tmp + "/ft-e2e-think-" + std::to_string(getpid()) + ".log";
  const std::string ft = FT_BINARY;
  const std::vector<std::string> common = {ft, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0",
                                           "--served-model-name", "qwen3-moe-fixture", "--kv-tokens", "16384",
                                           "--threads", "1"};
  std::vector<std::string> main_args = common, small_args = common;
  for (const char* a : {"--api-key", key.c_str(), "--max-body-mb", "1", "--max-running-requests", "8"}) main_args.push_back(a);
  for (const char* a : {"--max-running-requests", "1", "--max-waiting-requests", "0"}) small_args.push_back(a);

  // The thinking server: a fixed --seed, so requests without one sample alike (streamed vs whole).
  const std::vector<std::string> think_args = {ft, "serve", "--host", "127.0.0.1", "--port", "0", "--threads", "1",
                                               "--chat-template", (kE2eDir / "thinking_template.jinja").string(),
                                               "--seed", "1919"};

  Server main_srv(main_args, log_main), small_srv(small_args, log_small), think_srv(think_args, log_think);
  std::string seen_main, seen_small, seen_think;
  const std::string url_main = main_srv.wait_listening(seen_main);
  const std::string url_small = small_srv.wait_listening(seen_small);
  const std::string url_think = think_srv.wait_listening(seen_think);
  ASSERT_FALSE(url_main.empty()) << "main server did not start:\n" << seen_main << testing::read_file(log_main);
  ASSERT_FALSE(url_small.empty()) << "small server did not start:\n" << seen_small << testing::read_file(log_small);
  ASSERT_FALSE(url_think.empty()) << "thinking server did not start:\n" << seen_think << testing::read_file(log_think);
  EXPECT_NE(seen_think.find("reasoning: deepseek_r1"), std::string::npos) << seen_think;
  main_srv.drain();
  small_srv.drain();
  think_srv.drain();

  // One file at a time: both use the same servers, and some tests read /v1/stats of an idle server.
  const std::string cmd = "cd '" + kE2eDir.string() + "' && FT_E2E_URL=" + url_main + " FT_E2E_SMALL_URL=" + url_small +
                          " FT_E2E_THINK_URL=" + url_think + " FT_E2E_THINK_MODEL=freetoken-demo FT_E2E_KEY=" + key +
                          " FT_E2E_MODEL=qwen3-moe-fixture node --test --test-concurrency=1 serve.test.mjs messages.test.mjs "
                          "responses.test.mjs structured.test.mjs ai_sdk.test.mjs thinking.test.mjs 2>&1";
  int status = 0;
  const std::string out = run_capture(cmd, status);
  std::printf("%s\n", out.c_str());
  EXPECT_EQ(status, 0) << "node tests failed (output above); server logs: " << log_main << ", " << log_small << ", "
                       << log_think << "\n"
                       << testing::read_file(log_main);

  EXPECT_EQ(main_srv.terminate(20s), 0) << "main server did not exit 0 on SIGTERM";
  EXPECT_EQ(small_srv.terminate(20s), 0) << "small server did not exit 0 on SIGTERM";
  EXPECT_EQ(think_srv.terminate(20s), 0) << "thinking server did not exit 0 on SIGTERM";
  if (!HasFailure()) {
    fs::remove(log_main);
    fs::remove(log_small);
    fs::remove(log_think);
  }
}

// Hostile clients (issue 40's transport): tests/e2e/hostile.test.mjs starts its own demo-model servers
// from FT_BINARY and attacks them with raw sockets (huge headers, chunked bodies without a key, slow
// connections, ranges, framing errors, hang-ups, SIGTERM with slow clients).
TEST(E2E, HostileClientsAreRefusedOrBounded) {
  ASSERT_TRUE(have_program("node")) << "node is needed for the end-to-end tests";
  int status = 0;
  const std::string cmd = "cd '" + kE2eDir.string() + "' && FT_BINARY='" + FT_BINARY +
                          "' node --test --test-concurrency=1 hostile.test.mjs 2>&1";
  const std::string out = run_capture(cmd, status);
  EXPECT_EQ(status, 0) << out;
}

// The README's examples (issue 41's "a new user following only the README"): tests/e2e/readme.test.mjs
// runs every fenced example of README.md that names a file or shell example (first curl, openai,
// @anthropic-ai/sdk, the Vercel AI SDK, LangChain, an Open WebUI-style client, llama.cpp's /completion)
// against its own demo-model server.
TEST(E2E, ReadmeExamplesRunAsWritten) {
  ASSERT_TRUE(have_program("node")) << "node is needed for the end-to-end tests";
  ASSERT_TRUE(have_program("curl")) << "curl is needed for the README's shell examples";
  for (const char* pkg : {"openai", "@anthropic-ai/sdk", "ai", "@ai-sdk/openai", "@langchain/openai"})
    ASSERT_TRUE(fs::exists(kE2eDir / "node_modules" / pkg / "package.json"))
        << kE2eDir / "node_modules" / pkg << " is missing: run `make deps` (it runs `npm ci` in tests/e2e)";
  int status = 0;
  const std::string cmd = "cd '" + kE2eDir.string() + "' && FT_BINARY='" + FT_BINARY +
                          "' node --test --test-concurrency=1 readme.test.mjs 2>&1";
  const std::string out = run_capture(cmd, status);
  EXPECT_EQ(status, 0) << out;
}

// `make serve` on a fresh clone: no --model, the demo model answers a chat request, SIGINT exits 0.
TEST(E2E, DemoModelServesWithoutAModel) {
  const std::string log = fs::temp_directory_path().string() + "/ft-e2e-demo-" + std::to_string(getpid()) + ".log";
  Server srv({FT_BINARY, "serve", "--port", "0", "--threads", "1"}, log);
  std::string seen;
  const std::string url = srv.wait_listening(seen);
  ASSERT_FALSE(url.empty()) << seen << testing::read_file(log);
  srv.drain();
  EXPECT_NE(seen.find("DEMO"), std::string::npos) << seen;
  EXPECT_NE(seen.find("noise"), std::string::npos) << seen;
  httplib::Client c(url);
  c.set_read_timeout(60, 0);
  auto r = c.Post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"hello"}],"max_tokens":16})",
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->body;
  EXPECT_EQ(j["model"], "freetoken-demo");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_string());
  EXPECT_GE(j["usage"]["completion_tokens"].get<int>(), 1);
  EXPECT_EQ(srv.interrupt(20s), 0) << "ft serve did not exit 0 on SIGINT";
  if (!HasFailure()) fs::remove(log);
}

// The chat page (web/, issue 41) in Debian's Chromium, headless: tests/e2e/webui.test.mjs drives it
// with puppeteer-core against `ft serve` on the demo model, and writes its screenshot (webui.png) into
// the build folder, beside ft. A second server with --api-key serves its key-box test; both servers'
// request logs must show no 404 (the icon) and the keyed one no /v1/stats poll without the key.
TEST(E2E, WebChatPageInChromium) {
  ASSERT_TRUE(have_program("node")) << "node is not installed: run `make deps`";
  ASSERT_TRUE(fs::exists("/usr/bin/chromium")) << "/usr/bin/chromium is missing: run `make deps` (apt-get install chromium)";
  ASSERT_TRUE(fs::exists(kE2eDir / "node_modules" / "puppeteer-core" / "package.json"))
      << "puppeteer-core is missing: run `make deps` (it runs `npm ci` in tests/e2e) before the tests";
  const std::string log = fs::temp_directory_path().string() + "/ft-e2e-webui-" + std::to_string(getpid()) + ".log";
  const std::string key_log = fs::temp_directory_path().string() + "/ft-e2e-webui-key-" + std::to_string(getpid()) + ".log";
  Server srv({FT_BINARY, "serve", "--port", "0", "--threads", "1"}, log);
  // A second server with --api-key, for the page's key box (webui.test.mjs's last test).
  Server key_srv({FT_BINARY, "serve", "--port", "0", "--threads", "1", "--api-key", "e2e-key"}, key_log);
  std::string seen;
  const std::string url = srv.wait_listening(seen);
  ASSERT_FALSE(url.empty()) << seen << testing::read_file(log);
  EXPECT_EQ(srv.next_line(), "  chat page " + url + "/\n");  // the banner's next line names the page
  srv.drain();
  const std::string key_url = key_srv.wait_listening(seen);
  ASSERT_FALSE(key_url.empty()) << seen << testing::read_file(key_log);
  key_srv.drain();
  const std::string shots = fs::path(FT_BINARY).parent_path().string();
  int status = 0;
  const std::string cmd = "cd '" + kE2eDir.string() + "' && FT_E2E_WEBUI_URL=" + url + " FT_E2E_WEBUI_KEY_URL=" + key_url +
                          " FT_E2E_WEBUI_KEY=e2e-key FT_SCREENSHOT_DIR='" + shots +
                          "' node --test --test-concurrency=1 webui.test.mjs 2>&1";
  const std::string out = run_capture(cmd, status);
  std::printf("%s\n", out.c_str());
  EXPECT_EQ(status, 0) << "webui.test.mjs failed (output above); server log: " << log << "\n" << testing::read_file(log);
  EXPECT_EQ(srv.terminate(20s), 0) << "ft serve did not exit 0 on SIGTERM";
  EXPECT_EQ(key_srv.terminate(20s), 0) << "ft serve --api-key did not exit 0 on SIGTERM";
  // Server-side, from the request log (info level): the page asked for nothing that is not there
  // (its icon included), and without a key it never polled /v1/stats.
  const std::string text = testing::read_file(log), key_text = testing::read_file(key_log);
  EXPECT_EQ(text.find(" 404 "), std::string::npos) << text;
  EXPECT_EQ(key_text.find(" 404 "), std::string::npos) << key_text;
  EXPECT_EQ(key_text.find("GET /v1/stats 401"), std::string::npos) << key_text;
  EXPECT_NE(key_text.find("GET /v1/models 401"), std::string::npos) << key_text;  // the page did meet the key check
  if (!HasFailure()) {
    fs::remove(log);
    fs::remove(key_log);
  }
}

// --no-webui: no page at /.
TEST(E2E, NoWebuiServesNoPage) {
  const std::string log = fs::temp_directory_path().string() + "/ft-e2e-nowebui-" + std::to_string(getpid()) + ".log";
  Server srv({FT_BINARY, "serve", "--port", "0", "--threads", "1", "--no-webui"}, log);
  std::string seen;
  const std::string url = srv.wait_listening(seen);
  ASSERT_FALSE(url.empty()) << seen << testing::read_file(log);
  srv.drain();
  httplib::Client c(url);
  auto r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(srv.terminate(20s), 0);
  if (!HasFailure()) fs::remove(log);
}

}  // namespace
}  // namespace ft
