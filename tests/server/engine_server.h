#pragma once
// A real Engine behind an in-process server, for route tests that need the engine itself (MoE
// stats, cache resize, KV tiers): the demo model (4 MoE layers of 8 experts) on the CPU backend, an
// EngineService over it and an HttpServer on a free loopback port with the ChatML template.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include <httplib.h>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "model/fixture_util.h"
#include "server_fixture.h"

namespace ft::testing {

/** The demo model's engine options shared by these tests: the tiny fixtures' (one thread, pages of 16)
 *  on the CPU backend with 512 tokens of KV, 2 sequences, 2 logit rows, 66 tokens a step. */
inline EngineOptions demo_engine_options() {
  EngineOptions eo = small_engine_options();
  eo.device = DeviceChoice::kCpu;
  eo.kv_tokens = 512;
  eo.max_seqs = 2;
  eo.max_logit_rows = 2;
  eo.max_step_tokens = 66;
  return eo;
}

/** The service config shared by these tests: 2 running, 64 prefill tokens a step, 256-token context. */
inline ServiceConfig demo_service_config() {
  ServiceConfig sc;
  sc.scheduler.max_running = 2;
  sc.scheduler.max_prefill_tokens = 64;
  sc.scheduler.max_seq_len = 256;
  return sc;
}

/** The demo model loaded with `eo` (written to a temp file, removed once loaded); serve() starts the
 *  service and the HTTP server, the destructor stops both. */
class EngineServer {
 public:
  explicit EngineServer(const EngineOptions& eo, int read_timeout_s = 20)
      : template_(kChatMLTemplate, "", "<|im_end|>"), read_timeout_s_(read_timeout_s) {
    signal(SIGPIPE, SIG_IGN);
    const std::string path = write_demo_model();
    engine_ = Engine::load(path, eo);
    std::filesystem::remove(path);
    runner_ = std::make_unique<EngineRunner>(*engine_);
  }
  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;
  ~EngineServer() {
    if (!http_) return;
    http_->stop();
    service_->shutdown(std::chrono::milliseconds(0));
    thread_.join();
  }

  /** Starts an EngineService with `sc` (and, with `tiers`, KvTiers over the engine as sc.tiers) and an
   *  HttpServer with `so` (port 0: a free one) serving `sm` as "demo" (arch qwen3moe, the demo
   *  vocabulary, the ChatML template). Call once. */
  void serve(ServiceConfig sc, server::ServerOptions so, server::ServedModel sm, bool tiers = false) {
    if (tiers) {
      tiers_ = std::make_unique<KvTiers>(*engine_);
      sc.tiers = tiers_->view();
    }
    service_ = std::make_unique<EngineService>(*runner_, engine_->kv().pools(), sc);
    so.port = 0;
    sm.name = "demo";
    sm.arch = "qwen3moe";
    sm.vocab = &demo_vocab();
    sm.chat_template = &template_;
    http_ = std::make_unique<server::HttpServer>(so, sm, *service_);
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }

  /** A client of the server with the read timeout given at construction. */
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(read_timeout_s_, 0);
    return c;
  }
  Engine& engine() { return *engine_; }
  EngineService& service() { return *service_; }

 private:
  ChatTemplate template_;
  int read_timeout_s_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<KvTiers> tiers_;  // outlives the service: the writer drains its queue when it closes
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace ft::testing
