// random_weight and report for the CUDA-vs-CPU harness (gpu_harness.h).
#include "gpu_harness.h"

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

}  // namespace ft::testing
