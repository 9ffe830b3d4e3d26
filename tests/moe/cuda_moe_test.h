#pragma once
// The fixture of the GPU moe tests: a CudaOps with BF16 activations on device 0 (the test is skipped
// without a CUDA device; FT_REQUIRE_GPU=1 makes that a failure), device tensors kept for the test's
// life, and uploads / read-backs of their values.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "backend/ops.h"

namespace ft::testing {

class CudaMoeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      const char* req = std::getenv("FT_REQUIRE_GPU");
      if (req && std::string(req) == "1") FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible";
      GTEST_SKIP() << "no CUDA device visible";
    }
    gpu_ = make_cuda_ops(0, DType::BF16);  // the tests' tensors are BF16 activations
  }
  void TearDown() override {
    if (gpu_) gpu_->synchronize();
  }

  /** A device tensor of `shape`, freed when the test ends. */
  Tensor dev(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dt, shape, Device::kCuda);
    keep_.push_back(gpu_->alloc(t.bytes()));
    t.data = keep_.back().data();
    return t;
  }
  /** Copies host values (`host_dt`) into a prefix of `d` viewed as `shape`; returns that view. */
  template <typename V>
  Tensor put(const Tensor& d, DType host_dt, std::vector<V>& v, std::initializer_list<int64_t> shape) {
    Tensor h(v.data(), host_dt, shape), dv(d.data, d.dtype, shape, Device::kCuda);
    gpu_->copy(h, dv);
    return dv;
  }
  std::vector<int32_t> read_i32(const Tensor& d) {
    std::vector<int32_t> v(static_cast<size_t>(d.numel()));
    gpu_->copy(d, Tensor(v.data(), DType::I32, d.shape.data(), d.ndim));
    return v;
  }
  std::vector<float> read_f32(const Tensor& d) {
    std::vector<float> v(static_cast<size_t>(d.numel()));
    gpu_->copy(d, Tensor(v.data(), DType::F32, d.shape.data(), d.ndim));
    return v;
  }

  std::unique_ptr<Ops> gpu_;
  std::vector<Buffer> keep_;
};

}  // namespace ft::testing
