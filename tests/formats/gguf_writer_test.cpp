// GGUF writer: every shared GGUF file survives read -> write -> read with identical metadata (typed,
// bit-exact) and tensor bytes; every value type round-trips; split sets merge and are validated.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "format_test_util.h"
#include "formats/checkpoint.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

std::string shared(const std::string& rel) { return ::ft::testing::shared_dir() + "/" + rel; }

void copy_into(const GgufReader& r, GgufWriter& w) {
  for (const auto& kv : r.kvs()) w.add(kv.key, kv.value);
  for (const auto& t : r.tensors()) w.add_tensor(t.info.name, t.info.dtype, t.info.shape, t.info.data, t.info.bytes);
}

void expect_same(const GgufReader& a, const GgufReader& b) {
  ASSERT_EQ(a.kvs().size(), b.kvs().size());
  for (size_t i = 0; i < a.kvs().size(); ++i) {
    EXPECT_EQ(a.kvs()[i].key, b.kvs()[i].key);
    EXPECT_TRUE(a.kvs()[i].value == b.kvs()[i].value) << a.kvs()[i].key;
  }
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const TensorInfo& x = a.tensors()[i].info;
    const TensorInfo& y = b.tensors()[i].info;
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.dtype, y.dtype);
    EXPECT_EQ(x.shape, y.shape);
    ASSERT_EQ(x.bytes, y.bytes) << x.name;
    EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<size_t>(x.bytes)), 0) << x.name;
  }
}

TEST(GgufWriter, RoundTripsEverySharedFile) {
  ::ft::testing::TempDir tmp("gguf_rt");
  int n = 0;
  for (const char* sub : {"data", "fixtures/gguf", "fixtures/quant"}) {
    for (const auto& e : std::filesystem::recursive_directory_iterator(shared(sub))) {
      if (e.path().extension() != ".gguf") continue;
      SCOPED_TRACE(e.path().string());
      GgufReader a(e.path().string());
      GgufWriter w(a.files()[0].version());
      copy_into(a, w);
      std::string out = tmp.file("rt.gguf");
      w.write(out);
      GgufReader b(out);
      EXPECT_EQ(b.files()[0].version(), a.files()[0].version());
      EXPECT_EQ(b.files()[0].alignment(), a.files()[0].alignment());
      expect_same(a, b);
      EXPECT_EQ(a.metadata_json(), b.metadata_json());
      ++n;
    }
  }
  EXPECT_GE(n, 39);
}

