// CUDA vs CPU for Gemma 4's ops: gelu_tanh_mul, softcap (F32 and BF16 activations), embedding_split
// (F32 / F16 / BF16 tables into F32 and BF16 activations), moe_expert_scale (with masked entries); GPU
// outputs poisoned first.
#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

class CudaGemmaOps : public GpuTest {};

TEST_F(CudaGemmaOps, GeluTanhMulAndSoftcap) {
  uint32_t seed = 500;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{1, 64}, {9, 96}, {33, 2048}}) {
    const size_t n = static_cast<size_t>(numel_of(shape));
    const auto a = rand_bf16(n, seed++, -5, 5), b = rand_bf16(n, seed++, -2, 2), c = rand_bf16(n, seed++, -90, 90);
    for (DType act : {DType::F32, DType::BF16}) {
      const std::string what = std::string(dtype_name(act)) + " " + std::to_string(n);
      std::vector<float> ref(n);
      Tensor host_out(ref.data(), DType::F32, shape.data(), 2);
      cpu().gelu_tanh_mul(arena().host_f32(a, shape), arena().host_f32(b, shape), host_out);
      Tensor out = arena().dev_poisoned(act, shape);
      gpu().gelu_tanh_mul(arena().dev_from(a, act, shape), arena().dev_from(b, act, shape), out);
      double e = compare(out, ref);
      report("gelu_tanh_mul", what, e);
      EXPECT_LE(e, act == DType::F32 ? 1e-5 : kTol);

      cpu().softcap(arena().host_f32(c, shape), 30.0f, host_out);
      out = arena().dev_poisoned(act, shape);
      gpu().softcap(arena().dev_from(c, act, shape), 30.0f, out);
      e = compare(out, ref);
      report("softcap", what, e);
      EXPECT_LE(e, act == DType::F32 ? 1e-5 : kTol);
    }
  }
}

TEST_F(CudaGemmaOps, EmbeddingSplitAnyTableDtype) {
  const int64_t V = 40, n = 6, D = 32;
  const std::vector<int32_t> ids = {0, 39, 7, 7, 23, 1, 12};
  const int64_t T = static_cast<int64_t>(ids.size());
  uint32_t seed = 600;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const auto w = random_weight(dt, V, n * D, seed++);
    std::vector<float> ref(static_cast<size_t>(n * T * D));
    cpu().embedding_split(arena().host_bytes(w, dt, {V, n * D}), arena().host_i32(ids, {T}),
                          Tensor(ref.data(), DType::F32, {n, T, D}));
    for (DType act : {DType::F32, DType::BF16}) {
      Tensor out = arena().dev_poisoned(act, {n, T, D});
      gpu().embedding_split(arena().dev_bytes(w, dt, {V, n * D}), arena().dev_i32(ids, {T}), out);
      const double e = compare(out, ref);
      report("embedding_split", std::string(dtype_name(dt)) + " -> " + dtype_name(act), e);
      // a copy; into BF16 activations an F32 / F16 value rounds (relative error <= 2^-9), a BF16 one not
      EXPECT_LE(e, act == DType::F32 || dt == DType::BF16 ? 0.0 : 4e-3);
    }
  }
}

TEST_F(CudaGemmaOps, MoeExpertScale) {
  const int64_t T = 37, k = 4, E = 16;
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 7 == 3 ? -1 : static_cast<int32_t>((i * 5) % E);
  const auto w = rand_bf16(static_cast<size_t>(T * k), 700, 0, 1), scale = rand_bf16(static_cast<size_t>(E), 701, -2, 2);
  std::vector<float> ref = w;
  cpu().moe_expert_scale(arena().host_i32(ids, {T, k}), arena().host_f32(scale, {E}),
                         Tensor(ref.data(), DType::F32, {T, k}));
  Tensor dw = arena().dev_from(w, DType::F32, {T, k});
  gpu().moe_expert_scale(arena().dev_i32(ids, {T, k}), arena().dev_from(scale, DType::F32, {E}), dw);
  const double e = compare(dw, ref);
  report("moe_expert_scale", "F32", e);
  EXPECT_EQ(e, 0.0);
}

}  // namespace
}  // namespace ft::testing
