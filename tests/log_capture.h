#pragma once
// LogCapture: while it lives, spdlog's default logger writes to a buffer the test reads (thread-safe:
// servers log from their own threads), in the text format as "<level> <message>" or in the JSON
// format (util/log.h). Make it before the code under test starts threads that log, and let it go
// after they stopped: swapping the default logger is not safe while another thread logs.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "util/log.h"

namespace ft::testing {

/** Keeps each line as it is formatted (on the logging thread, as the JSON format's fields need:
 *  util/log.h), under the sink's own lock. */
class LinesSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  std::vector<std::string> lines() {
    std::lock_guard<std::mutex> lk(mutex_);
    return lines_;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    std::string line(buf.data(), buf.size());
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    lines_.push_back(std::move(line));
  }
  void flush_() override {}

 private:
  std::vector<std::string> lines_;
};

class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::debug, bool json = false)
      : previous_(spdlog::default_logger()), sink_(std::make_shared<LinesSink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(level);
    spdlog::set_default_logger(logger);
    if (json)
      set_log_format("json");
    else
      logger->set_pattern("%l %v");
  }
  ~LogCapture() {
    spdlog::set_default_logger(previous_);
    set_log_format("text");
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  /** The lines so far, without their line ends. */
  std::vector<std::string> lines() const { return sink_->lines(); }

  /** The lines `keep` keeps, once there are at least `n` of them or `timeout` passed (a streamed
   *  response's line comes just after its last byte reached the client). */
  std::vector<std::string> wait_for(const std::function<bool(const std::string&)>& keep, size_t n = 1,
                                    std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) const {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (true) {
      std::vector<std::string> kept;
      for (std::string& l : lines())
        if (keep(l)) kept.push_back(std::move(l));
      if (kept.size() >= n || std::chrono::steady_clock::now() >= end) return kept;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  std::shared_ptr<spdlog::logger> previous_;
  std::shared_ptr<LinesSink> sink_;
};

}  // namespace ft::testing
