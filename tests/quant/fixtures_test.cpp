// Dequantization of every type in ../shared/fixtures/quant against gguf-py's expected float32.
// The tensor bytes are taken from quant_types.gguf at the manifest's absolute `file_offset`
// (no GGUF reader involved). Tolerance per the manifest: "exact" types must match bit for bit,
// including the sign of zero; "relative" types (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K) within 1e-6 * |exp|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "quant/quant.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace ft {
namespace {

std::string quant_dir() { return testing::shared_dir() + "/fixtures/quant"; }

nlohmann::json load_manifest() {
  std::ifstream in(quant_dir() + "/manifest.json");
  if (!in) return nullptr;
  return nlohmann::json::parse(in);
}

TEST(QuantFixtures, EveryTypeMatchesGgufPy) {
  const nlohmann::json manifest = load_manifest();
  ASSERT_TRUE(manifest.is_object()) << "cannot read " << quant_dir() << "/manifest.json";
  const std::string gguf = testing::read_file(quant_dir() + "/" + manifest.at("gguf_file").get<std::string>());
  ASSERT_GT(gguf.size(), 0u);
  const int64_t rows = manifest.at("rows"), cols = manifest.at("cols");

  std::set<std::string> checked;
  for (const auto& [name, t] : manifest.at("types").items()) {
    SCOPED_TRACE(name);
    const auto type = dtype_from_name(name);
    ASSERT_TRUE(type.has_value());
    EXPECT_EQ(static_cast<uint32_t>(*type), t.at("ggml_type").get<uint32_t>());
    EXPECT_EQ(dtype_info(*type).block_size, t.at("block_size").get<int64_t>());
    EXPECT_EQ(dtype_info(*type).block_bytes, t.at("type_size").get<int64_t>());
    ASSERT_TRUE(can_dequantize(*type));

    const int64_t offset = t.at("file_offset"), nbytes = t.at("nbytes");
    ASSERT_EQ(nbytes, dtype_bytes(*type, rows * cols));
    ASSERT_LE(static_cast<size_t>(offset + nbytes), gguf.size());
    const std::vector<float> expected = testing::read_f32(quant_dir() + "/" + t.at("expected").get<std::string>());
    ASSERT_EQ(expected.size(), static_cast<size_t>(rows * cols));

    // Row by row, as a consumer of the row API would call it.
    std::vector<float> got(expected.size());
    const int64_t row_bytes = dtype_bytes(*type, cols);
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row(*type, gguf.data() + offset + r * row_bytes, got.data() + r * cols, cols);

    const std::string kind = t.at("tolerance").at("kind");
    ASSERT_TRUE(kind == "exact" || kind == "relative") << kind;
    int64_t bad = 0, neg_zero = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const bool ok = kind == "exact" ? std::memcmp(&got[i], &expected[i], 4) == 0
                                      : std::fabs(got[i] - expected[i]) <= 1e-6f * std::fabs(expected[i]);
      if (!ok && ++bad <= 5) {
        ADD_FAILURE() << "element " << i << ": got " << got[i] << ", expected " << expected[i];
      }
      neg_zero += got[i] == 0.0f && std::signbit(got[i]);
    }
    EXPECT_EQ(bad, 0);
    if (kind == "exact") {
      EXPECT_EQ(neg_zero, t.at("expected_n_neg_zero").get<int64_t>());
    }
    checked.insert(name);
  }
  EXPECT_EQ(checked.size(), 26u);  // README: 26 covered types
}

// The whole tensor in one call equals the row-by-row result (blocks never straddle rows here).
TEST(QuantFixtures, WholeTensorInOneCall) {
  const nlohmann::json manifest = load_manifest();
  ASSERT_TRUE(manifest.is_object());
  const std::string gguf = testing::read_file(quant_dir() + "/quant_types.gguf");
  const auto& t = manifest.at("types").at("IQ1_M");
  const std::vector<float> expected = testing::read_f32(quant_dir() + "/" + t.at("expected").get<std::string>());
  std::vector<float> got(expected.size());
  dequantize_row(DType::IQ1_M, gguf.data() + t.at("file_offset").get<int64_t>(), got.data(),
                 static_cast<int64_t>(got.size()));
  EXPECT_EQ(std::memcmp(got.data(), expected.data(), got.size() * 4), 0);
}

}  // namespace
}  // namespace ft
