// Malformed safetensors headers and config files that fuzz/safetensors_config_fuzz.cpp found escaping
// the readers as something other than an ft::Error: a JSON number too large for a double (1e400) made
// nlohmann throw out_of_range, which the parse_error handlers did not catch.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "util/error.h"

namespace ft {
namespace {

std::vector<uint8_t> file_with_header(const std::string& header) {
  std::vector<uint8_t> bytes(8 + header.size() + 4, 0);
  const uint64_t n = header.size();
  std::memcpy(bytes.data(), &n, 8);
  std::memcpy(bytes.data() + 8, header.data(), header.size());
  return bytes;
}

TEST(SafetensorsMalformed, HugeNumberInHeaderIsAnInvalidFile) {
  const std::string good = R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})";
  EXPECT_EQ(SafetensorsFile("good.safetensors", file_with_header(good)).tensors().at(0).bytes, 4);
  const std::string huge = R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 1e400]}})";
  try {
    SafetensorsFile("huge.safetensors", file_with_header(huge));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("huge.safetensors: header JSON"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsMalformed, HugeNumberInConfigJsonIsAnInvalidFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "ft_huge_number_config.json").string();
  std::ofstream(path) << R"({"hidden_size": 1e400})";
  try {
    read_json_file(path);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ft
