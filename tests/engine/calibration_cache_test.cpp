// CalibrationCache: the start-up calibration's file round-trips, and a file of another key or version,
// or an unwritable folder, is refused without throwing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/calibration_cache.h"
#include "test_util.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

FetchCalibration sample() {
  FetchCalibration c;
  c.choice = "cpu 1";
  c.ms_per_step = {{"cpu 0.25", 21.5}, {"cpu 1", 19.25}, {"offload", 30.0}};
  c.measured_at = "2026-12-06T08:40:00Z";
  return c;
}

TEST(CalibrationCache, RoundTripsPerKey) {
  const std::string dir = testing::scratch_path("calcache") + "/nested";
  fs::remove_all(fs::path(dir).parent_path());
  const CalibrationCache a(dir, "machine A\nmodel M"), b(dir, "machine B\nmodel M");
  EXPECT_NE(a.file(), b.file());
  EXPECT_EQ(a.file().rfind(dir + "/moe-calibration-", 0), 0u) << a.file();
  EXPECT_FALSE(a.load());  // no file yet
  ASSERT_TRUE(a.store(sample()));  // makes the folder
  const std::optional<FetchCalibration> got = a.load();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->choice, "cpu 1");
  EXPECT_EQ(got->ms_per_step, sample().ms_per_step);
  EXPECT_EQ(got->measured_at, "2026-12-06T08:40:00Z");
  EXPECT_EQ(format_timings(*got), "cpu 0.25: 21.50, cpu 1: 19.25, offload: 30.00");
  EXPECT_FALSE(b.load());
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(CalibrationCache, AnotherKeyVersionOrBrokenFileIsIgnored) {
  const std::string dir = testing::scratch_path("calcache_bad");
  fs::remove_all(dir);
  const CalibrationCache a(dir, "key A");
  ASSERT_TRUE(a.store(sample()));
  nlohmann::json j = nlohmann::json::parse(testing::read_file(a.file()));
  j["key"] = "key B";  // a hash collision, or a hand-edited file
  std::ofstream(a.file(), std::ios::trunc) << j.dump();
  EXPECT_FALSE(a.load());
  j["key"] = "key A";
  j["version"] = 2;
  std::ofstream(a.file(), std::ios::trunc) << j.dump();
  EXPECT_FALSE(a.load());
  j["version"] = 1;
  j["ms_per_step"] = "fast";
  std::ofstream(a.file(), std::ios::trunc) << j.dump();
  EXPECT_FALSE(a.load());
  std::ofstream(a.file(), std::ios::trunc) << "\x01\x02 not json";
  EXPECT_FALSE(a.load());
  fs::remove_all(dir);
}

TEST(CalibrationCache, AnUnwritableFolderIsReportedNotThrown) {
  const std::string file = testing::scratch_path("calcache_file");
  std::ofstream(file) << "a file where the folder would be";
  const CalibrationCache a(file + "/sub", "key");
  EXPECT_FALSE(a.store(sample()));
  EXPECT_FALSE(a.load());
  fs::remove(file);
}

}  // namespace
}  // namespace ft
