// EC12 coding of BF16 matrices: the element order inside a group, analyze's table, the byte layout
// of a hand-made matrix, exact round trips on every SIMD level (whole matrices and row ranges, with
// specials and exceptions), and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/simd.h"
#include "moe/ec12.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::testing {
namespace {

using ec12::MatrixGeometry;
using ec12::MatrixStats;
using ec12::Simd;

constexpr Simd kAllSimd[] = {Simd::kAuto, Simd::kScalar, Simd::kAvx2, Simd::kAvx512};

const char* name(Simd s) { return ec12::simd_name(s); }

uint32_t u32_at(const std::vector<uint8_t>& b, int64_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

/** Codes `v` [rows, cols] with analyze's table and room for exactly its exceptions plus `extra`. */
std::vector<uint8_t> encode_matrix(const std::vector<uint16_t>& v, int64_t rows, int64_t cols, MatrixStats* stats_out = nullptr,
                                   int64_t extra = 0) {
  const MatrixStats stats = ec12::analyze(v.data(), rows * cols);
  const MatrixGeometry g{rows, cols, stats.exceptions + extra};
  std::vector<uint8_t> out(static_cast<size_t>(g.bytes()), 0xee);  // encode must overwrite every byte
  ec12::encode(v.data(), g, stats, out.data());
  if (stats_out) *stats_out = stats;
  return out;
}

/** Decodes rows [r0, r0 + nr) with every available Simd; checks the exact bits and that nothing
 *  past the nr rows is written. */
void expect_rows(const std::vector<uint8_t>& m, const std::vector<uint16_t>& v, int64_t rows, int64_t cols, int64_t r0,
                 int64_t nr) {
  for (Simd s : kAllSimd) {
    if (!ec12::simd_available(s)) continue;
    const uint16_t guard = 0xabcd;
    std::vector<uint16_t> dst(static_cast<size_t>(nr * cols + 64), guard);
    ec12::decode_rows(m.data(), rows, cols, r0, nr, dst.data(), s);
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < nr * cols; ++i)
      if (dst[i] != v[r0 * cols + i]) {
        if (first < 0) first = i;
        ++bad;
      }
    EXPECT_EQ(bad, 0) << name(s) << " rows [" << r0 << ", " << r0 + nr << ") of " << rows << " x " << cols
                      << ", first wrong element " << first;
    for (int64_t i = nr * cols; i < nr * cols + 64; ++i) ASSERT_EQ(dst[i], guard) << name(s) << " wrote past the rows";
  }
}

void expect_round_trip(const std::vector<uint16_t>& v, int64_t rows, int64_t cols) {
  const std::vector<uint8_t> m = encode_matrix(v, rows, cols);
  expect_rows(m, v, rows, cols, 0, rows);
  if (rows >= 3) expect_rows(m, v, rows, cols, 1, rows - 2);
  expect_rows(m, v, rows, cols, rows - 1, 1);
  expect_rows(m, v, rows, cols, 0, 1);
  expect_rows(m, v, rows, cols, rows / 2, 0);
}

std::vector<uint16_t> random_bf16(int64_t n, uint32_t seed, float sigma = 0.02f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(dist(rng));
  return v;
}

template <typename F>
ErrorCode error_code_of(F&& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no ft::Error thrown";
  return ErrorCode::kInternal;
}

TEST(Ec12, PositionIsAPermutation) {
  std::vector<int> seen(ec12::kGroup, 0);
  for (int n = 0; n < ec12::kGroup; ++n) {
    const int p = ec12::position(n);
    ASSERT_GE(p, 0);
    ASSERT_LT(p, ec12::kGroup);
    ++seen[static_cast<size_t>(p)];
  }
  for (int p = 0; p < ec12::kGroup; ++p) EXPECT_EQ(seen[static_cast<size_t>(p)], 1) << "position " << p;
  // Per 16-byte lane L: elements 8L..8L+7 then 32+8L..32+8L+7.
  EXPECT_EQ(ec12::position(0), 0);
  EXPECT_EQ(ec12::position(7), 7);
  EXPECT_EQ(ec12::position(8), 16);
  EXPECT_EQ(ec12::position(31), 55);
  EXPECT_EQ(ec12::position(32), 8);
  EXPECT_EQ(ec12::position(63), 63);
}

TEST(Ec12, Geometry) {
  EXPECT_TRUE(ec12::supports(64));
  EXPECT_TRUE(ec12::supports(2048));
  EXPECT_FALSE(ec12::supports(0));
  EXPECT_FALSE(ec12::supports(96));
  EXPECT_FALSE(ec12::supports(-64));
  const MatrixGeometry g{3, 128, 4};
  EXPECT_EQ(g.row_bytes(), 2 * 96);
  EXPECT_EQ(g.row_index_offset(), 64 + 3 * 192);                 // 640
  EXPECT_EQ(g.exceptions_offset(), (640 + 16 + 15) / 16 * 16);  // 656
  EXPECT_EQ(g.bytes(), 656 + 32);
  for (int64_t rows : {1, 2, 3, 5, 16, 768})
    for (int64_t cols : {64, 192, 2048})
      for (int64_t cap : {0, 1, 2, 3, 10, 1001}) {
        const MatrixGeometry h{rows, cols, cap};
        EXPECT_EQ(h.exceptions_offset() % 16, 0);
        EXPECT_GE(h.exceptions_offset(), h.row_index_offset() + 4 * (rows + 1));
        EXPECT_LT(h.exceptions_offset(), h.row_index_offset() + 4 * (rows + 1) + 16);
        EXPECT_EQ(h.bytes() % 16, 0) << rows << " x " << cols << " capacity " << cap;
        EXPECT_GE(h.bytes(), h.exceptions_offset() + 8 * cap);  // rounded up to 16
        EXPECT_LT(h.bytes(), h.exceptions_offset() + 8 * cap + 16);
      }
}

TEST(Ec12, AnalyzePicksTheMostCommonHighBytes) {
  // 0x50 x7, 0x20 x7 (tie: 0x20 first), 0x90 x5, then 0x00..0x10 once each (ties: smaller first).
  std::vector<uint16_t> v;
  for (int i = 0; i < 7; ++i) v.push_back(static_cast<uint16_t>(0x5000 | i));
  for (int i = 0; i < 7; ++i) v.push_back(static_cast<uint16_t>(0x2000 | (100 + i)));
  for (int i = 0; i < 5; ++i) v.push_back(static_cast<uint16_t>(0x9000 | i));
  for (int b = 0x10; b >= 0x00; --b) v.push_back(static_cast<uint16_t>(b << 8 | 0x33));
  std::shuffle(v.begin(), v.end(), std::mt19937(7));
  const MatrixStats s = ec12::analyze(v.data(), static_cast<int64_t>(v.size()));
  const uint8_t want[16] = {0x20, 0x50, 0x90, 0x00, 0x01, 0x02, 0x03, 0x04,
                            0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(s.table[c], want[c]) << "code " << c;
  EXPECT_EQ(s.exceptions, 4);  // 0x0d, 0x0e, 0x0f, 0x10

  // Fewer than 16 distinct: unused entries 0, no exceptions.
  const uint16_t few[] = {0xbf80, 0x3f80, 0x3f00, 0x3f11};
  const MatrixStats f = ec12::analyze(few, 4);
  EXPECT_EQ(f.table[0], 0x3f);
  EXPECT_EQ(f.table[1], 0xbf);
  for (int c = 2; c < 16; ++c) EXPECT_EQ(f.table[c], 0);
  EXPECT_EQ(f.exceptions, 0);

  const MatrixStats none = ec12::analyze(few, 0);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(none.table[c], 0);
  EXPECT_EQ(none.exceptions, 0);
}

TEST(Ec12, ByteLayoutOfAHandMadeRow) {
  // [1, 64]: element n has low byte 0x80 | n. High bytes: element 0 0x01, 1..47 0x3c, 48..63
  // 0x40..0x4f. Table: 0x3c (47), then the count-1 bytes in order 0x01, 0x40..0x4d; 0x4e and 0x4f
  // (elements 62, 63) are exceptions.
  std::vector<uint16_t> v(64);
  for (int n = 0; n < 64; ++n) {
    const int high = n == 0 ? 0x01 : n < 48 ? 0x3c : 0x40 + (n - 48);
    v[static_cast<size_t>(n)] = static_cast<uint16_t>(high << 8 | 0x80 | n);
  }
  MatrixStats stats;
  const std::vector<uint8_t> m = encode_matrix(v, 1, 64, &stats, /*extra=*/2);
  const MatrixGeometry g{1, 64, 4};
  ASSERT_EQ(static_cast<int64_t>(m.size()), g.bytes());
  EXPECT_EQ(stats.exceptions, 2);

  const uint8_t table[16] = {0x3c, 0x01, 0x40, 0x41, 0x42, 0x43, 0x44, 0x45,
                             0x46, 0x47, 0x48, 0x49, 0x4a, 0x4b, 0x4c, 0x4d};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(m[static_cast<size_t>(c)], table[c]) << "table " << c;
  EXPECT_EQ(u32_at(m, 16), 2u);
  for (int i = 20; i < 64; ++i) EXPECT_EQ(m[static_cast<size_t>(i)], 0) << "header byte " << i;

  // Code bytes at 64..95: byte k holds position k (low nibble) and position k + 32 (high nibble).
  const uint8_t* codes = m.data() + 64;
  EXPECT_EQ(codes[0], 0x01);   // position 0 = element 0 (code 1); position 32 = element 16 (code 0)
  EXPECT_EQ(codes[8], 0x20);   // position 8 = element 32 (0); position 40 = element 48 (0x40: code 2)
  EXPECT_EQ(codes[10], 0x40);  // position 42 = element 50 (0x42: code 4)
  EXPECT_EQ(codes[15], 0x90);  // position 47 = element 55 (0x47: code 9)
  EXPECT_EQ(codes[29], 0xf0);  // position 61 = element 61 (0x4d: code 15)
  EXPECT_EQ(codes[30], 0x00);  // position 62 = element 62, an exception: code 0
  EXPECT_EQ(codes[31], 0x00);  // position 63 = element 63, an exception
  // Low bytes at 96..159, element n at position(n).
  const uint8_t* low = m.data() + 96;
  for (int n : {0, 7, 8, 10, 31, 32, 33, 50, 62, 63})
    EXPECT_EQ(low[ec12::position(n)], 0x80 | n) << "element " << n;
  EXPECT_EQ(low[18], 0x80 | 10);  // position 18 = element 10
  EXPECT_EQ(low[9], 0x80 | 33);   // position 9 = element 33

  // Row index at 64 + 96 = 160, exceptions at 176 (16-aligned), two pairs then zeroed room.
  EXPECT_EQ(g.row_index_offset(), 160);
  EXPECT_EQ(g.exceptions_offset(), 176);
  EXPECT_EQ(u32_at(m, 160), 0u);
  EXPECT_EQ(u32_at(m, 164), 2u);
  for (int i = 168; i < 176; ++i) EXPECT_EQ(m[static_cast<size_t>(i)], 0) << "pad byte " << i;
  EXPECT_EQ(u32_at(m, 176), 62u);
  EXPECT_EQ(u32_at(m, 180), 0x4ebeu);
  EXPECT_EQ(u32_at(m, 184), 63u);
  EXPECT_EQ(u32_at(m, 188), 0x4fbfu);
  for (int i = 192; i < 208; ++i) EXPECT_EQ(m[static_cast<size_t>(i)], 0) << "unused exception byte " << i;

  expect_rows(m, v, 1, 64, 0, 1);
}

TEST(Ec12, RoundTripRandomWithSpecials) {
  const uint16_t specials[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x0001, 0x8001, 0x007f,
                               0x0080, 0x7f7f, 0xff7f, 0x4000, 0xc2c8, 0x0100, 0x1234};
  struct Shape {
    int64_t rows, cols;
  };
  uint32_t seed = 1;
  for (const Shape sh : {Shape{5, 64}, Shape{7, 192}, Shape{16, 2048}, Shape{3, 768}}) {
    std::vector<uint16_t> v = random_bf16(sh.rows * sh.cols, seed++);
    std::mt19937 rng(seed * 977);
    // Row 0: every special, several in one group; the last row: several at its end; other rows
    // get a few at random places, except row 1, which keeps only normal(0, 0.02) values.
    for (size_t i = 0; i < std::size(specials); ++i) v[i % static_cast<size_t>(sh.cols)] = specials[i];
    for (int64_t k = 1; k <= 5; ++k) v[static_cast<size_t>(sh.rows * sh.cols - k)] = specials[static_cast<size_t>(k) * 3 % 16];
    for (int64_t r = 2; r + 1 < sh.rows; ++r)
      for (int k = 0; k < 3; ++k)
        v[static_cast<size_t>(r * sh.cols + static_cast<int64_t>(rng() % static_cast<uint32_t>(sh.cols)))] =
            specials[rng() % 16];
    MatrixStats stats;
    encode_matrix(v, sh.rows, sh.cols, &stats);
    EXPECT_GT(stats.exceptions, 0) << sh.rows << " x " << sh.cols;
    expect_round_trip(v, sh.rows, sh.cols);
  }
}

TEST(Ec12, RoundTripWithWideSpread) {
  // 64 distinct high bytes spread evenly: three quarters of the values are exceptions.
  const int64_t rows = 8, cols = 128;
  std::vector<uint16_t> v(static_cast<size_t>(rows * cols));
  std::mt19937 rng(3);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<uint16_t>(((i * 4) % 256) << 8 | (rng() & 0xff));
  MatrixStats stats;
  encode_matrix(v, rows, cols, &stats);
  EXPECT_EQ(stats.exceptions, rows * cols * 3 / 4);
  expect_round_trip(v, rows, cols);

  // Values of wide magnitudes (sigma 1000 gives exponents far apart): many natural exceptions.
  const std::vector<uint16_t> w = random_bf16(6 * 256, 11, 1000.0f);
  expect_round_trip(w, 6, 256);
}

TEST(Ec12, RoundTripFewDistinctHighBytes) {
  for (uint16_t value : {uint16_t{0x0000}, uint16_t{0x0042}, uint16_t{0x3f80}, uint16_t{0xbc01}}) {
    const std::vector<uint16_t> v(4 * 192, value);
    MatrixStats stats;
    const std::vector<uint8_t> m = encode_matrix(v, 4, 192, &stats);
    EXPECT_EQ(stats.table[0], value >> 8);
    EXPECT_EQ(stats.exceptions, 0);
    expect_round_trip(v, 4, 192);
  }
  // High byte 0x00 as a used entry that is not the first one, next to unused (0) entries.
  std::vector<uint16_t> v(2 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 3 == 0 ? static_cast<uint16_t>(0x0000 | (i & 0xff)) : 0x3c12;
  MatrixStats stats;
  encode_matrix(v, 2, 64, &stats);
  EXPECT_EQ(stats.table[0], 0x3c);
  EXPECT_EQ(stats.table[1], 0x00);
  EXPECT_EQ(stats.exceptions, 0);
  expect_round_trip(v, 2, 64);
}

// dot_rows equals the BF16 dot of the decoded rows (to_f32 + dot_rows, which the fused BF16 kernel
// equals), bit for bit, at every SIMD level, for 1..4 rows at any start,
// with exceptions in the first, a middle and the last group of rows (and several in one group).
TEST(Ec12, DotRowsEqualsTheBf16DotOfTheDecodedRows) {
  for (int64_t cols : {64, 768, 2048}) {
    const int64_t rows = 9;
    std::vector<uint16_t> v = random_bf16(rows * cols, static_cast<uint32_t>(cols));
    const uint16_t tiny[] = {0x0d80, 0x8c01, 0x0000, 0x7f80, 0x0b7f};  // outside any table of 16
    for (int64_t r : {0, 3, 8})
      for (int64_t c : {int64_t{0}, cols / 2, cols / 2 + 1, cols - 1}) v[r * cols + c] = tiny[(r + c) % 5];
    v[5 * cols + 7] = 0x4f00;  // a large value, an exception too
    const std::vector<uint8_t> m = encode_matrix(v, rows, cols);
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> d(-1, 1);
    std::vector<float> x(static_cast<size_t>(cols));
    for (float& f : x) f = d(rng);
    for (int nr = 1; nr <= 4; ++nr)
      for (int64_t r0 : {int64_t{0}, int64_t{1}, rows - nr}) {
        float want[4], got[4];
        std::vector<float> w(static_cast<size_t>(nr * cols));  // the BF16 path: widened, dotted
        cpu::to_f32(DType::BF16, v.data() + r0 * cols, w.data(), nr * cols);
        cpu::dot_rows(x.data(), w.data(), cols, nr, cols, want);
        ec12::dot_rows(x.data(), m.data(), rows, cols, r0, nr, got);
        for (int r = 0; r < nr; ++r)
          EXPECT_EQ(std::memcmp(&got[r], &want[r], 4), 0) << cols << " cols, rows " << r0 << "+" << r << ": " << got[r]
                                                          << " vs " << want[r];
      }
    float y[4];
    EXPECT_EQ(error_code_of([&] { ec12::dot_rows(x.data(), m.data(), rows, cols, 7, 4, y); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(error_code_of([&] { ec12::dot_rows(x.data(), m.data(), rows, cols, 0, 5, y); }),
              ErrorCode::kInvalidArgument);
  }
}

TEST(Ec12, EncodeErrors) {
  const std::vector<uint16_t> v(2 * 128, 0x3f80);
  const MatrixStats stats = ec12::analyze(v.data(), 256);
  std::vector<uint8_t> out(4096);
  std::string what;
  EXPECT_EQ(error_code_of([&] { ec12::encode(v.data(), MatrixGeometry{2, 100, 0}, stats, out.data()); }, &what),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(what.find("100"), std::string::npos) << what;

  // Two exceptions (high bytes 0x01, 0x02 beyond a full table), room for one.
  std::vector<uint16_t> w(128);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<uint16_t>((0x30 + i % 16) << 8);
  w[5] = 0x0100;
  w[77] = 0x0200;
  const MatrixStats ws = ec12::analyze(w.data(), 128);
  ASSERT_EQ(ws.exceptions, 2);
  EXPECT_EQ(error_code_of([&] { ec12::encode(w.data(), MatrixGeometry{1, 128, 1}, ws, out.data()); }, &what),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(what.find("2 exceptions"), std::string::npos) << what;
  EXPECT_NE(what.find("1"), std::string::npos) << what;

  // Stats that do not match the values.
  MatrixStats wrong = ws;
  wrong.exceptions = 0;
  EXPECT_EQ(error_code_of([&] { ec12::encode(w.data(), MatrixGeometry{1, 128, 4}, wrong, out.data()); }, &what),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(what.find("2"), std::string::npos) << what;
}

TEST(Ec12, DecodeErrors) {
  const std::vector<uint16_t> v = random_bf16(4 * 64, 9);
  const std::vector<uint8_t> m = encode_matrix(v, 4, 64);
  std::vector<uint16_t> dst(8 * 64);
  std::string what;
  EXPECT_EQ(error_code_of([&] { ec12::decode_rows(m.data(), 4, 64, 3, 2, dst.data()); }, &what),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(what.find("[3, 5)"), std::string::npos) << what;
  EXPECT_NE(what.find("4 rows"), std::string::npos) << what;
  EXPECT_EQ(error_code_of([&] { ec12::decode_rows(m.data(), 4, 64, -1, 1, dst.data()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { ec12::decode_rows(m.data(), 4, 64, 0, -1, dst.data()); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(error_code_of([&] { ec12::decode_rows(m.data(), 4, 65, 0, 1, dst.data()); }, &what),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(what.find("65"), std::string::npos) << what;
  for (Simd s : kAllSimd) {
    if (ec12::simd_available(s)) continue;
    EXPECT_EQ(error_code_of([&] { ec12::decode_rows(m.data(), 4, 64, 0, 1, dst.data(), s); }), ErrorCode::kUnsupported);
  }
  EXPECT_TRUE(ec12::simd_available(Simd::kAuto));
  EXPECT_TRUE(ec12::simd_available(Simd::kScalar));
}

}  // namespace
}  // namespace ft::testing
