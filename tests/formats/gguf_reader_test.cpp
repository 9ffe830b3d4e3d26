// GGUF reader: real files (values checked against what the files hold, read independently with
// Python), the quant fixture's manifest, and one hand-made malformed header per validation rule.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "format_test_util.h"
#include "formats/gguf_reader.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

using testing::Bytes;

std::string shared(const std::string& rel) { return ::ft::testing::shared_dir() + "/" + rel; }

TEST(GgufReader, Stories260K) {
  GgufReader r(shared("data/models/stories260K.gguf"));
  ASSERT_EQ(r.files().size(), 1u);
  const GgufFile& f = r.files()[0];
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.header_end(), 14152u);
  EXPECT_EQ(f.data_offset(), 14176u);  // 14152 rounded up to 32
  EXPECT_EQ(r.kvs().size(), 19u);
  EXPECT_EQ(r.kvs()[0].key, "tokenizer.ggml.tokens");  // file order kept
  EXPECT_EQ(r.find("general.architecture")->as_string(), "llama");
  EXPECT_EQ(r.find("llama.block_count")->type(), GgufType::U32);
  EXPECT_EQ(r.find("llama.block_count")->as_int(), 5);
  EXPECT_EQ(r.find("llama.embedding_length")->as_int(), 64);
  EXPECT_EQ(r.find("llama.attention.head_count_kv")->as_int(), 4);
  EXPECT_EQ(r.find("tokenizer.ggml.seperator_token_id")->as_int(), 4294967295);
  EXPECT_FLOAT_EQ(static_cast<float>(r.find("llama.attention.layer_norm_rms_epsilon")->as_double()), 1e-5f);
  const GgufValue* tokens = r.find("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens && tokens->is_array());
  EXPECT_EQ(tokens->elem_type(), GgufType::STRING);
  ASSERT_EQ(tokens->size(), 512u);
  EXPECT_EQ(tokens->strings()[1], "<s>");
  EXPECT_EQ(r.find("tokenizer.ggml.scores")->elem_type(), GgufType::F32);
  EXPECT_EQ(r.find("tokenizer.ggml.token_type")->int_at(0), 2);
  EXPECT_EQ(r.find("missing.key"), nullptr);

  ASSERT_EQ(r.tensors().size(), 48u);
  const GgufTensor& emb = r.tensors()[0];
  EXPECT_EQ(emb.info.name, "token_embd.weight");
  EXPECT_EQ(emb.info.dtype, DType::F32);
  EXPECT_EQ(emb.ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(emb.info.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(emb.info.bytes, 512 * 64 * 4);
  EXPECT_EQ(emb.info.data, f.file_data() + 14176);
  const GgufTensor& k = r.tensors()[4];
  EXPECT_EQ(k.info.name, "blk.0.attn_k.weight");
  EXPECT_EQ(k.info.shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(k.offset, 278784u);
  EXPECT_EQ(k.info.data, f.file_data() + 14176 + 278784);

  nlohmann::json j = r.metadata_json();
  EXPECT_EQ(j["llama.block_count"], 5);
  EXPECT_EQ(j["tokenizer.ggml.tokens"].size(), 512u);
  EXPECT_EQ(j["tokenizer.ggml.bos_token_id"], 1);
}

// quant_types.gguf: every tensor's type, shape, size and absolute data offset equal manifest.json; the F32
// tensor's bytes equal its expected file.
TEST(GgufReader, QuantFixtureMatchesManifest) {
  std::string dir = shared("fixtures/quant");
  nlohmann::json m = nlohmann::json::parse(::ft::testing::read_file(dir + "/manifest.json"));
  GgufReader r(dir + "/quant_types.gguf");
  EXPECT_EQ(r.files()[0].alignment(), m["alignment"].get<uint32_t>());
  EXPECT_EQ(r.find("general.architecture")->as_string(), "fixture");
  ASSERT_EQ(r.tensors().size(), m["types"].size());
  const uint8_t* base = r.files()[0].file_data();
  for (const auto& [type, t] : m["types"].items()) {
    SCOPED_TRACE(type);
    const GgufTensor* found = nullptr;
    for (const auto& x : r.tensors())
      if (x.info.name == t["tensor"].get<std::string>()) found = &x;
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(static_cast<uint32_t>(found->info.dtype), t["ggml_type"].get<uint32_t>());
    EXPECT_EQ(found->ne, t["ne"].get<std::vector<int64_t>>());
    EXPECT_EQ(found->info.shape, t["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(found->info.bytes, t["nbytes"].get<int64_t>());
    EXPECT_EQ(found->info.data - base, t["file_offset"].get<int64_t>());
    EXPECT_EQ(found->offset, t["data_offset"].get<uint64_t>());
  }
  const TensorInfo& f32 = r.tensors()[0].info;
  std::string expected = ::ft::testing::read_file(dir + "/expected/F32.f32");
  ASSERT_EQ(expected.size(), static_cast<size_t>(f32.bytes));
  EXPECT_EQ(std::memcmp(expected.data(), f32.data, expected.size()), 0);
}

TEST(GgufReader, EverySharedGgufOpens) {
  int n = 0;
  for (const char* sub : {"data", "fixtures/gguf", "fixtures/quant"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(shared(sub))) {
      if (e.path().extension() != ".gguf") continue;
      SCOPED_TRACE(e.path().string());
      GgufReader r(e.path().string());
      EXPECT_TRUE(r.find("general.architecture")) << e.path();
      for (const auto& t : r.tensors()) EXPECT_TRUE(t.info.bytes == 0 || t.info.data != nullptr);
      ++n;
    }
  }
  EXPECT_GE(n, 12 + 26 + 1);
}

TEST(GgufReader, MissingFileIsNotFound) {
  try {
    GgufReader r("/nonexistent/x.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
}

// ---- malformed headers, one rule each ----

Bytes header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
  Bytes b;
  b.raw("GGUF", 4).u32(version).u64(n_tensors).u64(n_kv);
  return b;
}

void tensor_info(Bytes& b, const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
  b.str(name).u32(static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) b.u64(d);
  b.u32(type).u64(offset);
}

// Expects kInvalidFile with every one of `parts` in the message.
void expect_invalid(const Bytes& b, std::initializer_list<std::string> parts) {
  try {
    GgufFile f("x.gguf", b.b);
    ADD_FAILURE() << "parsed without error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind("x.gguf: ", 0), 0u) << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

TEST(GgufReaderMalformed, HeaderFields) {
  Bytes bad_magic;
  bad_magic.raw("GGUX", 4).u32(3).u64(0).u64(0);
  expect_invalid(bad_magic, {"magic at offset 0"});
  expect_invalid(header(0, 0, 1), {"version at offset 4", "version 1 is not supported"});
  expect_invalid(header(0, 0, 0x03000000), {"big-endian"});
  Bytes trunc = header(0, 0);
  trunc.b.resize(20);
  expect_invalid(trunc, {"metadata count at offset 16", "file ends after 4 of 8 bytes"});
  expect_invalid(header(0, uint64_t{1} << 60), {"metadata count at offset 16", "cannot fit"});
  expect_invalid(header(uint64_t{1} << 40, 0), {"tensor count at offset 8", "cannot fit"});
}

TEST(GgufReaderMalformed, Metadata) {
  {
    Bytes b = header(0, 1);
    b.u64(1000).raw("abcdefghij", 10);  // key length past the end
    expect_invalid(b, {"metadata 0 key at offset 24", "string length 1000 exceeds the 10 bytes left"});
  }
  {
    Bytes b = header(0, 1);
    b.str("k").u32(13).u32(0);
    expect_invalid(b, {"metadata 0 (k) value type at offset 33", "unknown value type id 13"});
  }
  {
    Bytes b = header(0, 2);
    b.str("k").u32(4).u32(7).str("k").u32(4).u32(8);
    expect_invalid(b, {"metadata 1 (k)", "duplicate key"});
  }
  {
    Bytes b = header(0, 1);
    b.str("arr").u32(9).u32(4).u64(uint64_t{1} << 61).u32(0);  // u32 array claiming 2^61 elements
    expect_invalid(b, {"metadata 0 (arr) array length", "cannot fit"});
  }
  {
    Bytes b = header(0, 1);
    b.str("arr").u32(9).u32(8).u64(2).str("ok").u64(99);  // second string runs off the end
    expect_invalid(b, {"metadata 0 (arr) element 1", "string length 99 exceeds"});
  }
  {
    Bytes b = header(0, 1);
    b.str("deep").u32(9);
    for (int i = 0; i < 20; ++i) b.u32(9).u64(1);
    b.u32(0).u64(0);
    expect_invalid(b, {"metadata 0 (deep)", "nested deeper"});
  }
  {
    Bytes b = header(0, 1);
    b.str("flag").u32(7).put<uint8_t>(2);
    expect_invalid(b, {"metadata 0 (flag)", "bool has value 2"});
  }
  {
    Bytes b = header(0, 1);
    b.str("general.alignment").u32(4).u32(48);
    expect_invalid(b, {"general.alignment", "not a power of two"});
  }
}

TEST(GgufReaderMalformed, TensorInfos) {
  auto one = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
    Bytes b = header(1, 0);
    tensor_info(b, "blk.0.attn_q.weight", ne, type, offset);
    b.pad(32);
    b.b.resize(b.size() + data_bytes);
    return b;
  };
  // header 24 + name (8 + 19) = 51: n_dims field at offset 51
  expect_invalid(one({1, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 64),
                 {"tensor info 0 (blk.0.attn_q.weight): n_dims 9 at offset 51", "exceeds 4"});
  expect_invalid(one({4, 4}, 4, 0, 64), {"tensor info 0 (blk.0.attn_q.weight): type", "removed"});
  expect_invalid(one({4, 4}, 99, 0, 64), {"tensor info 0 (blk.0.attn_q.weight): type", "unknown tensor type id 99"});
  expect_invalid(one({33, 2}, 8, 0, 64), {"type", "ne[0] = 33 is not a multiple of the Q8_0 block size 32"});
  expect_invalid(one({uint64_t{1} << 63, 1}, 0, 0, 64), {"ne[0]", "does not fit in int64"});
  expect_invalid(one({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0, 64), {"ne[1]", "overflows"});
  expect_invalid(one({4, 4}, 0, 16, 128), {"offset", "not a multiple of the alignment 32"});
  expect_invalid(one({4, 4}, 0, 0, 63), {"tensor info 0 (blk.0.attn_q.weight): data offset field at offset", "past the end"});
  expect_invalid(one({4, 4}, 0, uint64_t{1} << 63, 64), {"past the end"});
  {
    Bytes b = header(2, 0);
    tensor_info(b, "a", {4}, 0, 0);
    tensor_info(b, "a", {4}, 0, 32);
    b.pad(32);
    b.b.resize(b.size() + 64);
    expect_invalid(b, {"tensor info 1 (a)", "duplicate tensor name"});
  }
  {
    Bytes b = header(2, 0);
    tensor_info(b, "a", {16}, 0, 0);  // 64 bytes at [0, 64)
    tensor_info(b, "b", {8}, 0, 32);  // 32 bytes at [32, 64): overlaps a
    b.pad(32);
    b.b.resize(b.size() + 64);
    expect_invalid(b, {"tensor info 1 (b): data offset field at offset", "overlaps tensor a"});
  }
  {
    Bytes b = header(1, 0);
    tensor_info(b, "a", {4}, 0, 0);
    b.b.resize(b.size() - 3);  // offset field cut short
    expect_invalid(b, {"tensor info 0 (a): data offset field at offset", "file ends after 5 of 8 bytes"});
  }
}

TEST(GgufReaderMalformed, ValidHandMadeFileLoads) {
  Bytes b = header(2, 2);
  b.str("general.alignment").u32(4).u32(64);
  b.str("nested").u32(9).u32(9).u64(2).u32(5).u64(1).u32(7).u32(8).u64(1).str("x");
  tensor_info(b, "a", {32, 2}, 8, 0);  // Q8_0: 2 blocks = 68 bytes
  tensor_info(b, "z", {0, 3}, 0, 128);  // zero elements
  b.pad(64);
  size_t data_at = b.size();
  b.b.resize(b.size() + 128);
  GgufFile f("ok.gguf", b.b);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset(), data_at);
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].info.bytes, 68);
  EXPECT_EQ(f.tensors()[0].info.shape, (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(f.tensors()[1].info.bytes, 0);
  const GgufValue* nested = f.find("nested");
  ASSERT_TRUE(nested);
  ASSERT_EQ(nested->arrays().size(), 2u);
  EXPECT_EQ(nested->arrays()[0].int_at(0), 7);
  EXPECT_EQ(nested->arrays()[1].strings()[0], "x");
  EXPECT_EQ(nested->to_json(), nlohmann::json::parse(R"([[7], ["x"]])"));
}

}  // namespace
}  // namespace ft
