// matmul: y = x W^T (+ bias) for every weight dtype the quantizers write, against a double reference.
#include <cstddef>
#include <cstring>
#include <random>

#include "backend/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "op_harness.h"

namespace ft::testing {
namespace {

class MatmulTest : public OpTest {};

std::vector<double> ref_matmul(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                               int64_t T, int64_t N, int64_t K) {
  std::vector<double> y(static_cast<size_t>(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      double s = bias ? (*bias)[static_cast<size_t>(n)] : 0.0;
      for (int64_t k = 0; k < K; ++k) s += static_cast<double>(x[t * K + k]) * w[n * K + k];
      y[t * N + n] = s;
    }
  return y;
}

TEST_P(MatmulTest, EveryWeightTypeAndShape) {
  // cuda_refuses: the CUDA GEMV (T <= 16) reads F32 weights in chunks of 4, so it refuses K = 13
  // (gemv.cu) with kUnsupported; the CPU backend takes any K.
  struct Case { DType dtype; int64_t T, N, K; bool bias; bool cuda_refuses = false; };
  const Case cases[] = {
      {DType::F32, 1, 7, 13, false, true}, {DType::F32, 70, 33, 64, true}, {DType::F16, 5, 17, 96, true},
      {DType::BF16, 3, 40, 64, false}, {DType::BF16, 130, 65, 48, true}, {DType::Q8_0, 1, 19, 64, false},
      {DType::Q8_0, 37, 64, 96, true}, {DType::Q4_0, 9, 31, 128, false}, {DType::Q4_K, 4, 18, 512, false},
      {DType::Q4_K, 66, 20, 256, true}, {DType::F32, 2, 7, 12, true},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " T=" + std::to_string(c.T) + " N=" + std::to_string(c.N) +
                 " K=" + std::to_string(c.K));
    HostWeight w = make_weight(c.dtype, {c.N, c.K}, seed++);
    std::vector<float> x = random_vec(static_cast<size_t>(c.T * c.K), seed++);
    std::vector<float> b = random_vec(static_cast<size_t>(c.N), seed++);
    Tensor y = arena().alloc(ops().activation_dtype(), {c.T, c.N});
    const auto run = [&] {
      ops().matmul(arena().act(x, {c.T, c.K}), arena().weight(w), y, c.bias ? arena().f32(b, {c.N}) : Tensor());
    };
    if (c.cuda_refuses && GetParam() == "cuda") {
      try {
        run();
        ADD_FAILURE() << "expected ft::Error(kUnsupported)";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
        EXPECT_NE(std::string(e.what()).find("K = " + std::to_string(c.K)), std::string::npos) << e.what();
      }
      continue;
    }
    run();
    EXPECT_LT(rel_l2(arena().read(y), ref_matmul(x, w.values, c.bias ? &b : nullptr, c.T, c.N, c.K)), tol());
  }
}

TEST_P(MatmulTest, RowResultsDoNotDependOnBatch) {
  // Each row of a batched matmul equals the same row computed alone, bit for bit on CPU (a lone
  // token takes the CPU backend's fused decode+dot path, a batch the decoded tile). On CUDA a lone
  // token of a Q8_0/Q4_K weight takes the integer-dot GEMV (activations quantized to int8 per 32)
  // and a batch of 100 decodes W to bf16 for cuBLAS, so the two agree within that rounding (the
  // backend's tolerance, relative L2 over the row), not bit for bit.
  constexpr int64_t K = 256;
  for (DType dt : {DType::BF16, DType::Q8_0, DType::Q4_K}) {
    SCOPED_TRACE(dtype_name(dt));
    HostWeight w = make_weight(dt, {48, K}, 7);
    std::vector<float> x = random_vec(100 * K, 8);
    Tensor wt = arena().weight(w);
    Tensor y_all = arena().alloc(ops().activation_dtype(), {100, 48});
    ops().matmul(arena().act(x, {100, K}), wt, y_all, Tensor());
    std::vector<float> all = arena().read(y_all);
    for (int64_t t : {0, 37, 99}) {
      std::vector<float> row(x.begin() + t * K, x.begin() + (t + 1) * K);
      Tensor y1 = arena().alloc(ops().activation_dtype(), {1, 48});
      ops().matmul(arena().act(row, {1, K}), wt, y1, Tensor());
      std::vector<float> one = arena().read(y1);
      if (GetParam() == "cpu") {
        for (int64_t n = 0; n < 48; ++n) EXPECT_EQ(one[static_cast<size_t>(n)], all[static_cast<size_t>(t * 48 + n)]);
      } else {
        const std::vector<double> batched(all.begin() + t * 48, all.begin() + (t + 1) * 48);
        EXPECT_LT(rel_l2(one, batched), tol()) << "row " << t;
      }
    }
  }
}

// The SIMD decoders of the hot weight types (cpu::to_f32) give exactly the floats of quant/'s
// scalar dequantizers, on every SIMD level (simd_levels_test re-runs this suite capped).
TEST_P(MatmulTest, RowDecodersMatchTheScalarDequantizers) {
  for (DType dt : {DType::Q4_K, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t n = 4096 + 256;  // 17 Q4_K / 136 Q8_0 blocks
    const HostWeight w = make_weight(dt, {n}, 21);  // its values come from quant::dequantize_row
    std::vector<float> got(static_cast<size_t>(n), -1.0f);
    cpu::to_f32(dt, w.bytes.data(), got.data(), n);
    EXPECT_EQ(std::memcmp(got.data(), w.values.data(), got.size() * 4), 0) << cpu::simd_level();
    EXPECT_THROW(cpu::to_f32(dt, w.bytes.data(), got.data(), n - 1), Error);  // not whole blocks
  }
  // Q6_K (no quantizer: random blocks with a small finite d), decoded and dotted.
  {
    const int64_t n6 = 4 * 256;
    std::vector<uint8_t> q6(static_cast<size_t>(dtype_bytes(DType::Q6_K, n6)));
    std::mt19937 r6(25);
    for (uint8_t& byte : q6) byte = static_cast<uint8_t>(r6());
    for (int64_t b = 0; b < n6 / 256; ++b) {
      const uint16_t d = f32_to_f16(0.01f * static_cast<float>(b + 1));
      std::memcpy(q6.data() + b * sizeof(quant::BlockQ6_K) + offsetof(quant::BlockQ6_K, d), &d, 2);
    }
    std::vector<float> want6(static_cast<size_t>(n6)), got6(static_cast<size_t>(n6), -1.0f);
    dequantize_row(DType::Q6_K, q6.data(), want6.data(), n6);
    cpu::to_f32(DType::Q6_K, q6.data(), got6.data(), n6);
    EXPECT_EQ(std::memcmp(got6.data(), want6.data(), got6.size() * 4), 0) << "Q6_K, " << cpu::simd_level();
    if (cpu::has_fused_dot(DType::Q6_K)) {
      const std::vector<float> x6 = random_vec(static_cast<size_t>(n6), 26);
      const int64_t rb6 = dtype_bytes(DType::Q6_K, 256);
      for (int rows = 1; rows <= 4; ++rows) {
        float want[4], got[4];
        cpu::dot_rows(x6.data(), want6.data(), 256, rows, 256, want);
        cpu::dot_rows_stored(DType::Q6_K, x6.data(), q6.data(), rb6, rows, 256, got);
        EXPECT_EQ(std::memcmp(got, want, static_cast<size_t>(rows) * 4), 0) << "Q6_K fused, " << rows << " rows";
      }
    }
  }
  // Q4_K with every bit of its 12 packed scale bytes random (the quantizer's scales need not set
  // the top bits the vector unpack takes apart).
  const int64_t n = 8 * 256;
  HostWeight w = make_weight(DType::Q4_K, {n}, 22);
  std::mt19937 rng(23);
  for (int64_t b = 0; b < n / 256; ++b)
    for (int i = 0; i < 12; ++i)
      w.bytes[static_cast<size_t>(b * sizeof(quant::BlockQ4_K) + offsetof(quant::BlockQ4_K, scales) + i)] =
          static_cast<uint8_t>(rng());
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  dequantize_row(DType::Q4_K, w.bytes.data(), want.data(), n);
  cpu::to_f32(DType::Q4_K, w.bytes.data(), got.data(), n);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << "random Q4_K scales, " << cpu::simd_level();
  if (cpu::has_fused_dot(DType::Q4_K)) {
    const std::vector<float> x = random_vec(static_cast<size_t>(n), 24);
    float y_want, y_got;
    cpu::dot_rows(x.data(), want.data(), n, 1, n, &y_want);
    cpu::dot_rows_stored(DType::Q4_K, x.data(), w.bytes.data(), static_cast<int64_t>(w.bytes.size()), 1, n, &y_got);
    EXPECT_EQ(std::memcmp(&y_got, &y_want, 4), 0) << "random Q4_K scales, fused dot";
  }
}

// The fused decode + dot of stored rows equals decoding them (to_f32) and dot_rows, bit for bit,
// for 1-4 rows, row lengths with and without a SIMD tail; it refuses where it has no kernel.
TEST_P(MatmulTest, FusedStoredRowDotsMatchDecodeThenDot) {
  for (DType dt : {DType::BF16, DType::Q4_K, DType::Q8_0}) {
    for (int64_t n : {int64_t{768}, int64_t{2048}, int64_t{100}, int64_t{96}}) {
      if (n % dtype_info(dt).block_size != 0) continue;
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      const HostWeight w = make_weight(dt, {4, n}, 31);
      const std::vector<float> x = random_vec(static_cast<size_t>(n), 32);
      const int64_t rb = dtype_bytes(dt, n);
      if (!cpu::has_fused_dot(dt)) {
        float y[4];
        EXPECT_THROW(cpu::dot_rows_stored(dt, x.data(), w.bytes.data(), rb, 1, n, y), Error) << cpu::simd_level();
        continue;
      }
      for (int rows = 1; rows <= 4; ++rows) {
        float want[4], got[4];
        cpu::dot_rows(x.data(), w.values.data(), n, rows, n, want);  // w.values: quant::dequantize_row's floats
        cpu::dot_rows_stored(dt, x.data(), w.bytes.data(), rb, rows, n, got);
        EXPECT_EQ(std::memcmp(got, want, static_cast<size_t>(rows) * 4), 0) << rows << " rows";
      }
    }
  }
}

// Rows at a padded, unaligned stride (as in a slice of a wider tensor), several blocks long, for every
// fused type; Q6_K has no quantizer, so all weights here are random bytes with finite f16 scales.
TEST_P(MatmulTest, FusedStoredRowDotsFollowTheRowStride) {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const auto put_f16 = [](uint8_t* p, float v) {
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  for (DType dt : {DType::BF16, DType::Q4_K, DType::Q8_0, DType::Q6_K}) {
    if (!cpu::has_fused_dot(dt)) continue;
    for (int64_t n : {int64_t{768}, int64_t{2048}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      const int64_t rb = dtype_bytes(dt, n), stride = rb + 3, bs = dtype_info(dt).block_size;
      const int64_t bb = dtype_info(dt).block_bytes;
      std::vector<uint8_t> w(static_cast<size_t>(4 * stride + 1));
      for (uint8_t& b : w) b = static_cast<uint8_t>(rng());
      uint8_t* base = w.data() + 1;  // unaligned
      for (int r = 0; r < 4; ++r) {
        uint8_t* row = base + r * stride;
        if (dt == DType::BF16) {
          for (int64_t i = 0; i < n; ++i) {
            const uint16_t h = f32_to_bf16(u(rng));
            std::memcpy(row + 2 * i, &h, 2);
          }
          continue;
        }
        for (int64_t b = 0; b < n / bs; ++b) {
          uint8_t* blk = row + b * bb;
          if (dt == DType::Q6_K) put_f16(blk + offsetof(quant::BlockQ6_K, d), 0.01f * u(rng));
          if (dt == DType::Q8_0) put_f16(blk, 0.01f * u(rng));
          if (dt == DType::Q4_K) put_f16(blk, 0.01f * u(rng)), put_f16(blk + 2, 0.01f * u(rng));
        }
      }
      std::vector<float> values(static_cast<size_t>(4 * n));
      for (int r = 0; r < 4; ++r) dequantize_row(dt, base + r * stride, values.data() + r * n, n);
      const std::vector<float> x = random_vec(static_cast<size_t>(n), 42);
      for (int rows = 1; rows <= 4; ++rows) {
        float want[4], got[4];
        cpu::dot_rows(x.data(), values.data(), n, rows, n, want);
        cpu::dot_rows_stored(dt, x.data(), base, stride, rows, n, got);
        EXPECT_EQ(std::memcmp(got, want, static_cast<size_t>(rows) * 4), 0) << rows << " rows";
      }
    }
  }
}

TEST_P(MatmulTest, ShapeMismatchNamesTensors) {
  HostWeight w = make_weight(DType::F32, {8, 32}, 3);
  Tensor y = arena().alloc(ops().activation_dtype(), {2, 8});
  try {
    ops().matmul(arena().act(random_vec(2 * 16, 4), {2, 16}), arena().weight(w), y, Tensor());
    FAIL() << "expected ft::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[8, 32]"), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
}

FT_INSTANTIATE_OP_TEST(MatmulTest);

}  // namespace
}  // namespace ft::testing
