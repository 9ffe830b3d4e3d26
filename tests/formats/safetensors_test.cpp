// safetensors: the HF fixtures (tensor counts and byte totals checked independently with Python),
// a written single file with every dtype, a sharded folder with an index, and malformed headers.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "format_test_util.h"
#include "formats/safetensors.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

using ::ft::testing::TempDir;

std::string hf(const std::string& name) { return ::ft::testing::shared_dir() + "/fixtures/hf/" + name; }

TEST(Safetensors, Qwen3MoeFixture) {
  SafetensorsSet s(hf("qwen3_moe"));
  ASSERT_EQ(s.files().size(), 1u);
  const SafetensorsFile& f = s.files()[0];
  EXPECT_EQ(f.data_offset(), 8u + 7488u);
  EXPECT_EQ(f.metadata()["format"], "pt");
  ASSERT_EQ(s.tensors().size(), 69u);
  int64_t total = 0;
  for (const auto& t : s.tensors()) {
    EXPECT_EQ(t.dtype, DType::BF16) << t.name;
    EXPECT_EQ(t.bytes, t.numel() * 2) << t.name;
    total += t.bytes;
  }
  EXPECT_EQ(total, 379648);
  // In data-offset order: lm_head first, model.norm.weight (data_offsets [379520, 379648]) last.
  EXPECT_EQ(s.tensors().front().name, "lm_head.weight");
  const TensorInfo& norm = s.tensors().back();
  EXPECT_EQ(norm.name, "model.norm.weight");
  EXPECT_EQ(norm.shape, (std::vector<int64_t>{64}));
  EXPECT_EQ(norm.data, s.files()[0].tensors().back().data);
  const auto* base = s.tensors().front().data;
  EXPECT_EQ(norm.data - base, 379520);
}

TEST(Safetensors, EveryHfFixtureOpens) {
  // name -> (tensor count, data bytes), from Python's json + struct reading of each header.
  const std::map<std::string, std::pair<size_t, int64_t>> expect = {
      {"deepseek_v3", {91, 503168}}, {"deepseek_v4", {208, 5525514}}, {"gemma4", {74, 1233768}},
      {"glm4_moe", {82, 465824}},    {"gpt_oss", {37, 781744}},       {"llama", {21, 254592}},
      {"minimax_m2", {139, 1415104}}, {"mixtral", {65, 772736}},      {"olmoe", {69, 773120}},
      {"qwen2", {27, 255104}},       {"qwen2_moe", {79, 429440}},     {"qwen3", {25, 254720}},
      {"qwen3_5", {56, 417104}},     {"qwen3_5_moe", {160, 716624}},  {"qwen3_moe", {69, 379648}},
      {"qwen3_moe_64e", {807, 10160640}}, {"qwen3_next", {153, 714592}}, {"qwen3_tied", {24, 189184}},
      {"qwen4_exp", {215, 1264448}},
  };
  for (const auto& [name, want] : expect) {
    SafetensorsSet s(hf(name));
    int64_t total = 0;
    for (const auto& t : s.tensors()) total += t.bytes;
    EXPECT_EQ(s.tensors().size(), want.first) << name;
    EXPECT_EQ(total, want.second) << name;
  }
}

TEST(Safetensors, WriteReadEveryDtype) {
  TempDir tmp("st_dtypes");
  std::vector<uint8_t> buf(64);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 7);
  std::vector<SafetensorsTensor> ts;
  const char* names[] = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "I64", "I32", "I16", "I8", "U8", "BOOL"};
  for (const char* n : names) ts.push_back({std::string("t.") + n, *dtype_from_safetensors(n), {2, 3}, buf.data()});
  ts.push_back({"empty", DType::F32, {0, 5}, buf.data()});
  std::string path = tmp.file("all.safetensors");
  write_safetensors(path, ts, {{"format", "pt"}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.data_offset() % 8, 0u);
  ASSERT_EQ(f.tensors().size(), ts.size());
  for (size_t i = 0; i < std::size(names); ++i) {
    const TensorInfo& t = f.tensors()[i];
    EXPECT_EQ(t.name, ts[i].name);
    EXPECT_EQ(std::string(safetensors_dtype_name(t.dtype)), names[i]);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::memcmp(t.data, buf.data(), static_cast<size_t>(t.bytes)), 0);
  }
  EXPECT_EQ(f.tensors()[0].bytes, 48);  // F64
  EXPECT_EQ(f.tensors()[11].bytes, 6);  // BOOL
  EXPECT_EQ(f.metadata()["format"], "pt");
  EXPECT_FALSE(dtype_from_safetensors("U16").has_value());
  EXPECT_THROW(safetensors_dtype_name(DType::Q4_K), Error);
}

