#include <gtest/gtest.h>

#include "tensor/dtype.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {

TEST(DType, GgufIdsRoundTrip) {
  for (uint32_t id = 0; id <= 42; ++id) {
    if (id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38)) {
      EXPECT_THROW(dtype_from_gguf_id(id), Error) << id;
      continue;
    }
    DType t = dtype_from_gguf_id(id);
    EXPECT_EQ(static_cast<uint32_t>(t), id);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  }
  EXPECT_THROW(dtype_from_gguf_id(43), Error);
  EXPECT_THROW(dtype_from_gguf_id(1000), Error);  // safetensors-only ids are not GGUF ids
}

TEST(DType, Bytes) {
  EXPECT_EQ(dtype_bytes(DType::Q4_K, 512), 288);
  EXPECT_EQ(dtype_bytes(DType::BF16, 3), 6);
  EXPECT_EQ(dtype_bytes(DType::MXFP4, 64), 34);
  EXPECT_THROW(dtype_bytes(DType::Q8_0, 33), Error);
  EXPECT_THROW(dtype_bytes(DType::F32, int64_t{1} << 62), Error);
}

TEST(Half, F16RoundTripsEveryValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (f != f) continue;  // NaN
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 5.960464477539063e-08f);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  // tie rounds to even
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f808000)), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x3f818000)), 0x3f82);
}

}  // namespace ft
