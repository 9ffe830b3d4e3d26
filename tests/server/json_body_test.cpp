// parse_json_linear (request bodies): the same ordered_json as the library's parser (key order, a
// repeated key's last value, every scalar kind), the depth limit, the syntax error without the
// library's tag, and linear time: a request body of 4x the keys takes about 4x as long to parse (with
// the library's ordered insertion, 16x: 168 s for 400k keys; issue 40).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>

#include "server/json_body.h"
#include "server/request_parse.h"

namespace ft::server {
namespace {

using ojson = nlohmann::ordered_json;

TEST(JsonBody, SameTreeAsTheLibrarysParser) {
  for (const char* text : {
           R"({"z": 1, "a": [1, -2, 3.5, 1e300, 18446744073709551615, true, false, null], "m": {"k": "v\u00e9\n"}})",
           R"({"dup": 1, "x": {}, "dup": {"inner": [[], {}]}, "y": ""})",
           R"([{"b": 1, "a": 2}, [], "s", 0])", R"("just a string")", R"(-0.0)", R"({"a": {"a": {"a": 1, "a": 2}}})"}) {
    const ojson want = ojson::parse(text);
    const ojson got = parse_json_linear(text, 64);
    EXPECT_EQ(got, want) << text;
    EXPECT_EQ(got.dump(), want.dump()) << text;  // key order too
  }
  // Objects past the size where keys are looked up by hash: repeats before and after that point.
  std::string big = "{\"k3\": 0";
  for (int i = 0; i < 40; ++i) big += ",\"k" + std::to_string(i) + "\": " + std::to_string(i);
  big += ",\"k3\": \"last\", \"k39\": [1], \"new\": null}";
  EXPECT_EQ(parse_json_linear(big, 64).dump(), ojson::parse(big).dump());
}

TEST(JsonBody, DepthLimitCountsEveryContainer) {
  auto nested = [](int n) { return std::string(static_cast<size_t>(n), '[') + std::string(static_cast<size_t>(n), ']'); };
  EXPECT_NO_THROW(parse_json_linear(nested(64), 64));
  EXPECT_THROW(parse_json_linear(nested(65), 64), JsonTooDeep);
  EXPECT_THROW(parse_json_linear("{\"a\":" + nested(64) + "}", 64), JsonTooDeep);
}

TEST(JsonBody, SyntaxErrorsSayWhereWithoutTheTag) {
  try {
    parse_json_linear("{not json", 64);
    ADD_FAILURE() << "parsed";
  } catch (const JsonSyntaxError& e) {
    EXPECT_EQ(e.what.rfind("parse error at line 1, column 3", 0), 0u) << e.what;
    EXPECT_EQ(e.what.find("[json.exception"), std::string::npos) << e.what;
  }
  EXPECT_THROW(parse_json_linear("{\"a\": 1", 64), JsonSyntaxError);
  EXPECT_THROW(parse_json_linear("", 64), JsonSyntaxError);
}

TEST(JsonBody, ManyKeysTakeLinearTime) {
  auto body = [](int n) {
    std::string s = "{";
    for (int i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
    return s + "}";
  };
  // This thread's CPU time, not the wall clock: a parse descheduled by the other tests on the shared
  // cores does not count the wait (the wall clock measured 10k keys at 1.7 ms and 160k at 161 ms, a
  // ratio of 97, on a loaded machine).
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  auto seconds = [&](const std::string& text, size_t keys) {
    const double t0 = cpu_now();
    const ojson j = parse_json_body(text);  // what every route parses its body with
    EXPECT_EQ(j.size(), keys);
    return cpu_now() - t0;
  };
  const std::string small = body(10000), large = body(160000);
  // The best of 5 runs each, interleaved, so a load that comes and goes (tests share the cores) touches
  // both sizes alike.
  double best_small = 1e9, best_large = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    best_small = std::min(best_small, seconds(small, 10000));
    best_large = std::min(best_large, seconds(large, 160000));
  }
  const double ratio = best_large / best_small;
  // 16 times the keys: ~16 by the algorithm (up to ~30 with allocation and cache effects on a loaded
  // machine); the library's quadratic ordered insertion gives ~256. The gap is wide enough that load
  // on shared cores cannot close it (4 times the keys, 4 against 16, failed under load).
  EXPECT_LT(ratio, 80.0) << best_small << " s for 10k keys, " << best_large << " s for 160k";
}

}  // namespace
}  // namespace ft::server
