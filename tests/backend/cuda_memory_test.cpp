// CUDA backend memory ops: copy (every direction, F32/F16/BF16 conversion), zero, make_resident,
// and argument errors that name the op and tensor.
#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

class CudaMemory : public GpuTest {};

TEST_F(CudaMemory, CopyConvertsEveryDirection) {
  const int64_t n = 1000;
  std::vector<float> v(n);
  std::mt19937 rng(1);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (float& x : v) x = d(rng);
  // host F32 -> device BF16 -> host F32 == bf16 rounding (round to nearest even)
  Tensor b = arena().dev_from(v, DType::BF16, {n});
  std::vector<float> got = arena().read(b);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(v[i]))) << i;
  // host F32 -> device F32 -> device F16 (kernel) -> host F32 == f16 rounding
  Tensor f = arena().dev_from(v, DType::F32, {n});
  Tensor h = arena().dev_poisoned(DType::F16, {n});
  gpu().copy(f, h);
  got = arena().read(h);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(v[i]))) << i;
  // device BF16 -> device F32 (kernel) is exact
  Tensor f2 = arena().dev_poisoned(DType::F32, {n});
  gpu().copy(b, f2);
  got = arena().read(f2);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], bf16_to_f32(f32_to_bf16(v[i]))) << i;
  // device -> host BF16 (same dtype) and I32 round trip
  std::vector<uint16_t> raw(n);
  gpu().copy(b, Tensor(raw.data(), DType::BF16, {n}));
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(raw[i], f32_to_bf16(v[i])) << i;
  std::vector<int32_t> ids = {5, -7, 1 << 30, 0};
  EXPECT_EQ(arena().read_i32(arena().dev_i32(ids, {4})), ids);
}

TEST_F(CudaMemory, ZeroAndMakeResident) {
  Tensor t = arena().dev_poisoned(DType::BF16, {7, 9});
  gpu().zero(t);
  for (float x : arena().read(t)) ASSERT_EQ(x, 0.0f);
  const std::vector<uint8_t> w = random_weight(DType::Q4_K, 4, 256, 3);
  Tensor host = arena().host_bytes(w, DType::Q4_K, {4, 256});
  Buffer storage;
  Tensor res = gpu().make_resident(host, storage);
  EXPECT_EQ(res.device, Device::kCuda);
  EXPECT_EQ(res.dtype, DType::Q4_K);
  EXPECT_TRUE(res.has_shape({4, 256}));
  std::vector<uint8_t> back(w.size());
  gpu().copy(res, Tensor(back.data(), DType::Q4_K, {4, 256}));
  EXPECT_EQ(back, w);
}

TEST_F(CudaMemory, BadArgumentsNameTheOp) {
  Tensor x = arena().dev_poisoned(DType::BF16, {3, 64});
  Tensor w = arena().dev_poisoned(DType::BF16, {16, 32});
  Tensor y = arena().dev_poisoned(DType::BF16, {3, 16});
  try {
    gpu().matmul(x, w, y, Tensor());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("matmul: w [16, 32]"), std::string::npos) << e.what();
  }
  std::vector<float> host(3 * 64);
  try {
    gpu().add(arena().host_f32(host, {3, 64}), x, x);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("add: a"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu().copy(x, arena().dev(DType::BF16, {3, 63})), Error);
  EXPECT_THROW(gpu().copy(x, arena().dev(DType::I32, {3, 64})), Error);
}

}  // namespace
}  // namespace ft::testing
