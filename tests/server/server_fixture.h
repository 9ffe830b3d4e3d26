#pragma once
// An in-process server for route tests: the demo model's byte-level vocabulary and ChatML template, an
// EngineService over the paged fake model (so generation is instant and deterministic), and an
// HttpServer on a free loopback port with an httplib client pointed at it.
#include <gtest/gtest.h>
#include <signal.h>

#include <condition_variable>
#include <filesystem>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "tools/demo_model.h"
#include "engine/fake_model.h"
#include "engine/service.h"
#include "formats/checkpoint.h"
#include "server/chat_reply.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"

namespace ft::testing {

/** The demo vocabulary (bytes + <|endoftext|>, <|im_start|>, <|im_end|>), built once. */
inline const Vocab& demo_vocab() {
  static const Vocab* v = [] {
    const std::string path = write_demo_model();
    auto ck = open_checkpoint(path);
    auto* vocab = new Vocab(Vocab::from_gguf_metadata(ck->metadata()));
    std::filesystem::remove(path);
    return vocab;
  }();
  return *v;
}

/** A FakeModel whose forward can be held at a gate (to keep requests running or waiting). */
class GatedModel : public FakeModel {
 public:
  using FakeModel::FakeModel;
  std::span<const float> forward(const StepBatch& b) override {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return open_; });
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::vector<float>& logits = logits_;
    forward_into(b, logits);
    const auto S = static_cast<int32_t>(b.items.size());
    for (int32_t s = 0; nan_from_position >= 0 && s < S; ++s)  // a sequence that diverged
      if (last_position(b, s) >= nan_from_position) {
        float* row = logits.data() + static_cast<size_t>(s) * static_cast<size_t>(vocab_size());
        std::fill(row, row + vocab_size(), std::numeric_limits<float>::quiet_NaN());
      }
    if (script.empty()) return logits;
    // Scripted replies (one request at a time, prompts of one prefill chunk): a sequence whose batch
    // starts at position 0, or (after a prefix-cache hit) brings more than one token, is a prompt and
    // its reply starts after its last position; the reply's i-th token is script[i] (its last one
    // repeats).
    for (int32_t s = 0; s < S; ++s) {
      const auto first = static_cast<int32_t>(b.items[static_cast<size_t>(s)].start);
      const int32_t last = last_position(b, s);
      if (first == 0 || last > first) script_base_ = last + 1;
      const size_t i = std::min(static_cast<size_t>(last + 1 - script_base_), script.size() - 1);
      float* row = logits.data() + static_cast<size_t>(s) * static_cast<size_t>(vocab_size());
      std::fill(row, row + vocab_size(), 0.0f);
      row[static_cast<size_t>(script[i])] = 100.0f;
    }
    return logits;
  }
  std::chrono::milliseconds delay{0};
  std::vector<int32_t> script;  // non-empty: the tokens every reply is made of (see forward)
  int32_t nan_from_position = -1;  // >= 0: a sequence's logits are all NaN from this position on
  void close() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = false;
  }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  /** Position of item s's last token. */
  static int32_t last_position(const StepBatch& b, int32_t s) {
    const StepItem& it = b.items[static_cast<size_t>(s)];
    return static_cast<int32_t>(it.start + it.n - 1);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int32_t script_base_ = 0;
};

/** The fixture's default template: ChatML with the request's tools in a leading system turn (the
 *  served template must render tools for requests with tools to be served: check_tools_rendered). */
inline std::string chatml_with_tools(const std::string& chatml = kChatMLTemplate) {
  return "{%- if tools -%}{{- '<|im_start|>system\\nTOOLS ' + (tools | tojson) + '<|im_end|>\\n' -}}{%- endif -%}\n" + chatml;
}

struct TestServerConfig {
  std::string api_key;
  double max_body_mb = 1.0;
  int32_t max_running = 4;
  int32_t max_waiting = 8;
  int64_t max_seq_len = 512;
  int32_t n_pages = 64;
  int32_t page_size = 16;
  int port = 0;  // 0: a free one
  std::string cors_origin;  // off, as `ft serve`'s default
  double request_timeout_s = 0;  // --request-timeout
  bool split_reasoning = false;  // --reasoning-format deepseek
  std::optional<bool> enable_thinking;  // --reasoning on|off
  std::string chat_template = chatml_with_tools();
  bool serve = true;  // false: bound but not serving (the test calls http().serve())
  int32_t max_prefill_tokens = 64;  // a scripted reply needs its prompt in one chunk (GatedModel)
  bool webui = true;  // false: --no-webui
};

class TestServer {
 public:
  explicit TestServer(const TestServerConfig& c = {})
      : model_(kDemoVocab, c.n_pages, c.page_size),
        pool_(c.n_pages, c.page_size),
        template_(c.chat_template, "", "<|im_end|>") {
    signal(SIGPIPE, SIG_IGN);
    ServiceConfig sc;
    sc.scheduler.max_running = c.max_running;
    sc.scheduler.max_waiting = c.max_waiting;
    sc.scheduler.max_seq_len = c.max_seq_len;
    sc.scheduler.max_prefill_tokens = c.max_prefill_tokens;
    sc.check_integrity = true;
    service_ = std::make_unique<EngineService>(model_, pool_, sc);
    server::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = c.port;
    so.api_key = c.api_key;
    so.max_body_mb = c.max_body_mb;
    so.cors_origin = c.cors_origin;
    so.request_timeout_s = c.request_timeout_s;
    so.split_reasoning = c.split_reasoning;
    so.enable_thinking = c.enable_thinking;
    so.webui = c.webui;
    so.keepalive_ms = 50;
    server::ServedModel sm;
    sm.name = "test-model";
    sm.arch = "fake";
    sm.n_ctx_train = c.max_seq_len;
    sm.kv_bytes_per_token = 480;  // as a 3-layer MLA model with a 32-wide latent and 8-wide RoPE key, in F32
    sm.vocab = &demo_vocab();
    sm.chat_template = &template_;
    sm.tool_call_format = server::detect_tool_call_format(c.chat_template);
    sm.object_tool_arguments = server::template_takes_object_arguments(template_);
    sm.renders_tools = server::template_renders_tools(template_);
    http_ = std::make_unique<server::HttpServer>(so, sm, *service_);
    port_ = http_->bind();
    if (c.serve) thread_ = std::thread([this] { http_->serve(); });
  }
  ~TestServer() {
    model_.open();
    http_->stop();
    service_->shutdown(std::chrono::milliseconds(0));
    if (thread_.joinable()) thread_.join();
  }

