// The tree's structure, checked on every `make test`: includes between the folders of src/ point
// down the layer order of DESIGN.md (util -> tensor -> formats, quant -> backend -> dist, tokenizer
// -> kv, moe -> model -> engine -> tools -> server -> cli; folders on one step may include each
// other; tools/ may include anything but server and cli), and no source file passes 800 lines.
// A planted back-edge and a planted long file show that the checks can fail.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

/** Layer of each top-level folder of src/ (equal numbers: one step of the order). */
const std::map<std::string, int>& layers() {
  static const std::map<std::string, int> kLayers = {
      {"util", 0},  {"tensor", 1}, {"formats", 2}, {"quant", 2},  {"backend", 3}, {"dist", 4},  {"tokenizer", 4},
      {"kv", 5},    {"moe", 5},    {"model", 6},   {"engine", 7}, {"tools", 8},   {"server", 9}, {"cli", 10}};
  return kLayers;
}

const std::vector<std::string> kExtensions = {".h", ".cpp", ".cu", ".cuh"};

bool is_source(const fs::path& p) {
  for (const std::string& e : kExtensions)
    if (p.extension() == e) return true;
  return false;
}

/** "src/a/b.cpp:12 includes engine/x.h (engine is above a)" for every include of `src` that points
 *  up, or into a folder the order does not know. */
std::vector<std::string> back_edges(const fs::path& src) {
  static const std::regex kInclude(R"(^\s*#\s*include\s+"([A-Za-z_0-9]+)/)");
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file() || !is_source(entry.path())) continue;
    const fs::path rel = fs::relative(entry.path(), src);
    const std::string from = rel.begin()->string();
    const auto fl = layers().find(from);
    if (fl == layers().end()) {
      out.push_back(rel.string() + ": folder '" + from + "' is not in the layer order");
      continue;
    }
    std::ifstream in(entry.path());
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (!std::regex_search(line, m, kInclude)) continue;
      const std::string to = m[1];
      const auto tl = layers().find(to);
      if (tl == layers().end()) continue;  // a library's header ("nlohmann/json.hpp" style)
      if (tl->second > fl->second || (from == "tools" && (to == "server" || to == "cli")))
        out.push_back("src/" + rel.string() + ":" + std::to_string(n) + " includes " + to + "/ (" + to +
                      " is above " + from + ")");
    }
  }
  return out;
}

/** "src/a/b.cpp: 812 lines" for every source file over `limit` lines. */
std::vector<std::string> long_files(const fs::path& src, int limit) {
  std::vector<std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(src)) {
    if (!entry.is_regular_file() || !is_source(entry.path())) continue;
    std::ifstream in(entry.path());
    std::string line;
    int n = 0;
    while (std::getline(in, line)) ++n;
    if (n > limit) out.push_back("src/" + fs::relative(entry.path(), src).string() + ": " + std::to_string(n) + " lines");
  }
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += "\n  " + x;
  return s;
}

TEST(Layering, IncludesPointDown) {
  const std::vector<std::string> bad = back_edges(fs::path(FT_SOURCE_DIR) / "src");
  EXPECT_TRUE(bad.empty()) << "includes against the layer order of DESIGN.md:" << joined(bad);
}

TEST(Layering, NoSourceFileOver800Lines) {
  const std::vector<std::string> bad = long_files(fs::path(FT_SOURCE_DIR) / "src", 800);
  EXPECT_TRUE(bad.empty()) << "split these files:" << joined(bad);
}

TEST(Layering, PlantedBackEdgeAndLongFileAreFound) {
  const fs::path root = fs::path(scratch_path("layering"));
  fs::remove_all(root);
  fs::create_directories(root / "util");
  fs::create_directories(root / "engine");
  fs::create_directories(root / "tools");
  std::ofstream(root / "engine" / "ok.h") << "#include \"util/log.h\"\n#include <vector>\n";
  std::ofstream(root / "util" / "bad.h") << "#pragma once\n\n  #include \"engine/ok.h\"\n";
  std::ofstream(root / "tools" / "t.cpp") << "#include \"engine/ok.h\"\n#include \"server/x.h\"\n";
  const std::vector<std::string> bad = back_edges(root);
  ASSERT_EQ(bad.size(), 2u) << joined(bad);
  EXPECT_NE(joined(bad).find("util/bad.h:3 includes engine/"), std::string::npos) << joined(bad);
  EXPECT_NE(joined(bad).find("tools/t.cpp:2 includes server/"), std::string::npos) << joined(bad);
  {
    std::ofstream f(root / "engine" / "long.cpp");
    for (int i = 0; i < 801; ++i) f << "// line\n";
  }
  const std::vector<std::string> lng = long_files(root, 800);
  ASSERT_EQ(lng.size(), 1u);
  EXPECT_NE(lng[0].find("engine/long.cpp: 801 lines"), std::string::npos) << lng[0];
  fs::create_directories(root / "gadgets");
  std::ofstream(root / "gadgets" / "g.h") << "\n";
  EXPECT_NE(joined(back_edges(root)).find("'gadgets' is not in the layer order"), std::string::npos);
}

}  // namespace
}  // namespace ft::testing
