// random_weight and report for the CUDA-vs-CPU harness (gpu_harness.h).
#include "gpu_harness.h"

#ifdef FT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif

#include <cstdio>

namespace ft::testing {

namespace {

struct ScaleField {
  int offset;
  bool positive;  // else random sign
};

// fp16 scale fields per block, from quant/blocks.h (ggml-common.h); other bytes stay random.
std::vector<ScaleField> scale_fields(DType t) {
  switch (t) {
    case DType::Q4_1: case DType::Q5_1: return {{0, true}, {2, false}};
    case DType::Q5_0: case DType::IQ4_NL: case DType::IQ4_XS: return {{0, false}};
    case DType::Q2_K: return {{80, true}, {82, true}};
    case DType::Q3_K: return {{108, false}};
    case DType::Q5_K: return {{0, true}, {2, true}};
    case DType::Q6_K: return {{208, false}};
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::Q1_0: case DType::Q2_0: return {{0, false}};
    case DType::TQ1_0: return {{52, false}};
    case DType::TQ2_0: return {{64, false}};
    default: return {};
  }
}

}  // namespace

std::vector<uint8_t> random_weight(DType dtype, int64_t N, int64_t K, uint32_t seed) {
  const int64_t n = N * K;
  std::vector<uint8_t> out(static_cast<size_t>(dtype_bytes(dtype, n)));
  std::mt19937 rng(seed);
  switch (dtype) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q8_0: case DType::Q4_0: case DType::Q4_K: {
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      std::vector<float> src(static_cast<size_t>(n));
      for (float& x : src) x = d(rng);
      quantize_row(dtype, src.data(), out.data(), n);
      return out;
    }
    default:
      break;
  }
  for (uint8_t& b : out) b = static_cast<uint8_t>(rng() & 0xff);
  const DTypeInfo& info = dtype_info(dtype);
  const int64_t n_blocks = n / info.block_size;
  std::uniform_real_distribution<float> mag(1e-3f, 5e-2f);
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* blk = out.data() + i * info.block_bytes;
    if (dtype == DType::MXFP4) {
      blk[0] = static_cast<uint8_t>(120 + rng() % 11);  // E8M0 exponent near 2^0
      continue;
    }
    if (dtype == DType::NVFP4) {  // 4 UE4M3 scales: exponent 3..8 (about 2^-4 .. 2), any mantissa, bit 7 ignored
      for (int s = 0; s < 4; ++s) blk[s] = static_cast<uint8_t>((rng() & 0x80) | (3 + rng() % 6) << 3 | (rng() & 7));
      continue;
    }
    if (dtype == DType::IQ1_M) {  // the fp16 scale lives in the top nibbles of the 4 scale words (bytes 48..55)
      const uint16_t h = f32_to_f16(mag(rng) * ((rng() & 1) ? -1.0f : 1.0f));
      for (int w = 0; w < 4; ++w) blk[48 + 2 * w + 1] = static_cast<uint8_t>((blk[48 + 2 * w + 1] & 0x0f) |
                                                                            (((h >> (4 * w)) & 0x0f) << 4));
      continue;
    }
    if (dtype == DType::NVFP4_G64 || dtype == DType::NVFP4_G16) {
      // float32 global scale: ModelOpt's multiplier, or (negative) compressed-tensors' divisor; E4M3
      // block scales 2^-2 .. 2^2 with any mantissa; the codes stay random
      const float g = (rng() & 1) ? mag(rng) : -1.0f / mag(rng);
      std::memcpy(blk, &g, 4);
      for (int64_t k = 0; k < info.block_size / 16; ++k) blk[4 + k] = static_cast<uint8_t>((5 + rng() % 5) << 3 | (rng() & 7));
      continue;
    }
    if (dtype == DType::F8_E4M3_B32 || dtype == DType::F8_E4M3_B16) {  // float32 d, then every E4M3 code but NaN
      const float d = mag(rng) / 64.0f;
      std::memcpy(blk, &d, 4);
      for (int64_t k = 4; k < info.block_bytes; ++k)
        if ((blk[k] & 0x7f) == 0x7f) blk[k] = static_cast<uint8_t>(blk[k] ^ 0x01);  // 0x7f / 0xff -> 0x7e / 0xfe
      continue;
    }
    for (const ScaleField& f : scale_fields(dtype)) {
      float v = mag(rng);
      if (!f.positive && (rng() & 1)) v = -v;
      const uint16_t h = f32_to_f16(v);
      std::memcpy(blk + f.offset, &h, 2);
    }
  }
  return out;
}

void report(const std::string& op, const std::string& what, double err) {
  std::printf("[err] %-18s %-44s %.3e\n", op.c_str(), what.c_str(), err);
  std::fflush(stdout);
}

GpuTest::Q8Probe GpuTest::q8_probe(const Tensor& like) {
  const int64_t N = 64, T = like.rows(), K = like.cols();
  Q8Probe pr;
  pr.w = arena().dev_bytes(random_weight(DType::Q8_0, N, K, 3), DType::Q8_0, {N, K});
  pr.y = arena().dev_poisoned(like.dtype, {T, N});
  pr.y_ref = arena().dev_poisoned(like.dtype, {T, N});
  gpu().matmul(arena().dev_from(rand_bf16(static_cast<size_t>(T * K), 2), like.dtype, {T, K}), pr.w, pr.y, Tensor());
  return pr;
}

bool GpuTest::prepared_q8(const Tensor& t) {
#ifdef FT_HAVE_CUDA
  return static_cast<CudaOps&>(gpu()).prepared_q8(t.data, t.dtype, t.rows(), t.cols()) != nullptr;
#else
  (void)t;
  return false;
#endif
}

void GpuTest::expect_q8_probe(const Q8Probe& pr, const Tensor& t, bool expect, const std::string& what) {
  EXPECT_EQ(prepared_q8(t), expect) << what;
  gpu().matmul(t, pr.w, pr.y, Tensor());
  gpu().matmul(clone(t), pr.w, pr.y_ref, Tensor());
  EXPECT_TRUE(same_bits(pr.y, pr.y_ref)) << what << ": the prepared int8 form differs from a quantize launch's";
  EXPECT_EQ(count_nonfinite(arena().read(pr.y)), 0u) << what;
}

}  // namespace ft::testing
