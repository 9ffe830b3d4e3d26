// ProgressReporter as a log and a terminal see it, on a clock the test moves.
#include "util/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "log_capture.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

/** A reporter writing into a string, on a clock set by hand. */
struct Captured {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  double t = 0;

  ProgressOptions options(bool terminal) {
    ProgressOptions o;
    o.out = f;
    o.terminal = terminal;
    o.min_bytes = 64 * kMiB;
    o.bar_width = 10;
    o.clock = [this] { return t; };
    return o;
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
  ~Captured() {
    std::fclose(f);
    std::free(buf);
  }
};

TEST(Progress, PlainLinesAtTheStartEveryQuarterOrFewSecondsAndAtTheEnd) {
  Captured c;
  ProgressReporter p(c.options(false));
  p.begin("weights", 1024 * kMiB);
  c.t = 0.5;
  p.add(100 * kMiB);  // within the first second: nothing yet
  EXPECT_EQ(c.text(), "");
  c.t = 1.5;
  p.add(100 * kMiB);  // the first line
  c.t = 2.0;
  p.add(100 * kMiB);  // 29%: the first quarter passed
  c.t = 3.0;
  p.add(100 * kMiB);  // 39%, 1 s after the last line: nothing
  c.t = 8.0;
  p.add(100 * kMiB);  // 5 s after the last line
  c.t = 9.0;
  p.add(524 * kMiB);  // all of it: the final line says it
  c.t = 10.0;
  p.finish(true);
  EXPECT_EQ(c.text(),
            "weights: 200.0 MiB of 1.00 GiB (19%), 133.3 MiB/s, ETA 6 s\n"
            "weights: 300.0 MiB of 1.00 GiB (29%), 150.0 MiB/s, ETA 5 s\n"
            "weights: 500.0 MiB of 1.00 GiB (48%), 62.5 MiB/s, ETA 8 s\n"
            "weights: 1.00 GiB in 10.0 s (102.4 MiB/s)\n");
  EXPECT_EQ(c.text().find('\r'), std::string::npos);
}

// --log-format json: progress lines are log lines with their figures as fields, nothing goes to `out`.
TEST(Progress, JsonFormatLogsEachLineWithItsFigures) {
  Captured c;
  ft::testing::LogCapture log(spdlog::level::info, /*json=*/true);
  ProgressOptions o = c.options(false);
  o.json = true;
  ProgressReporter p(o);
  p.begin("weights", 1024 * kMiB);
  c.t = 1.5;
  p.add(200 * kMiB);
  c.t = 10.0;
  p.add(824 * kMiB);
  p.finish(true);
  EXPECT_EQ(c.text(), "");
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["msg"], "weights: 200.0 MiB of 1.00 GiB (19%), 133.3 MiB/s, ETA 6 s");
  EXPECT_EQ(first["phase"], "weights");
  EXPECT_EQ(first["done_bytes"], 200 * kMiB);
  EXPECT_EQ(first["total_bytes"], 1024 * kMiB);
  const nlohmann::json last = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(last["msg"], "weights: 1.00 GiB in 10.0 s (102.4 MiB/s)");
  EXPECT_EQ(last["level"], "info");
  EXPECT_DOUBLE_EQ(last["seconds"].get<double>(), 10.0);
}

TEST(Progress, AShortPhaseWritesItsFinalLineOnlyAndATinyOneNothing) {
  Captured c;
  ProgressReporter p(c.options(false));
  p.begin("expert banks", 3 * 1024 * kMiB);
  c.t = 0.25;
  p.add(3 * 1024 * kMiB);
  c.t = 0.5;
  p.finish(true);
  p.begin("weights", 63 * kMiB);  // under min_bytes
  c.t = 5;
  p.add(63 * kMiB);
  c.t = 9;
  p.finish(true);
  EXPECT_EQ(c.text(), "expert banks: 3.00 GiB in 0.5 s (6.00 GiB/s)\n");
}