TEST(GgufWriter, EveryValueType) {
  ::ft::testing::TempDir tmp("gguf_types");
  GgufWriter w(2);
  w.add("general.alignment", GgufValue::u32(64));
  w.add("u8", GgufValue::u8(250));
  w.add("i8", GgufValue::i8(-5));
  w.add("u16", GgufValue::u16(65000));
  w.add("i16", GgufValue::i16(-30000));
  w.add("u32", GgufValue::u32(4000000000u));
  w.add("i32", GgufValue::i32(-2000000000));
  w.add("u64", GgufValue::u64(18000000000000000000ull));
  w.add("i64", GgufValue::i64(-9000000000000000000ll));
  w.add("f32", GgufValue::f32(-1.5f));
  w.add("f32nan", GgufValue::f32(std::nanf("")));
  w.add("f64", GgufValue::f64(1e300));
  w.add("bool", GgufValue::boolean(true));
  w.add("str", GgufValue::string(std::string("h\0i\xff", 4)));
  const int16_t i16s[] = {-1, 2, -3};
  w.add("arr.i16", GgufValue::numeric_array(GgufType::I16, i16s, 3));
  const double f64s[] = {0.25, -0.5};
  w.add("arr.f64", GgufValue::numeric_array(GgufType::F64, f64s, 2));
  const uint8_t bools[] = {1, 0};
  w.add("arr.bool", GgufValue::numeric_array(GgufType::BOOL, bools, 2));
  w.add("arr.str", GgufValue::string_array({"a", "", "ccc"}));
  w.add("arr.empty", GgufValue::numeric_array(GgufType::U64, nullptr, 0));
  w.add("arr.nested", GgufValue::array_of_arrays({GgufValue::string_array({"x"}),
                                                  GgufValue::array_of_arrays({GgufValue::numeric_array(GgufType::I8, i16s, 2)})}));
  EXPECT_THROW(w.add("u8", GgufValue::u8(1)), Error);  // duplicate key
  std::vector<float> data(2 * 3 * 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i) * 0.5f;
  w.add_tensor("t3", DType::F32, {2, 3, 4}, data.data(), 96);
  std::vector<uint8_t> q(34 * 2, 7);
  w.add_tensor("q", DType::Q8_0, {2, 32}, q.data(), 68);
  EXPECT_THROW(w.add_tensor("bad", DType::Q8_0, {2, 33}, q.data(), 68), Error);
  EXPECT_THROW(w.add_tensor("bad", DType::F32, {3}, data.data(), 8), Error);
  EXPECT_THROW(w.add_tensor("bad", DType::BOOL, {3}, data.data(), 3), Error);  // no GGUF id

  std::string path = tmp.file("types.gguf");
  w.write(path);
  GgufReader r(path);
  const GgufFile& f = r.files()[0];
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  EXPECT_EQ(r.find("u8")->as_int(), 250);
  EXPECT_EQ(r.find("i8")->as_int(), -5);
  EXPECT_EQ(r.find("u16")->as_int(), 65000);
  EXPECT_EQ(r.find("i16")->as_int(), -30000);
  EXPECT_EQ(r.find("u32")->as_int(), 4000000000);
  EXPECT_EQ(r.find("i32")->as_int(), -2000000000);
  EXPECT_EQ(r.find("u64")->bits(), 18000000000000000000ull);
  EXPECT_THROW(r.find("u64")->as_int(), Error);
  EXPECT_EQ(r.find("i64")->as_int(), -9000000000000000000ll);
  EXPECT_EQ(r.find("f32")->as_double(), -1.5);
  EXPECT_TRUE(std::isnan(r.find("f32nan")->as_double()));
  EXPECT_EQ(r.find("f64")->as_double(), 1e300);
  EXPECT_TRUE(r.find("bool")->as_bool());
  EXPECT_EQ(r.find("str")->as_string(), std::string("h\0i\xff", 4));
  EXPECT_EQ(r.find("arr.i16")->int_at(2), -3);
  EXPECT_EQ(r.find("arr.f64")->double_at(1), -0.5);
  EXPECT_EQ(r.find("arr.bool")->to_json(), nlohmann::json::parse("[true, false]"));
  EXPECT_EQ(r.find("arr.str")->strings(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(r.find("arr.empty")->size(), 0u);
  EXPECT_EQ(r.find("arr.empty")->elem_type(), GgufType::U64);
  EXPECT_EQ(r.find("arr.nested")->to_json(), nlohmann::json::parse(R"([["x"], [[-1, -1]]])"));
  EXPECT_EQ(r.find("i64")->to_json(), -9000000000000000000ll);
  EXPECT_EQ(r.find("i8")->type(), GgufType::I8);
  EXPECT_EQ(r.find("arr.f64")->elem_type(), GgufType::F64);
  ASSERT_EQ(r.tensors().size(), 2u);
  EXPECT_EQ(r.tensors()[0].ne, (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(std::memcmp(r.tensors()[0].info.data, data.data(), 96), 0);
  EXPECT_EQ(r.tensors()[1].offset % 64, 0u);
  EXPECT_EQ(std::memcmp(r.tensors()[1].info.data, q.data(), 68), 0);

  // Writing the reader's values again gives the same bytes.
  GgufWriter w2(2);
  copy_into(r, w2);
  EXPECT_EQ(w2.serialize(), w.serialize());
}

// Three splits written by hand: a/b in split 1, c in split 2, d in split 3.
void write_splits(const ::ft::testing::TempDir& tmp, int count_in_split2, const std::string& dup_name) {
  std::vector<float> v(8, 1.0f);
  for (int i = 0; i < 3; ++i) {
    GgufWriter w;
    if (i == 0) w.add("general.architecture", GgufValue::string("llama"));
    w.add("split.no", GgufValue::u16(static_cast<uint16_t>(i)));
    w.add("split.count", GgufValue::u16(static_cast<uint16_t>(i == 1 ? count_in_split2 : 3)));
    w.add("split.tensors.count", GgufValue::i32(4));
    if (i == 0) {
      w.add_tensor("a", DType::F32, {8}, v.data(), 32);
      w.add_tensor("b", DType::F32, {2, 4}, v.data(), 32);
    } else {
      v.assign(8, static_cast<float>(i));
      w.add_tensor(i == 1 ? "c" : dup_name, DType::F32, {4, 2}, v.data(), 32);
    }
    w.write(tmp.file(fmt::format("m-{:05d}-of-00003.gguf", i + 1)));
  }
}

TEST(GgufSplits, MergeAllSplits) {
  ::ft::testing::TempDir tmp("gguf_split");
  write_splits(tmp, 3, "d");
  EXPECT_EQ(gguf_split_paths(tmp.file("m-00002-of-00003.gguf")),
            (std::vector<std::string>{tmp.file("m-00001-of-00003.gguf"), tmp.file("m-00002-of-00003.gguf"),
                                      tmp.file("m-00003-of-00003.gguf")}));
  EXPECT_EQ(gguf_split_paths("x-0001-of-00003.gguf"), std::vector<std::string>{"x-0001-of-00003.gguf"});
  for (const char* start : {"m-00001-of-00003.gguf", "m-00003-of-00003.gguf"}) {
    GgufReader r(tmp.file(start));
    ASSERT_EQ(r.files().size(), 3u);
    ASSERT_EQ(r.tensors().size(), 4u);
    EXPECT_EQ(r.tensors()[2].info.name, "c");
    EXPECT_EQ(r.tensors()[2].split, 1u);
    EXPECT_EQ(r.tensors()[3].info.name, "d");
    float d0;
    std::memcpy(&d0, r.tensors()[3].info.data, 4);
    EXPECT_EQ(d0, 2.0f);
    EXPECT_EQ(r.find("general.architecture")->as_string(), "llama");
  }
  auto ck = open_checkpoint(tmp.file("m-00001-of-00003.gguf"));
  EXPECT_EQ(ck->tensors().size(), 4u);
  EXPECT_EQ(ck->get("d").shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(ck->metadata()["split.count"], 3);
}

TEST(GgufSplits, Errors) {
  {
    ::ft::testing::TempDir tmp("gguf_split_count");
    write_splits(tmp, 2, "d");
    try {
      GgufReader r(tmp.file("m-00001-of-00003.gguf"));
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
      EXPECT_NE(std::string(e.what()).find("m-00002-of-00003.gguf: split.count is 2"), std::string::npos) << e.what();
    }
  }
  {
    ::ft::testing::TempDir tmp("gguf_split_dup");
    write_splits(tmp, 3, "a");
    try {
      GgufReader r(tmp.file("m-00001-of-00003.gguf"));
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor a also appears in an earlier split"), std::string::npos) << e.what();
    }
  }
  {
    ::ft::testing::TempDir tmp("gguf_split_missing");
    write_splits(tmp, 3, "d");
    std::filesystem::remove(tmp.file("m-00002-of-00003.gguf"));
    try {
      GgufReader r(tmp.file("m-00001-of-00003.gguf"));
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kNotFound);
      EXPECT_NE(std::string(e.what()).find("m-00002-of-00003.gguf"), std::string::npos) << e.what();
    }
  }
  {
    ::ft::testing::TempDir tmp("gguf_split_name");
    write_splits(tmp, 3, "d");
    std::filesystem::rename(tmp.file("m-00001-of-00003.gguf"), tmp.file("renamed.gguf"));
    EXPECT_THROW(GgufReader r(tmp.file("renamed.gguf")), Error);  // split.count 3 without a split name
  }
}

}  // namespace
}  // namespace ft
