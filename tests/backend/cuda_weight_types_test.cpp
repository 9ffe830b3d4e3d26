// Every weight dtype the CUDA kernels decode (cuda_weight_types_under_test) against the CPU reference
// dequantizer (quant::dequantize_row): the CUDA dequant_rows kernel, reached through the embedding
// op, must give the CPU's floats bit for bit (F32 out) and their bf16 rounding (BF16 out), for rows
// gathered in any order. The products (cuda_matmul_test.cpp) and the experts (cuda_moe_test.cpp) run the same
// table of types with a tolerance.
#include <algorithm>
#include <cstring>
#include <random>

#include "backend/cuda_weight_types.h"
#include "backend/op_harness.h"
#include "quant/nvfp4.h"

namespace ft::testing {
namespace {

class CudaWeightTypes : public GpuTest {
 protected:
  /** Gathers `ids` rows of a random [V, K] `dt` table on the GPU into `out_dtype` and returns the number
   *  of elements whose bits differ from the CPU's (bf16-rounded for a BF16 out). */
  int64_t mismatches(DType dt, int64_t V, int64_t K, const std::vector<int32_t>& ids, DType out_dtype, uint32_t seed,
                     std::string* first) {
    const auto w = random_weight(dt, V, K, seed);
    const int64_t rb = dtype_bytes(dt, K), T = static_cast<int64_t>(ids.size());
    Tensor out = arena().dev_poisoned(out_dtype, {T, K});
    gpu().embedding(arena().dev_bytes(w, dt, {V, K}), arena().dev_i32(ids, {T}), out);
    const std::vector<float> got = arena().read(out);
    std::vector<float> row(static_cast<size_t>(K));
    int64_t bad = 0;
    for (int64_t t = 0; t < T; ++t) {
      dequantize_row(dt, w.data() + ids[static_cast<size_t>(t)] * rb, row.data(), K);
      if (out_dtype == DType::BF16) row = round_bf16(row);
      for (int64_t k = 0; k < K; ++k) {
        const float g = got[static_cast<size_t>(t * K + k)], c = row[static_cast<size_t>(k)];
        if (std::memcmp(&g, &c, 4) == 0) continue;
        if (bad++ == 0 && first)
          *first = "row " + std::to_string(ids[static_cast<size_t>(t)]) + " col " + std::to_string(k) + ": cuda " +
                   std::to_string(g) + ", cpu " + std::to_string(c);
      }
    }
    return bad;
  }
};

TEST(CudaWeightTypeList, EveryListedTypeHasAKernelAndIsNamed) {
  // Host-side lists only: runs in any build with the CUDA backend, device or not.
  const std::string names = cuda_weight_kernel_types();
  if (names.empty()) GTEST_SKIP() << "this build has no CUDA backend";
  for (DType dt : cuda_weight_types_under_test()) {
    EXPECT_TRUE(cuda_has_weight_kernel(dt)) << dtype_name(dt);
    EXPECT_NE(names.find(dtype_name(dt)), std::string::npos) << dtype_name(dt) << " missing from " << names;
  }
}

TEST_F(CudaWeightTypes, DequantRowsEqualTheCpuBitForBit) {
  const int64_t V = 11, K = 512;  // K: whole blocks of every type (256-element super-blocks included)
  std::mt19937 rng(5);
  std::vector<int32_t> ids(23);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % V);  // any order, repeats
  ids[0] = 0, ids[1] = static_cast<int32_t>(V - 1);
  uint32_t seed = 100;
  for (DType dt : cuda_weight_types_under_test()) {
    for (DType out : {DType::F32, DType::BF16}) {
      std::string first;
      const int64_t bad = mismatches(dt, V, K, ids, out, seed += 7, &first);
      EXPECT_EQ(bad, 0) << dtype_name(dt) << " -> " << dtype_name(out) << ": " << bad << " elements differ, first "
                        << first;
    }
  }
}

TEST_F(CudaWeightTypes, Fp8RowsOfSixteenBlocks) {
  // F8_E4M3_B16 exists for rows that are 16k but not 32k long: a chunk is one 16-value block.
  const std::vector<int32_t> ids = {2, 0, 4, 1, 3, 2};
  for (int64_t K : {16, 48, 80}) {
    std::string first;
    EXPECT_EQ(mismatches(DType::F8_E4M3_B16, 5, K, ids, DType::F32, 900 + static_cast<uint32_t>(K), &first), 0)
        << "K=" << K << " first " << first;
  }
}

TEST_F(CudaWeightTypes, Nvfp4RowsOfSixteenBlocks) {
  // NVFP4_G16 exists for rows that are 16k but not 64k long: a chunk is one 13-byte, 16-value block.
  const std::vector<int32_t> ids = {2, 0, 4, 1, 3, 2};
  for (int64_t K : {16, 48, 80, 208}) {
    std::string first;
    EXPECT_EQ(mismatches(DType::NVFP4_G16, 5, K, ids, DType::F32, 950 + static_cast<uint32_t>(K), &first), 0)
        << "K=" << K << " first " << first;
  }
}

TEST_F(CudaWeightTypes, EveryNvfp4CodeAndBlockScaleDecodesExactly) {
  // NVFP4_G64 and G16 rows holding every E2M1 code (-0.0 included) under every non-NaN E4M3 block
  // scale, with ModelOpt's multiplying and compressed-tensors' dividing global scale (quant/nvfp4.h):
  // the CUDA decode equals the CPU's bit for bit.
  for (DType dt : {DType::NVFP4_G64, DType::NVFP4_G16}) {
    for (float g : {0.0123f, 3e-30f, 41.5f}) {
      for (bool divides : {false, true}) {
        const int64_t K = 256 * 16;  // 16-value groups with the 254 scale bytes but 0x7f / 0xff, then two more
        std::vector<uint8_t> packed(static_cast<size_t>(K / 2)), scales(static_cast<size_t>(K / 16));
        for (int64_t i = 0; i < K / 2; ++i) packed[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 37 + 11);
        int64_t b = 0;
        for (int c = 0; b < K / 16; c = (c + 1) % 256)
          if ((c & 0x7f) != 0x7f) scales[static_cast<size_t>(b++)] = static_cast<uint8_t>(c);
        std::vector<uint8_t> row(static_cast<size_t>(dtype_bytes(dt, K)));
        nvfp4_rows_from_modelopt(packed.data(), scales.data(), g, 1, K, row.data(), dt, divides);
        Tensor out = arena().dev_poisoned(DType::F32, {1, K});
        gpu().embedding(arena().dev_bytes(row, dt, {1, K}), arena().dev_i32({0}, {1}), out);
        const std::vector<float> got = arena().read(out);
        std::vector<float> want(static_cast<size_t>(K));
        dequantize_row(dt, row.data(), want.data(), K);
        int64_t bad = 0;
        for (int64_t c = 0; c < K; ++c)
          bad += std::memcmp(&got[static_cast<size_t>(c)], &want[static_cast<size_t>(c)], 4) != 0;
        EXPECT_EQ(bad, 0) << dtype_name(dt) << " g " << g << (divides ? " divides" : " multiplies");
      }
    }
  }
}

TEST_F(CudaWeightTypes, EveryE4M3CodeDecodesExactly) {
  // One F8_E4M3_B32 row holding all 256 codes (NaN codes included) with scales 1 and 2^-3: the CUDA
  // decode of each code equals the CPU's, a NaN where the CPU has one.
  const int64_t K = 256;
  std::vector<uint8_t> row(static_cast<size_t>(dtype_bytes(DType::F8_E4M3_B32, K)));
  for (int64_t b = 0; b < K / 32; ++b) {
    const float d = b % 2 ? 0.125f : 1.0f;
    std::memcpy(row.data() + b * 36, &d, 4);
    for (int k = 0; k < 32; ++k) row[static_cast<size_t>(b * 36 + 4 + k)] = static_cast<uint8_t>(b * 32 + k);
  }
  Tensor out = arena().dev_poisoned(DType::F32, {1, K});
  gpu().embedding(arena().dev_bytes(row, DType::F8_E4M3_B32, {1, K}), arena().dev_i32({0}, {1}), out);
  const std::vector<float> got = arena().read(out);
  std::vector<float> want(static_cast<size_t>(K));
  dequantize_row(DType::F8_E4M3_B32, row.data(), want.data(), K);
  for (int64_t c = 0; c < K; ++c) {
    const float g = got[static_cast<size_t>(c)], w = want[static_cast<size_t>(c)];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "code " << c;
    } else {
      EXPECT_EQ(std::memcmp(&g, &w, 4), 0) << "code " << c << ": cuda " << g << ", cpu " << w;
    }
  }
}

}  // namespace
}  // namespace ft::testing
