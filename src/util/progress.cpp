#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "util/error.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {
namespace {

/** "9 s", "2 min 05 s" (whole seconds); "12.4 s" under a minute when `tenths`. */
std::string format_seconds(double s, bool tenths) {
  if (s < 0 || !std::isfinite(s)) s = 0;
  if (tenths && s < 59.95) return fmt::format("{:.1f} s", s);
  const auto whole = static_cast<int64_t>(std::llround(s));
  if (whole < 60) return fmt::format("{} s", whole);
  return fmt::format("{} min {:02} s", whole / 60, whole % 60);
}

std::string format_rate(double bytes_per_s) {
  return format_bytes(static_cast<int64_t>(std::llround(bytes_per_s))) + "/s";
}

}  // namespace

ProgressPhase::ProgressPhase(ProgressSink* sink, const std::string& phase, int64_t total_bytes) : sink_(sink) {
  if (sink_) sink_->begin(phase, total_bytes);
}

ProgressPhase::~ProgressPhase() {
  if (sink_) sink_->finish(false);
}

void ProgressPhase::finish() {
  if (sink_) sink_->finish(true);
  sink_ = nullptr;
}

ProgressReporter::ProgressReporter(ProgressOptions options) : o_(std::move(options)) {}

ProgressOptions ProgressReporter::stderr_options() {
  ProgressOptions o;
  o.out = stderr;
  o.json = log_format_is_json();
  o.terminal = !o.json && ::isatty(STDERR_FILENO) == 1;
  o.enabled = spdlog::should_log(spdlog::level::info);
  if (const char* env = std::getenv("FT_PROGRESS_MIN_BYTES")) {
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(env, &end, 10);
    if (end == env || *end != '\0' || errno == ERANGE || v < 0)
      fail(ErrorCode::kInvalidArgument, "FT_PROGRESS_MIN_BYTES={}: expected a number of bytes >= 0", env);
    o.min_bytes = v;
  }
  return o;
}

double ProgressReporter::now() const {
  if (o_.clock) return o_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void ProgressReporter::begin(const std::string& phase, int64_t total_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  if (drawn_) std::fputs("\n", o_.out), std::fflush(o_.out);  // a phase begun before the last one finished
  phase_ = phase;
  total_ = std::max<int64_t>(total_bytes, 0);
  done_.store(0);
  start_ = last_ = now();
  last_quarter_ = 0;
  drawn_ = false;
  drawn_len_ = 0;
  lines_ = 0;
  shown_ = o_.enabled && total_ >= o_.min_bytes;
  next_check_.store(shown_ ? start_ + o_.quiet_s : HUGE_VAL);
}

void ProgressReporter::add(int64_t bytes) {
  done_.fetch_add(bytes, std::memory_order_relaxed);
  if (!o_.enabled) return;
  const double t = now();
  if (t < next_check_.load(std::memory_order_relaxed)) return;
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (!lk.owns_lock() || !shown_) return;
  maybe_write(t);
}

std::string ProgressReporter::progress_text(int64_t done, double elapsed) const {
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0;
  const int pct = total_ > 0 ? static_cast<int>(std::min<int64_t>(100, done * 100 / total_)) : 100;
  std::string eta;
  if (rate > 0 && done < total_) eta = "ETA " + format_seconds(static_cast<double>(total_ - done) / rate, false);
  if (!o_.terminal) {
    std::string s = fmt::format("{}: {} of {} ({}%)", phase_, format_bytes(done), format_bytes(total_), pct);
    if (rate > 0) s += ", " + format_rate(rate);
    if (!eta.empty()) s += ", " + eta;
    return s;
  }
  const int w = std::max(1, o_.bar_width);
  const int fill = total_ > 0 ? static_cast<int>(std::min<int64_t>(w, done * w / total_)) : w;
  std::string s = fmt::format("{} [{}{}] {:>3}%  {} / {}", phase_, std::string(static_cast<size_t>(fill), '#'),
                              std::string(static_cast<size_t>(w - fill), ' '), pct, format_bytes(done),
                              format_bytes(total_));
  if (rate > 0) s += "  " + format_rate(rate);
  if (!eta.empty()) s += "  " + eta;
  return s;
}

void ProgressReporter::maybe_write(double t) {
  const double elapsed = t - start_;
  if (elapsed < o_.quiet_s) {
    next_check_.store(start_ + o_.quiet_s, std::memory_order_relaxed);
    return;
  }
  const int64_t done = done_.load(std::memory_order_relaxed);
  if (o_.terminal) {
    if (drawn_ && t - last_ < o_.redraw_s) return;
    std::string s = progress_text(done, elapsed);
    const size_t len = s.size();
    if (len < drawn_len_) s.append(drawn_len_ - len, ' ');  // over the end of a longer line
    std::fputs(("\r" + s).c_str(), o_.out);
    std::fflush(o_.out);
    drawn_ = true;
    drawn_len_ = len;
    next_check_.store(t + o_.redraw_s, std::memory_order_relaxed);
  } else {
    const int quarter = total_ > 0 ? static_cast<int>(std::min<int64_t>(3, done * 4 / total_)) : 0;
    // Not due, or all done (the final line says it).
    if (done >= total_ || (lines_ > 0 && t - last_ < o_.line_s && quarter <= last_quarter_)) {
      next_check_.store(t + o_.redraw_s, std::memory_order_relaxed);
      return;
    }
    write_line(progress_text(done, elapsed), done, elapsed);
    last_quarter_ = quarter;
    next_check_.store(t + o_.redraw_s, std::memory_order_relaxed);
  }
  last_ = t;
  ++lines_;
}

void ProgressReporter::write_line(const std::string& text, int64_t done, double elapsed) {
  if (o_.json) {
    log_fields(spdlog::level::info, text,
               {{"phase", phase_}, {"done_bytes", done}, {"total_bytes", total_}, {"seconds", elapsed}});
    return;
  }
  std::fputs((text + "\n").c_str(), o_.out);
  std::fflush(o_.out);
}

void ProgressReporter::finish(bool completed) {
  std::lock_guard<std::mutex> lk(mu_);
  if (!shown_) return;
  shown_ = false;
  next_check_.store(HUGE_VAL);
  std::string s;
  if (completed) {
    const double elapsed = now() - start_;
    const int64_t done = done_.load();
    s = fmt::format("{}: {} in {}", phase_, format_bytes(done), format_seconds(elapsed, true));
    // No rate for a phase this short (weights the CPU backend reads in place): it would say nothing.
    if (elapsed >= 0.05) s += " (" + format_rate(static_cast<double>(done) / elapsed) + ")";
  }
  if (drawn_ && completed) {  // over the bar; cut short, the bar stays as it was
    if (s.size() < drawn_len_) s.append(drawn_len_ - s.size(), ' ');
    s = "\r" + s;
  }
  if (o_.json && completed) {
    write_line(s, done_.load(), now() - start_);
  } else if (drawn_ || completed) {
    std::fputs((s + "\n").c_str(), o_.out);
    std::fflush(o_.out);
  }
  drawn_ = false;
}

}  // namespace ft
