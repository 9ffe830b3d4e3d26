#pragma once
// CUDA-vs-CPU op-consistency harness. Every test runs an op on the CPU backend (fp32) and on the
// CUDA backend (bf16 activations) with the same inputs (rounded to bf16 first, so both see equal
// values), then compares with a relative L2 tolerance (1e-2 unless a test states otherwise) or
// exactly (indices). GPU outputs are poisoned with NaN before each run and every element must be
// finite afterwards, so an unwritten element fails. Without a CUDA device every test skips, or
// fails when FT_REQUIRE_GPU=1 (make test-gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "tensor/tensor.h"

namespace ft::testing {

inline bool gpu_required() {
  const char* v = std::getenv("FT_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline size_t count_nonfinite(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += !std::isfinite(x);
  return n;
}

/** Uniform random values in [lo, hi), rounded to bf16 (exactly representable on both backends). */
inline std::vector<float> rand_bf16(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(d(rng)));
  return v;
}

/** v with every value rounded to bf16 (round to nearest even, as the GPU stores bf16). */
inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

inline int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

/** Random but valid weight bytes of `dtype` for an [N, K] matrix: quantize_row where quant/ can
 *  (F32/F16/BF16/Q8_0/Q4_0/Q4_K), else random bytes whose scale fields are set to small values (the
 *  layout offsets of quant/blocks.h: fp16 d, MXFP4's E8M0, NVFP4's UE4M3, IQ1_M's nibbles, the FP8
 *  forms' float32 d with every E4M3 code but NaN, NVFP4_G64 / G16's E4M3 scales near 1 with a global
 *  scale that multiplies or, negative, divides (quant/nvfp4.h)). Random bytes are valid blocks of the other types:
 *  every index addresses its codebook, every trit byte decodes. */
std::vector<uint8_t> random_weight(DType dtype, int64_t N, int64_t K, uint32_t seed);

/** Every weight dtype the CUDA kernels decode (backend/cuda/dequant.cuh cuda_weight_type), for the
 *  table-driven tests: a type added there belongs here, and a type listed here must have a kernel. */
inline const std::vector<DType>& cuda_weight_types_under_test() {
  static const std::vector<DType> types = {
      DType::F32,     DType::F16,    DType::BF16,  DType::Q4_0,    DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
      DType::Q8_0,    DType::Q2_K,   DType::Q3_K,  DType::Q4_K,    DType::Q5_K,   DType::Q6_K,   DType::IQ4_NL,
      DType::IQ4_XS,  DType::MXFP4,  DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,
      DType::IQ1_S,   DType::IQ1_M,  DType::Q1_0,  DType::Q2_0,    DType::TQ1_0,  DType::TQ2_0,  DType::NVFP4,
      DType::F8_E4M3_B32, DType::F8_E4M3_B16, DType::NVFP4_G64, DType::NVFP4_G16};
  return types;
}

/** Prints "[err] op what value" (collected into the device run's table). */
void report(const std::string& op, const std::string& what, double err);

/** Owns the device and host memory of one test; builds matching CPU/GPU tensors. */
class DualArena {
 public:
  DualArena(Ops& cpu, Ops& gpu) : cpu_(cpu), gpu_(gpu) {}

  /** Host F32 tensor with these values (kept alive by the arena). */
  Tensor host_f32(const std::vector<float>& v, std::vector<int64_t> shape) {
    host_f32_.push_back(v);
    return Tensor(host_f32_.back().data(), DType::F32, shape.data(), static_cast<int>(shape.size()));
  }
  Tensor host_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    host_i32_.push_back(v);
    return Tensor(host_i32_.back().data(), DType::I32, shape.data(), static_cast<int>(shape.size()));
  }
  Tensor host_bytes(const std::vector<uint8_t>& v, DType dtype, std::vector<int64_t> shape) {
    host_u8_.push_back(v);
    return Tensor(host_u8_.back().data(), dtype, shape.data(), static_cast<int>(shape.size()));
  }
  /** Uninitialised device tensor. */
  Tensor dev(DType dtype, std::vector<int64_t> shape) {
    Tensor t(nullptr, dtype, shape.data(), static_cast<int>(shape.size()), Device::kCuda);
    bufs_.push_back(gpu_.alloc(std::max<int64_t>(t.bytes(), 16)));
    t.data = bufs_.back().data();
    return t;
  }
  /** Device tensor of `dtype` holding `v` (converted). */
  Tensor dev_from(const std::vector<float>& v, DType dtype, std::vector<int64_t> shape) {
    Tensor d = dev(dtype, shape);
    gpu_.copy(host_f32(v, shape), d);
    return d;
  }
  Tensor dev_i32(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
    Tensor d = dev(DType::I32, shape);
    gpu_.copy(host_i32(v, shape), d);
    return d;
  }
  Tensor dev_bytes(const std::vector<uint8_t>& v, DType dtype, std::vector<int64_t> shape) {
    Tensor d = dev(dtype, shape);
    gpu_.copy(host_bytes(v, dtype, shape), d);
    return d;
  }
  /** Device output tensor filled with NaN (I32: with INT32_MIN). */
  Tensor dev_poisoned(DType dtype, std::vector<int64_t> shape) {
    Tensor d = dev(dtype, shape);
    poison(d);
    return d;
  }
  void poison(Tensor d) {
    const int64_t n = d.numel();
    if (d.dtype == DType::I32) {
      gpu_.copy(host_i32(std::vector<int32_t>(static_cast<size_t>(n), std::numeric_limits<int32_t>::min()),
                         {n}),
                d.reshape({n}));
    } else {
      gpu_.copy(host_f32(std::vector<float>(static_cast<size_t>(n), std::nanf("")), {n}), d.reshape({n}));
    }
  }
  /** Any F32/F16/BF16 device tensor as floats. */
  std::vector<float> read(const Tensor& d) {
    std::vector<float> out(static_cast<size_t>(d.numel()));
    gpu_.copy(d, Tensor(out.data(), DType::F32, d.shape.data(), d.ndim));
    return out;
  }
  std::vector<int32_t> read_i32(const Tensor& d) {
    std::vector<int32_t> out(static_cast<size_t>(d.numel()));
    gpu_.copy(d, Tensor(out.data(), DType::I32, d.shape.data(), d.ndim));
    return out;
  }