  int port() const { return port_; }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    return c;
  }
  GatedModel& model() { return model_; }
  server::HttpServer& http() { return *http_; }
  EngineService& service() { return *service_; }

 private:
  GatedModel model_;
  PagePool pool_;
  ChatTemplate template_;
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

/** The events of an SSE body, in order: (the "event: " name or "", the "data: " payload); events
 *  without data (comments such as ": keep-alive") are skipped. */
inline std::vector<std::pair<std::string, std::string>> sse_named_events(const std::string& body) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string name, data;
    bool has_data = false;
    for (size_t at = pos; at < end;) {
      size_t eol = body.find('\n', at);
      if (eol == std::string::npos || eol > end) eol = end;
      const std::string line = body.substr(at, eol - at);
      if (line.rfind("event: ", 0) == 0) name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) {
        data = line.substr(6);
        has_data = true;
      }
      at = eol + 1;
    }
    if (has_data) out.emplace_back(name, data);
    pos = end + 2;
  }
  return out;
}

/** A response: status (0 when the request failed), raw body and the body parsed as JSON (discarded
 *  when it is not JSON). */
struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
  httplib::Headers headers;
};

inline Reply reply_of(const httplib::Result& r) {
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.raw = r->body;
  out.headers = r->headers;
  out.body = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}

inline Reply post(httplib::Client& c, const std::string& path, const std::string& body, const httplib::Headers& h = {}) {
  return reply_of(c.Post(path.c_str(), h, body, "application/json"));
}

inline Reply get(httplib::Client& c, const std::string& path, const httplib::Headers& h = {}) {
  return reply_of(c.Get(path.c_str(), h));
}

/** Overload: on a server with one running slot and no waiting room (max_running 1, max_waiting 0),
 *  posts `first` to `path` and holds it running (its forward blocked), returns the reply to `second`
 *  (to be refused), then lets the first finish and checks that `third` is served again. */
inline Reply overloaded_reply(TestServer& s, const std::string& path, const std::string& first,
                              const std::string& second, const std::string& third) {
  s.model().close();  // the first request's forward blocks: it stays running
  std::thread held([&] {
    auto c = s.client();
    post(c, path, first);
  });
  for (int i = 0; i < 500 && s.service().stats().running == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.service().stats().running, 1);
  auto c = s.client();
  Reply r = post(c, path, second);
  s.model().open();
  held.join();
  EXPECT_EQ(post(c, path, third).status, 200) << "served again after the overload";
  return r;
}

/** A client hanging up mid-stream: posts the streaming `body` (480 tokens at ~2 ms each) to `path`,
 *  lets the first event through, reads two more chunks, closes the socket, and waits (up to 5 s) for
 *  the request to leave the engine. Returns the engine's stats then (running, pages, cancellations). */
inline EngineStats hang_up_mid_stream(TestServer& s, const std::string& path, const std::string& body) {
  auto c = s.client();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  s.model().close();
  s.model().delay = std::chrono::milliseconds(2);  // ~1 s for the whole request: the hang-up must stop it early
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    if (++chunks == 1) s.model().open();  // the first event arrived: let it generate a little, then hang up
    return chunks < 3;
  };
  c.send(req);  // returns once the receiver refused more data (the client closes the socket)
  c.stop();
  for (int i = 0; i < 500 && (s.service().stats().running > 0 || s.service().stats().kv_pages_used > 0); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return s.service().stats();
}

/** One POST of `body` to `path` on a fresh server of `cfg` whose fake model answers `script`
 *  (tokens). The reply's raw body is Reply::raw (an SSE stream for "stream": true). */
inline Reply scripted_post(const TestServerConfig& cfg, const std::vector<int32_t>& script, const std::string& path,
                           const std::string& body) {
  TestServer s(cfg);
  s.model().script = script;
  auto c = s.client();
  return post(c, path, body);
}

/** `body` with 1-6 random edits (a character replaced, up to 5 erased, one inserted) from JSON's
 *  alphabet and a few odd bytes: the random-body tests' mutator. */
inline std::string mutate_body(std::string b, std::mt19937& rng) {
  const std::string alphabet = "{}[]\",:0123456789.-eE truefalsn\\u00ff\x01";
  const int edits = 1 + static_cast<int>(rng() % 6);
  for (int k = 0; k < edits; ++k) {
    const size_t pos = rng() % b.size();
    switch (rng() % 3) {
      case 0: b[pos] = alphabet[rng() % alphabet.size()]; break;
      case 1: b.erase(pos, 1 + rng() % 5); break;
      default: b.insert(pos, 1, alphabet[rng() % alphabet.size()]);
    }
    if (b.empty()) b.push_back('{');
  }
  return b;
}

/** The "data: " payloads of an SSE body, in order. */
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  for (const auto& [name, data] : sse_named_events(body)) out.push_back(data);
  return out;
}

}  // namespace ft::testing
