#pragma once
// Progress of the long parts of a start (weights to the device, expert banks filled): ProgressSink,
// what a loader reports bytes to, and ProgressReporter, the sink ft's commands pass down, which
// redraws one line on a terminal and writes a few plain lines to a log. C++17-clean.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>

namespace ft {

/** Receives the bytes of a load as they are read, one phase at a time: begin, add..., finish. begin
 *  and finish come from one thread; add from any (loaders fill in parallel). */
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  /** Phase `phase` ("weights", "expert banks") starts; about `total_bytes` will be added (an
   *  estimate: a little more or less may come). */
  virtual void begin(const std::string& phase, int64_t total_bytes) = 0;
  /** `bytes` more of the phase done. Thread-safe. */
  virtual void add(int64_t bytes) = 0;
  /** The phase ended: `completed` false when it was cut short (an error is on its way). */
  virtual void finish(bool completed) = 0;
};

/** One phase on a sink that may be null (then every call does nothing): begins on construction,
 *  finish() ends it; destroyed without finish() (an exception), it ends as cut short. */
class ProgressPhase {
 public:
  ProgressPhase(ProgressSink* sink, const std::string& phase, int64_t total_bytes);
  ~ProgressPhase();
  ProgressPhase(const ProgressPhase&) = delete;
  ProgressPhase& operator=(const ProgressPhase&) = delete;

  /** Thread-safe. */
  void add(int64_t bytes) {
    if (sink_) sink_->add(bytes);
  }
  void finish();

 private:
  ProgressSink* sink_;
};

/** Where and how ProgressReporter writes. Times in seconds. */
struct ProgressOptions {
  std::FILE* out = stderr;
  bool terminal = false;  // redraw one line with \r (a TTY); else plain lines, never \r
  bool enabled = true;    // false: nothing at all (--log-level above info)
  bool json = false;      // lines go through the logger (log_fields: phase, done_bytes, total_bytes, seconds)
                          // as JSON lines (--log-format json) instead of to `out`; never redrawn
  int64_t min_bytes = int64_t{64} << 20;  // a phase of fewer total bytes writes nothing
  double quiet_s = 1.0;          // nothing before this much of a phase has passed: a short one writes its final line only
  double redraw_s = 0.1;         // terminal: at most one redraw this often
  double line_s = 5.0;           // plain lines: at most one this often, besides one at each quarter of the total
  int bar_width = 30;            // terminal: characters of the bar
  std::function<double()> clock; // monotonic seconds (empty: std::chrono::steady_clock)
};

/** The sink ft's commands give the engine. Per phase (when enabled and total >= min_bytes), after
 *  quiet_s: on a terminal one line redrawn (phase, bar, done / total, rate, ETA); otherwise a plain
 *  line "weights: 512.0 MiB of 1.60 GiB (31%), 120.4 MiB/s, ETA 9 s" then at most one per line_s
 *  or quarter. finish(true) always writes the final line "weights: 1.60 GiB in 13.9 s (117.9 MiB/s)"
 *  (no rate under 0.05 s); finish(false) only ends a redrawn line. Lines are written whole and
 *  flushed. */
class ProgressReporter : public ProgressSink {
 public:
  explicit ProgressReporter(ProgressOptions options = stderr_options());

  /** ft's: stderr, a terminal when isatty(stderr), enabled when spdlog logs info, min_bytes from
   *  $FT_PROGRESS_MIN_BYTES when set (bytes, >= 0; 0 shows every phase: tests). Throws
   *  ft::Error(kInvalidArgument) for a malformed $FT_PROGRESS_MIN_BYTES. */
  static ProgressOptions stderr_options();

  void begin(const std::string& phase, int64_t total_bytes) override;
  void add(int64_t bytes) override;
  void finish(bool completed) override;

 private:
  double now() const;
  /** Writes a progress line at time `t` if one is due (mu_ held). */
  void maybe_write(double t);
  /** A plain (not redrawn) line: to `out`, or through the logger with its figures as fields (json). */
  void write_line(const std::string& text, int64_t done, double elapsed);
  std::string progress_text(int64_t done, double elapsed) const;

  ProgressOptions o_;
  std::mutex mu_;  // guards what follows but done_; taken by add() only when a line may be due
  std::string phase_;
  int64_t total_ = 0;
  bool shown_ = false;   // this phase writes (enabled and not tiny)
  double start_ = 0;
  double last_ = 0;      // time of the last line written
  int last_quarter_ = 0; // plain lines: quarters of the total already announced
  bool drawn_ = false;   // terminal: a line is on screen without its newline
  size_t drawn_len_ = 0;
  int lines_ = 0;        // progress lines written in this phase
  std::atomic<int64_t> done_{0};
  std::atomic<double> next_check_{0};  // add(): no lock before this time
};

}  // namespace ft