 private:
  Ops& cpu_;
  Ops& gpu_;
  std::vector<Buffer> bufs_;
  std::vector<std::vector<float>> host_f32_;
  std::vector<std::vector<int32_t>> host_i32_;
  std::vector<std::vector<uint8_t>> host_u8_;
};

/** Base fixture: a CPU backend (2 threads) and the CUDA backend on device 0. */
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
    cpu_ = std::make_unique<CpuOps>(2);
    gpu_ = make_cuda_ops(0);
    arena_ = std::make_unique<DualArena>(*cpu_, *gpu_);
  }
  void TearDown() override {
    if (gpu_) gpu_->synchronize();
    arena_.reset();
  }
  Ops& cpu() { return *cpu_; }
  Ops& gpu() { return *gpu_; }
  DualArena& arena() { return *arena_; }

  /** What checks a producer's int8 form (CudaOps::prepare_q8): a Q8_0 weight and two outputs,
   *  allocated before the producer runs (an allocation's copy forgets the prepared form). Making it
   *  runs one integer-dot GEMV, after which producers write their output's int8 form too. */
  struct Q8Probe {
    Tensor w, y, y_ref;
  };
  Q8Probe q8_probe(const Tensor& like);
  /** Whether the CUDA backend holds a prepared int8 form of t (CudaOps::prepared_q8). */
  bool prepared_q8(const Tensor& t);
  /** Right after t's producer: t is prepared iff `expect`, and a product of t through its prepared
   *  int8 form equals one through a quantize launch (of a copy of t), bit for bit. */
  void expect_q8_probe(const Q8Probe& pr, const Tensor& t, bool expect, const std::string& what);
  /** A device copy of t (a copy is an op that forgets any prepared int8 form). */
  Tensor clone(const Tensor& t) {
    Tensor c = arena().dev(t.dtype, {t.rows(), t.cols()});
    gpu().copy(t, c);
    return c;
  }
  /** Whether two device tensors hold the same values, bit for bit. */
  bool same_bits(const Tensor& a, const Tensor& b) {
    const std::vector<float> x = arena().read(a), y = arena().read(b);
    return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
  }

  /** Reads a GPU output, requires every element finite, and returns its rel L2 error vs `want`. */
  double compare(const Tensor& got_dev, const std::vector<float>& want) {
    const std::vector<float> got = arena().read(got_dev);
    EXPECT_EQ(got.size(), want.size());
    EXPECT_EQ(count_nonfinite(got), 0u) << "unwritten or non-finite GPU outputs";
    return rel_l2(got, want);
  }

  std::unique_ptr<Ops> cpu_;
  std::unique_ptr<Ops> gpu_;
  std::unique_ptr<DualArena> arena_;
};

constexpr double kTol = 1e-2;  // relative L2, bf16 activations vs fp32

/** GpuTest with paged-batch helpers for the attention tests: a host batch of runs and its BatchInfo
 *  on either side. */
class GpuBatchTest : public GpuTest {
 protected:
  struct HostBatch {
    std::vector<int32_t> pos, seq, start;
    int32_t T = 0, S = 0, max_kv_len = 0;
  };

  /** Batch of tokens [first, first + count) of every sequence (count may be 0). */
  static HostBatch make(const std::vector<std::pair<int32_t, int32_t>>& runs) {
    HostBatch b;
    b.S = static_cast<int32_t>(runs.size());
    b.start.push_back(0);
    for (int32_t s = 0; s < b.S; ++s) {
      for (int32_t i = 0; i < runs[static_cast<size_t>(s)].second; ++i) {
        const int32_t p = runs[static_cast<size_t>(s)].first + i;
        b.pos.push_back(p);
        b.seq.push_back(s);
        b.max_kv_len = std::max(b.max_kv_len, p + 1);
      }
      b.start.push_back(static_cast<int32_t>(b.pos.size()));
    }
    b.T = static_cast<int32_t>(b.pos.size());
    return b;
  }

  BatchInfo info(const HostBatch& hb, const std::vector<int32_t>& table, int32_t max_blocks, bool on_gpu) {
    BatchInfo b;
    b.n_tokens = hb.T, b.n_seqs = hb.S, b.max_blocks = max_blocks, b.max_kv_len = hb.max_kv_len;
    auto mk = [&](const std::vector<int32_t>& v) {
      const int64_t n = static_cast<int64_t>(v.size());
      return on_gpu ? arena().dev_i32(v.empty() ? std::vector<int32_t>{0} : v, {std::max<int64_t>(n, 1)}).reshape({n})
                    : arena().host_i32(v, {n});
    };
    b.positions = mk(hb.pos), b.seq_index = mk(hb.seq), b.seq_start = mk(hb.start);
    b.block_tables = mk(table).reshape({hb.S, max_blocks});
    return b;
  }
};

}  // namespace ft::testing
