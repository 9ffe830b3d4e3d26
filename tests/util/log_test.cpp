// util/log: --log-format json writes every line as one JSON object, with log_fields()' typed keys.
#include <gtest/gtest.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "log_capture.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {
namespace {

using testing::LogCapture;

TEST(LogFormat, JsonLinesParseWithTsLevelAndEscapedMessage) {
  LogCapture log(spdlog::level::debug, /*json=*/true);
  spdlog::info("loaded {} in {:.1f} s", "model \"q\"\n\tback\\slash", 1.5);
  spdlog::debug("bytes \x01 and invalid utf-8 \xff end");
  spdlog::warn("plain");
  spdlog::error("bad");
  spdlog::critical("worse");
  spdlog::trace("below the level");
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 5u);
  for (const std::string& l : lines) EXPECT_EQ(l.find('\n'), std::string::npos) << l;  // one line each
  nlohmann::json a = nlohmann::json::parse(lines[0]);
  ASSERT_TRUE(a.is_object());
  EXPECT_EQ(a.size(), 3u) << lines[0];
  EXPECT_EQ(a["level"], "info");
  EXPECT_EQ(a["msg"], "loaded model \"q\"\n\tback\\slash in 1.5 s");
  const std::string ts = a["ts"];  // 2026-12-06T11:09:38.123Z
  ASSERT_EQ(ts.size(), 24u) << ts;
  EXPECT_EQ(ts[4], '-');
  EXPECT_EQ(ts[10], 'T');
  EXPECT_EQ(ts[19], '.');
  EXPECT_EQ(ts[23], 'Z');
  EXPECT_EQ(lines[0].find("ts"), 2u) << "ts, level, msg in that order: " << lines[0];
  nlohmann::json b = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(b["level"], "debug");
  EXPECT_EQ(b["msg"], "bytes \x01 and invalid utf-8 \xEF\xBF\xBD end");  // U+FFFD for the bad byte
  // The names --log-level takes (spdlog's own would say "warning").
  EXPECT_EQ(nlohmann::json::parse(lines[2])["level"], "warn");
  EXPECT_EQ(nlohmann::json::parse(lines[3])["level"], "error");
  EXPECT_EQ(nlohmann::json::parse(lines[4])["level"], "critical");
}

TEST(LogFormat, FieldsAreTypedKeysInJsonAndAbsentInText) {
  const nlohmann::ordered_json fields = {{"method", "POST"}, {"status", 200}, {"tokens_per_s", 52.5}};
  {
    LogCapture log(spdlog::level::info, /*json=*/true);
    log_fields(spdlog::level::info, "POST /x 200", fields);
    log_fields(spdlog::level::debug, "below the level", fields);
    spdlog::info("after");  // the fields were only for their own line
    const std::vector<std::string> lines = log.lines();
    ASSERT_EQ(lines.size(), 2u);
    nlohmann::json j = nlohmann::json::parse(lines[0]);
    EXPECT_EQ(j["msg"], "POST /x 200");
    EXPECT_EQ(j["method"], "POST");
    EXPECT_TRUE(j["status"].is_number_integer());
    EXPECT_EQ(j["status"], 200);
    EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), 52.5);
    EXPECT_FALSE(nlohmann::json::parse(lines[1]).contains("status"));
  }
  LogCapture log(spdlog::level::info);
  log_fields(spdlog::level::info, "POST /x 200", fields);
  ASSERT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(log.lines()[0], "info POST /x 200");
}

TEST(LogFormat, ARanksLinesCarryItsRank) {
  {
    LogCapture log(spdlog::level::info, /*json=*/true);
    std::thread([] {
      set_log_rank(2);
      spdlog::info("from rank 2");
    }).join();
    spdlog::info("from no rank");
    const std::vector<std::string> lines = log.lines();
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(nlohmann::json::parse(lines[0])["rank"], 2) << lines[0];
    EXPECT_FALSE(nlohmann::json::parse(lines[1]).contains("rank")) << lines[1];
  }
  LogCapture log(spdlog::level::info);
  spdlog::default_logger()->set_formatter(make_text_log_formatter());
  std::thread([] {
    set_log_rank(1);
    spdlog::warn("from rank 1");
    set_log_rank(-1);
    spdlog::warn("unlabelled again");
  }).join();
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[0].find("] [warning] [rank 1] from rank 1"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("] [warning] unlabelled again"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[0][0], '[');
}

TEST(LogFormat, UnknownFormatIsRefused) {
  try {
    set_log_format("yaml");
    FAIL() << "accepted yaml";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown log format 'yaml' (use text or json)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft
