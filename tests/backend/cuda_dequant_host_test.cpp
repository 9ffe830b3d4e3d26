// The CUDA weight decoders (Dq<T>::load of backend/cuda/dequant*.cuh) compiled for the host, with each
// device intrinsic they call given its host meaning, against the CPU reference dequantizer
// (quant::dequantize_row): every chunk of random rows, bit for bit. This checks the decoders'
// indexing and arithmetic on any machine of a CUDA build, device or not; the device's own results
// (its rounding, contraction and loads) are checked by cuda_weight_types_test.cpp on a GPU.
#ifdef FT_HAVE_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

// Host meanings of the intrinsics the decoders use (the device ones exist only under nvcc).
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

#include "backend/cuda/dequant_iq.cuh"  // after the shims: the decoders call them
#include "backend/cuda/dequant_lowbit.cuh"

#include "backend/op_harness.h"
#include "quant/fp8.h"
#include "quant/mxfp4.h"

namespace ft::testing {
namespace {

/** Mismatching elements between Dq<T>::load over every chunk and dequantize_row, rows of K. */
template <DType T>
int64_t host_decode_mismatches(int64_t K, uint32_t seed) {
  using D = cuda::Dq<T>;
  const int64_t N = 9, rb = dtype_bytes(T, K);
  const auto w = random_weight(T, N, K, seed);
  std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K));
  int64_t bad = 0;
  for (int64_t r = 0; r < N; ++r) {
    dequantize_row(T, w.data() + r * rb, want.data(), K);
    for (int64_t c = 0; c < K / D::kChunk; ++c) D::load(w.data() + r * rb, c, got.data() + c * D::kChunk);
    bad += std::memcmp(want.data(), got.data(), static_cast<size_t>(K) * 4) != 0;
  }
  return bad;
}

TEST(CudaDecodersOnHost, EqualTheCpuDequantizerBitForBit) {
  const int64_t K = 512;
  EXPECT_EQ(host_decode_mismatches<DType::IQ2_XXS>(K, 1), 0) << "IQ2_XXS";
  EXPECT_EQ(host_decode_mismatches<DType::IQ2_XS>(K, 2), 0) << "IQ2_XS";
  EXPECT_EQ(host_decode_mismatches<DType::IQ2_S>(K, 3), 0) << "IQ2_S";
  EXPECT_EQ(host_decode_mismatches<DType::IQ3_XXS>(K, 4), 0) << "IQ3_XXS";
  EXPECT_EQ(host_decode_mismatches<DType::IQ3_S>(K, 5), 0) << "IQ3_S";
  EXPECT_EQ(host_decode_mismatches<DType::IQ1_S>(K, 6), 0) << "IQ1_S";
  EXPECT_EQ(host_decode_mismatches<DType::IQ1_M>(K, 7), 0) << "IQ1_M";
  EXPECT_EQ(host_decode_mismatches<DType::Q1_0>(K, 8), 0) << "Q1_0";
  EXPECT_EQ(host_decode_mismatches<DType::Q2_0>(K, 9), 0) << "Q2_0";
  EXPECT_EQ(host_decode_mismatches<DType::TQ1_0>(K, 10), 0) << "TQ1_0";
  EXPECT_EQ(host_decode_mismatches<DType::TQ2_0>(K, 11), 0) << "TQ2_0";
  EXPECT_EQ(host_decode_mismatches<DType::NVFP4>(K, 12), 0) << "NVFP4";
  EXPECT_EQ(host_decode_mismatches<DType::F8_E4M3_B32>(K, 13), 0) << "F8_E4M3_B32";
  EXPECT_EQ(host_decode_mismatches<DType::F8_E4M3_B16>(48, 14), 0) << "F8_E4M3_B16";
  EXPECT_EQ(host_decode_mismatches<DType::NVFP4_G64>(K, 19), 0) << "NVFP4_G64";
  EXPECT_EQ(host_decode_mismatches<DType::NVFP4_G16>(K, 20), 0) << "NVFP4_G16";
  EXPECT_EQ(host_decode_mismatches<DType::NVFP4_G16>(80, 21), 0) << "NVFP4_G16 K=80";
  EXPECT_EQ(host_decode_mismatches<DType::MXFP4>(K, 15), 0) << "MXFP4";
  EXPECT_EQ(host_decode_mismatches<DType::Q5_1>(K, 16), 0) << "Q5_1";
  EXPECT_EQ(host_decode_mismatches<DType::Q3_K>(K, 17), 0) << "Q3_K";
  EXPECT_EQ(host_decode_mismatches<DType::IQ4_XS>(K, 18), 0) << "IQ4_XS";
}

TEST(CudaDecodersOnHost, EveryE4M3AndUe4m3Code) {
  for (int c = 0; c < 256; ++c) {
    const float g = cuda::lowbit::e4m3(c), w = e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << c;
    else EXPECT_EQ(std::memcmp(&g, &w, 4), 0) << "code " << c << ": " << g << " vs " << w;
    // UE4M3 scale (bit 7 ignored; 0x00 and 0x7f are 0) halved, from its definition
    const int e = (c >> 3) & 15, m = c & 7;
    const float u = (c == 0 || c == 0x7f) ? 0.0f
                    : (e == 0 ? std::ldexp(static_cast<float>(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7)) * 0.5f;
    EXPECT_EQ(cuda::lowbit::ue4m3_half(c), u) << "ue4m3 " << c;
  }
}

TEST(CudaDecodersOnHost, EveryE2M1CodeAndNvfp4Scale) {
  // e2m1: quant/mxfp4.h's values, -0.0 for code 8 included; nvfp4_scale for every non-NaN E4M3 scale
  // byte with a multiplying and a dividing global scale, as quant/nvfp4.cpp forms it.
  for (int q = 0; q < 16; ++q) {
    const float g = cuda::lowbit::e2m1(q), w = e2m1_to_f32(static_cast<uint8_t>(q));
    EXPECT_EQ(std::memcmp(&g, &w, 4), 0) << "code " << q << ": " << g << " vs " << w;
  }
  for (float gs : {0.0123f, -37.5f}) {
    uint32_t bits;
    std::memcpy(&bits, &gs, 4);
    for (int c = 0; c < 256; ++c) {
      if ((c & 0x7f) == 0x7f) continue;
      const float s = e4m3_to_f32(static_cast<uint8_t>(c)), want = gs < 0 ? s / -gs : s * gs;
      const float got = cuda::lowbit::nvfp4_scale(c, bits);
      EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << "scale " << c << " g " << gs;
    }
  }
}

}  // namespace
}  // namespace ft::testing
#endif  // FT_HAVE_CUDA