TEST(Safetensors, ShardedFolder) {
  TempDir tmp("st_shards");
  std::vector<float> a(6, 1.f), b(4, 2.f), c(2, 3.f);
  write_safetensors(tmp.file("model-00001-of-00002.safetensors"),
                    {{"w.a", DType::F32, {2, 3}, a.data()}, {"w.b", DType::F32, {4}, b.data()}});
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), {{"w.c", DType::F32, {1, 2}, c.data()}});
  nlohmann::json index = {{"metadata", {{"total_size", 48}}},
                          {"weight_map",
                           {{"w.a", "model-00001-of-00002.safetensors"},
                            {"w.b", "model-00001-of-00002.safetensors"},
                            {"w.c", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(tmp.file("model.safetensors.index.json")) << index.dump();
  SafetensorsSet s(tmp.path().string());
  ASSERT_EQ(s.files().size(), 2u);
  ASSERT_EQ(s.tensors().size(), 3u);
  EXPECT_EQ(s.tensors()[0].name, "w.a");
  EXPECT_EQ(s.tensors()[2].name, "w.c");
  float v;
  std::memcpy(&v, s.tensors()[2].data, 4);
  EXPECT_EQ(v, 3.f);
  // Opening the index file directly works too.
  EXPECT_EQ(SafetensorsSet(tmp.file("model.safetensors.index.json")).tensors().size(), 3u);

  // The index names the wrong shard for a tensor.
  index["weight_map"]["w.c"] = "model-00001-of-00002.safetensors";
  std::ofstream(tmp.file("model.safetensors.index.json")) << index.dump();
  try {
    SafetensorsSet bad(tmp.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("tensor w.c"), std::string::npos) << e.what();
  }
  // A shard outside the folder, and a missing shard.
  index["weight_map"]["w.c"] = "../elsewhere.safetensors";
  std::ofstream(tmp.file("model.safetensors.index.json")) << index.dump();
  EXPECT_THROW(SafetensorsSet bad(tmp.path().string()), Error);
  index["weight_map"]["w.c"] = "model-00003-of-00002.safetensors";
  std::ofstream(tmp.file("model.safetensors.index.json")) << index.dump();
  try {
    SafetensorsSet bad(tmp.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound) << e.what();
  }
  // A tensor in two shards.
  write_safetensors(tmp.file("model-00002-of-00002.safetensors"), {{"w.a", DType::F32, {1, 2}, c.data()}});
  index["weight_map"] = {{"w.a", "model-00001-of-00002.safetensors"},
                         {"w.b", "model-00001-of-00002.safetensors"},
                         {"x", "model-00002-of-00002.safetensors"}};
  std::ofstream(tmp.file("model.safetensors.index.json")) << index.dump();
  try {
    SafetensorsSet bad(tmp.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor w.a is also in"), std::string::npos) << e.what();
  }
}

// A file with header `json` (padded) followed by `data_bytes` zero bytes.
std::string make_file(const TempDir& tmp, const std::string& json, size_t data_bytes, uint64_t claimed_size = 0) {
  ::ft::testing::Bytes b;
  b.u64(claimed_size ? claimed_size : json.size());
  b.raw(json.data(), json.size());
  b.b.resize(b.size() + data_bytes);
  std::string path = tmp.file("bad.safetensors");
  ::ft::testing::write_bytes(path, b.b);
  return path;
}

void expect_invalid(const std::string& path, const std::string& part) {
  try {
    SafetensorsFile f(path);
    ADD_FAILURE() << "no error for " << part;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

TEST(Safetensors, MalformedHeaders) {
  TempDir tmp("st_bad");
  std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  {
    ::ft::testing::Bytes b;
    b.raw("abc", 3);
    ::ft::testing::write_bytes(tmp.file("short.safetensors"), b.b);
    expect_invalid(tmp.file("short.safetensors"), "header size at offset 0");
  }
  expect_invalid(make_file(tmp, ok, 8, 1u << 20), "exceeds");
  expect_invalid(make_file(tmp, ok, 8, ~uint64_t{0}), "exceeds");
  expect_invalid(make_file(tmp, R"({"a": [1, )", 8), "header JSON at offset");
  expect_invalid(make_file(tmp, "[1,2]", 8), "not a JSON object");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"U16","shape":[2],"data_offsets":[0,4]}})", 8), "unknown dtype \"U16\"");
  expect_invalid(make_file(tmp, R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), "dtype");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "non-negative");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8), "outside");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "outside");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16), "needs 3 x 4");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[2147483648,4],"data_offsets":[0,8]}})", 8),
                 "needs");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 8),
                 "overflows");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16),
                 "overlap");
  expect_invalid(make_file(tmp, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), "data_offsets");
  expect_invalid(make_file(tmp, R"({"__metadata__":{"k":1}})", 0), "__metadata__.k");
  // And a good one loads.
  SafetensorsFile f(make_file(tmp, ok, 8));
  EXPECT_EQ(f.tensors().size(), 1u);
}

}  // namespace
}  // namespace ft
