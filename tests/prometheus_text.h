#pragma once
// Reading a /metrics body (Prometheus text exposition format 0.0.4) in tests: a sample's value, and
// the checks a scraper makes of the whole body.
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>

namespace ft::testing {

/** The value of the sample written exactly `series` ("freetoken_x", "freetoken_x{rank=\"1\"}") in
 *  `text`; nullopt when there is none. */
inline std::optional<double> prom_sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 && line[series.size()] == ' ')
      return std::stod(line.substr(series.size() + 1));
  return std::nullopt;
}

/** What is wrong with `text` as an exposition, "" when nothing: every family has exactly one HELP and
 *  one TYPE line, both before its samples; every sample belongs to a family with a TYPE (a summary's
 *  _sum and _count to the summary); a family's samples are together, never interleaved with another's. */
inline std::string exposition_problems(const std::string& text) {
  std::map<std::string, std::string> type;  // family -> its TYPE
  std::map<std::string, int> helps, types;
  std::set<std::string> closed;  // families whose samples have ended
  std::string current;           // the family of the lines being read
  std::string problems;
  auto enter = [&](const std::string& family, const std::string& line) {
    if (family == current) return;
    if (closed.count(family)) problems += "family " + family + " again at: " + line + "\n";
    if (!current.empty()) closed.insert(current);
    current = family;
  };
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      std::istringstream w(line.substr(7));
      std::string family, kind;
      w >> family >> kind;
      enter(family, line);
      if (line[2] == 'H') {
        ++helps[family];
      } else {
        ++types[family];
        type[family] = kind;
      }
      continue;
    }
    if (line[0] == '#') continue;
    std::string name = line.substr(0, line.find_first_of("{ "));
    for (const char* suffix : {"_sum", "_count", "_bucket"}) {  // a summary's or histogram's series
      const std::string s = suffix;
      if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
        const std::string base = name.substr(0, name.size() - s.size());
        if (type.count(base) && (type[base] == "summary" || type[base] == "histogram")) name = base;
      }
    }
    if (!type.count(name)) problems += "sample without a TYPE: " + line + "\n";
    enter(name, line);
  }
  for (const auto& [family, n] : types)
    if (n != 1 || helps[family] != 1)
      problems += family + ": " + std::to_string(helps[family]) + " HELP and " + std::to_string(n) + " TYPE lines\n";
  return problems;
}

}  // namespace ft::testing
