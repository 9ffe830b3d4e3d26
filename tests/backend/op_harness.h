#pragma once
// Op-consistency harness: every op test runs against each backend named in kBackends, comparing
// with naive scalar references in double precision. A CUDA backend joins by adding its name here
// (and a case in make_ops); the tolerances per backend are in tolerance().
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "tensor/tensor.h"
#include "util/error.h"

namespace ft::testing {

inline std::unique_ptr<Ops> make_ops(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuOps>(2);
  return nullptr;
}

inline const std::vector<std::string> kBackends = {"cpu"};

/** Relative L2 tolerance for an op's output on `backend` (fp32 CPU vs bf16 GPU activations). */
inline double tolerance(const std::string& backend) { return backend == "cpu" ? 2e-6 : 1e-2; }

inline double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/** Host data in a given stored dtype (quantized with quant/ when needed) plus its exact f32 values. */
struct HostWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // what the stored bytes dequantize to
  DType dtype;
  std::vector<int64_t> shape;
};

inline HostWeight make_weight(DType dtype, std::vector<int64_t> shape, uint32_t seed, float scale = 1.0f) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> src = random_vec(static_cast<size_t>(n), seed, -scale, scale);
  HostWeight w{std::vector<uint8_t>(static_cast<size_t>(dtype_bytes(dtype, n))), std::vector<float>(src.size()),
               dtype, shape};
  quantize_row(dtype, src.data(), w.bytes.data(), n);
  dequantize_row(dtype, w.bytes.data(), w.values.data(), n);
  return w;
}

/** Owns the backend memory of the tensors a test creates. */
class Arena {
 public:
  explicit Arena(Ops& ops) : ops_(ops) {}

  /** A backend tensor holding `bytes` (already in `dtype`) with `shape`. */
  Tensor upload(const void* bytes, DType dtype, std::vector<int64_t> shape) {
    Tensor host(const_cast<void*>(bytes), dtype, shape.data(), static_cast<int>(shape.size()));
    Tensor dev = alloc(dtype, shape);
    ops_.copy(host, dev);
    return dev;
  }
  Tensor f32(const std::vector<float>& v, std::vector<int64_t> shape) {
    return upload(v.data(), DType::F32, std::move(shape));
  }
  /** Activation-dtype tensor from f32 values. */
  Tensor act(const std::vector<float>& v, std::vector<int64_t> shape) {
    Tensor host(const_cast<float*>(v.data()), DType::F32, shape.data(), static_cast<int>(shape.size()));
    Tensor dev = alloc(ops_.activation_dtype(), shape);
    ops_.copy(host, dev);
    return dev;
  }
  Tensor i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    return upload(v.data(), DType::I32, std::move(shape));
  }
  Tensor weight(const HostWeight& w) { return upload(w.bytes.data(), w.dtype, w.shape); }
  Tensor alloc(DType dtype, std::vector<int64_t> shape) {
    Tensor t(nullptr, dtype, shape.data(), static_cast<int>(shape.size()), ops_.device());
    bufs_.push_back(ops_.alloc(std::max<int64_t>(t.bytes(), 4)));
    t.data = bufs_.back().data();
    return t;
  }
  /** Reads any F32/F16/BF16/I32 backend tensor as f32 values. */
  std::vector<float> read(const Tensor& t) {
    std::vector<float> out(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::I32) {
      std::vector<int32_t> tmp(out.size());
      Tensor host(tmp.data(), DType::I32, t.shape.data(), t.ndim);
      ops_.copy(t, host);
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(tmp[i]);
      return out;
    }
    Tensor host(out.data(), DType::F32, t.shape.data(), t.ndim);
    ops_.copy(t, host);
    return out;
  }
  std::vector<int32_t> read_i32(const Tensor& t) {
    std::vector<int32_t> out(static_cast<size_t>(t.numel()));
    Tensor host(out.data(), DType::I32, t.shape.data(), t.ndim);
    ops_.copy(t, host);
    return out;
  }

 private:
  Ops& ops_;
  std::vector<Buffer> bufs_;
};

/** Fixture parametrised by backend name. */
class OpTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ops_ = make_ops(GetParam());
    if (!ops_) GTEST_SKIP() << "backend " << GetParam() << " not available";
    arena_ = std::make_unique<Arena>(*ops_);
  }
  Ops& ops() { return *ops_; }
  Arena& arena() { return *arena_; }
  double tol() const { return tolerance(GetParam()); }

  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Arena> arena_;
};

#define FT_INSTANTIATE_OP_TEST(Suite) \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(::ft::testing::kBackends))

}  // namespace ft::testing