TEST(Progress, DisabledWritesNothing) {
  Captured c;
  ProgressOptions o = c.options(true);
  o.enabled = false;  // --log-level warn
  ProgressReporter p(o);
  p.begin("weights", 1024 * kMiB);
  c.t = 3;
  p.add(1024 * kMiB);
  p.finish(true);
  EXPECT_EQ(c.text(), "");
}

TEST(Progress, ATerminalRedrawsOneLineAtMostTenTimesASecond) {
  Captured c;
  ProgressReporter p(c.options(true));
  p.begin("weights", 1024 * kMiB);
  c.t = 1.0;
  p.add(256 * kMiB);
  c.t = 1.05;
  p.add(256 * kMiB);  // within 0.1 s of the last redraw
  c.t = 2.0;
  p.add(256 * kMiB);
  c.t = 4.0;
  p.finish(true);
  const std::string first = "\rweights [##        ]  25%  256.0 MiB / 1.00 GiB  256.0 MiB/s  ETA 3 s";
  const std::string second = "\rweights [#######   ]  75%  768.0 MiB / 1.00 GiB  384.0 MiB/s  ETA 1 s";
  const std::string last = "\rweights: 768.0 MiB in 4.0 s (192.0 MiB/s)";
  EXPECT_EQ(c.text(), first + second + last + std::string(second.size() - last.size(), ' ') + "\n");
}

TEST(Progress, APhaseCutShortEndsTheTerminalLineWithoutAFinalLine) {
  Captured term;
  {
    ProgressReporter p(term.options(true));
    ProgressPhase phase(&p, "weights", 1024 * kMiB);
    term.t = 2;
    phase.add(512 * kMiB);
  }  // an exception left the phase
  EXPECT_EQ(term.text(), "\rweights [#####     ]  50%  512.0 MiB / 1.00 GiB  256.0 MiB/s  ETA 2 s\n");
  Captured log;
  {
    ProgressReporter p(log.options(false));
    ProgressPhase phase(&p, "weights", 1024 * kMiB);
    log.t = 0.5;
    phase.add(512 * kMiB);
  }
  EXPECT_EQ(log.text(), "");
  ProgressPhase none(nullptr, "weights", 1);  // no sink: nothing to do
  none.add(1);
  none.finish();
}

TEST(Progress, AddsFromManyThreadsAllCount) {
  Captured c;
  ProgressOptions o = c.options(false);
  o.clock = {};  // the real clock: the threads race over it
  ProgressReporter p(o);
  {
    ProgressPhase phase(&p, "expert banks", 64 * kMiB);
    std::vector<std::thread> workers;
    for (int i = 0; i < 8; ++i)
      workers.emplace_back([&] {
        for (int j = 0; j < 1024; ++j) phase.add(8 * 1024);
      });
    for (std::thread& w : workers) w.join();
    phase.finish();
  }
  const std::string s = c.text();
  EXPECT_EQ(s.rfind("expert banks: 64.0 MiB in ", 0), 0u) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
}

TEST(Progress, MinBytesComeFromTheEnvironment) {
  ::setenv("FT_PROGRESS_MIN_BYTES", "0", 1);
  EXPECT_EQ(ProgressReporter::stderr_options().min_bytes, 0);
  ::setenv("FT_PROGRESS_MIN_BYTES", "1048576", 1);
  EXPECT_EQ(ProgressReporter::stderr_options().min_bytes, kMiB);
  for (const char* bad : {"", "1M", "-1", "99999999999999999999999"}) {
    ::setenv("FT_PROGRESS_MIN_BYTES", bad, 1);
    EXPECT_THROW(ProgressReporter::stderr_options(), Error) << bad;
  }
  ::unsetenv("FT_PROGRESS_MIN_BYTES");
  EXPECT_EQ(ProgressReporter::stderr_options().min_bytes, 64 * kMiB);
}

}  // namespace
}  // namespace ft
