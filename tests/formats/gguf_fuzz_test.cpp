// Robustness: every truncation of a valid GGUF's header (each byte offset through the end of the
// tensor-info section) and many random header mutations either load or throw ft::Error — never crash,
// hang or read out of bounds. Each variant is parsed from an exact-size heap buffer, so under
// ASan (make test-asan, FT_FUZZ_VARIANTS=10000) any read past the end is caught.
// Variant count: $FT_FUZZ_VARIANTS (default 2000); all truncations always run, random mutations fill
// the rest (at least a quarter of the count).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>

#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

struct Base {
  std::string name;
  std::vector<uint8_t> bytes;
  size_t header_end = 0;
};

// A small file with every metadata value type, nested arrays and tensors of several block types.
Base written_base() {
  GgufWriter w;
  w.add("general.architecture", GgufValue::string("fuzz"));
  w.add("general.alignment", GgufValue::u32(16));
  w.add("u8", GgufValue::u8(1));
  w.add("i8", GgufValue::i8(-1));
  w.add("u16", GgufValue::u16(2));
  w.add("i16", GgufValue::i16(-2));
  w.add("i32", GgufValue::i32(-3));
  w.add("u64", GgufValue::u64(4));
  w.add("i64", GgufValue::i64(-4));
  w.add("f32", GgufValue::f32(0.5f));
  w.add("f64", GgufValue::f64(0.25));
  w.add("b", GgufValue::boolean(true));
  const uint8_t bools[] = {0, 1, 1};
  w.add("ab", GgufValue::numeric_array(GgufType::BOOL, bools, 3));
  const float fs[] = {1, 2, 3, 4};
  w.add("af", GgufValue::numeric_array(GgufType::F32, fs, 4));
  w.add("as", GgufValue::string_array({"alpha", "be", ""}));
  w.add("aa", GgufValue::array_of_arrays({GgufValue::string_array({"x", "y"}),
                                          GgufValue::numeric_array(GgufType::F32, fs, 2)}));
  std::vector<uint8_t> data(4096, 0x3c);
  w.add_tensor("f32", DType::F32, {2, 8}, data.data(), 64);
  w.add_tensor("f16", DType::F16, {3, 4, 4}, data.data(), 96);
  w.add_tensor("q8", DType::Q8_0, {1, 64}, data.data(), 68);
  w.add_tensor("q4k", DType::Q4_K, {256}, data.data(), 144);
  std::string s = w.serialize();
  Base b{"written", std::vector<uint8_t>(s.begin(), s.end()), 0};
  b.header_end = GgufFile("written.gguf", b.bytes).header_end();
  return b;
}

Base quant_base() {
  std::string s = ::ft::testing::read_file(::ft::testing::shared_dir() + "/fixtures/quant/quant_types.gguf");
  Base b{"quant_types", std::vector<uint8_t>(s.begin(), s.end()), 0};
  b.header_end = GgufFile("quant_types.gguf", b.bytes).header_end();
  return b;
}

struct Tally {
  int loaded = 0, rejected = 0;
};

// Parses one variant. Loads: touch every tensor byte (ASan checks the bounds). ft::Error: the message must
// name the file. Any other exception escapes and fails the test.
bool try_variant(const std::vector<uint8_t>& bytes, Tally& tally) {
  try {
    GgufFile f("variant.gguf", bytes);  // its own exact-size copy
    EXPECT_EQ(f.file_size(), bytes.size());
    unsigned sum = 0;
    for (const auto& t : f.tensors()) {
      if (t.info.bytes == 0) continue;  // empty tensors have no data pointer
      for (int64_t i = 0; i < t.info.bytes; ++i) sum += t.info.data[i];
      EXPECT_GE(t.info.data, f.file_data());
      EXPECT_LE(t.info.data + t.info.bytes, f.file_data() + f.file_size());
    }
    for (const auto& kv : f.kvs()) (void)kv.value.to_json();
    volatile unsigned sink = sum;  // keep the reads
    (void)sink;
    ++tally.loaded;
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("variant.gguf: ", 0), 0u) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    ++tally.rejected;
    return false;
  }
}

int variants_from_env() {
  const char* env = std::getenv("FT_FUZZ_VARIANTS");
  int n = env && *env ? std::atoi(env) : 2000;
  return n > 0 ? n : 2000;
}

TEST(GgufFuzz, TruncationsAndMutations) {
  const int total = variants_from_env();
  std::vector<Base> bases = {quant_base(), written_base()};
  int done = 0;

  // 1. Truncate at every offset of the header, through the end of the tensor infos: all must be rejected
  //    (every tensor has data, so even the cut at header_end leaves tensors past the end).
  for (const Base& b : bases) {
    Tally t;
    for (size_t cut = 0; cut <= b.header_end; ++cut) {
      std::vector<uint8_t> v(b.bytes.begin(), b.bytes.begin() + static_cast<ptrdiff_t>(cut));
      EXPECT_FALSE(try_variant(v, t)) << b.name << " cut at " << cut;
      ++done;
    }
    EXPECT_EQ(t.rejected, static_cast<int>(b.header_end) + 1) << b.name;
  }

  // 2. Random mutations of header bytes (fixed seed: reproducible).
  const int mutations = std::max(total - done, total / 4);
  std::mt19937_64 rng(20240601);
  const uint64_t interesting[] = {0, 1, 2, 3, 4, 9, 13, 31, 32, 255, 0x7fffffff, 0x80000000, 0xffffffff,
                                  uint64_t{1} << 32, uint64_t{1} << 62, uint64_t{1} << 63, ~uint64_t{0}};
  Tally tally;
  for (int i = 0; i < mutations; ++i) {
    const Base& b = bases[rng() % bases.size()];
    std::vector<uint8_t> v = b.bytes;
    switch (rng() % 3) {
      case 0: {  // flip bits in 1-4 bytes
        int n = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < n; ++k) v[rng() % b.header_end] ^= static_cast<uint8_t>(1 + rng() % 255);
        break;
      }
      case 1: {  // overwrite a 4- or 8-byte field with an edge value
        size_t width = rng() % 2 ? 4 : 8;
        size_t at = rng() % (b.header_end - width);
        uint64_t val = interesting[rng() % std::size(interesting)];
        std::memcpy(v.data() + at, &val, width);
        break;
      }
      default: {  // random byte values
        int n = 1 + static_cast<int>(rng() % 8);
        for (int k = 0; k < n; ++k) v[rng() % b.header_end] = static_cast<uint8_t>(rng());
        break;
      }
    }
    if (rng() % 4 == 0) v.resize(rng() % v.size());  // sometimes truncate too
    try_variant(v, tally);
  }
  done += mutations;
  std::printf("[ fuzz     ] %d variants: %d truncations rejected; mutations: %d loaded, %d rejected\n", done,
              done - mutations, tally.loaded, tally.rejected);
  EXPECT_GE(done, total);
  EXPECT_GT(tally.loaded, 0);    // mutations inside string bytes still load
  EXPECT_GT(tally.rejected, 0);
}

}  // namespace
}  // namespace ft
