#pragma once
// The op tests' harness, in two parts.
//  - OpTest: every op test runs against each backend of kBackends ("cpu", and "cuda" in a build with
//    CUDA), comparing with naive scalar references in double precision within tolerance(backend).
//    FT_INSTANTIATE_OP_TEST names the instances .../cpu and .../Cuda, so `ctest -R Cuda` (make
//    test-gpu) runs every CUDA instance. The CUDA backend runs with BF16 activations.
//  - GpuTest / GpuBatchTest: CUDA-vs-CPU consistency. A test runs an op on the CPU backend (fp32) and
//    on the CUDA backend with the same inputs (rounded to bf16 first, so both see equal values), then
//    compares with a relative L2 tolerance (kTol unless a test states otherwise) or exactly (indices).
//    GPU outputs are poisoned with NaN before each run and every element must be finite afterwards,
//    so an unwritten element fails. Suites on it are named Cuda*.
// Without a CUDA device every CUDA case skips, or fails when FT_REQUIRE_GPU=1 (make test-gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#ifdef FT_HAVE_CUDA
#include "backend/cuda/cuda_ops.h"
#endif
#include "quant/quant.h"
#include "tensor/half.h"
#include "tensor/tensor.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {

/** Whether FT_REQUIRE_GPU=1 (make test-gpu): a missing CUDA device fails a CUDA case instead of skipping it. */
inline bool gpu_required() {
  const char* v = std::getenv("FT_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

/** Skips the current test when no CUDA device is visible (fails it under FT_REQUIRE_GPU=1). Use as
 *  `FT_SKIP_WITHOUT_GPU();` at the start of a test or SetUp. */
#define FT_SKIP_WITHOUT_GPU()                                                                           \
  do {                                                                                                  \
    if (::ft::cuda_device_count() == 0) {                                                               \
      if (::ft::testing::gpu_required())                                                                \
        FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";         \
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";           \
    }                                                                                                   \
  } while (0)

// ---- OpTest: one op test over every backend, against double-precision references ----

/** The backends the op tests run on: "cpu", and "cuda" when this build has the CUDA backend. */
#ifdef FT_HAVE_CUDA
inline const std::vector<std::string> kBackends = {"cpu", "cuda"};
#else
inline const std::vector<std::string> kBackends = {"cpu"};
#endif

/** The backend `name` of kBackends: CpuOps with 2 threads, or CudaOps on device 0 with BF16
 *  activations; nullptr when it is "cuda" and no CUDA device is visible. */
inline std::unique_ptr<Ops> make_ops(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuOps>(2);
  if (name == "cuda" && cuda_device_count() > 0) return make_cuda_ops(0, DType::BF16);
  return nullptr;
}

/** Relative L2 tolerance for an op's output on `backend` (fp32 CPU vs bf16 GPU activations). */
inline double tolerance(const std::string& backend) { return backend == "cpu" ? 2e-6 : 1e-2; }

/** Instance name of a backend: "cpu", "Cuda" (capitalised so `ctest -R Cuda` selects it). */
inline std::string backend_test_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param == "cuda" ? "Cuda" : info.param;
}

inline double rel_l2(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

/** random_floats (test_util.h) under the op tests' older name. */
inline std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  return random_floats(n, seed, lo, hi);
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
    if (GetParam() == "cuda") FT_SKIP_WITHOUT_GPU();
    ops_ = make_ops(GetParam());
    if (!ops_) GTEST_SKIP() << "backend " << GetParam() << " not available";
    arena_ = std::make_unique<Arena>(*ops_);
  }
  void TearDown() override {
    if (ops_) ops_->synchronize();
    arena_.reset();
  }
  Ops& ops() { return *ops_; }
  Arena& arena() { return *arena_; }
  double tol() const { return tolerance(GetParam()); }
  /** A test's own bound `cpu_bound` on the CPU backend (for an op whose fp32 result a test checks
   *  tighter or looser than 2e-6), the backend's bf16 tolerance() on a device backend. */
  double tol(double cpu_bound) const { return GetParam() == "cpu" ? cpu_bound : tolerance(GetParam()); }

  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Arena> arena_;
};

/** Instantiates an OpTest suite over kBackends: Backends/Suite.Test/cpu and Backends/Suite.Test/Cuda. */
#define FT_INSTANTIATE_OP_TEST(Suite)                                                                 \
  INSTANTIATE_TEST_SUITE_P(Backends, Suite, ::testing::ValuesIn(::ft::testing::kBackends), \
                           ::ft::testing::backend_test_name)

// ---- GpuTest: CUDA vs CPU on the same inputs ----

/** Relative L2 error of got vs want (both float). A template, so a braced list of references picks
 *  the std::vector<double> overload above. */
template <typename T>
  requires std::is_same_v<T, float>
double rel_l2(const std::vector<float>& got, const std::vector<T>& want) {
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

namespace detail {

struct ScaleField {
  int offset;
  bool positive;  // else random sign
};

// fp16 scale fields per block, from quant/blocks.h (ggml-common.h); other bytes stay random.
inline std::vector<ScaleField> scale_fields(DType t) {
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

}  // namespace detail

/** Random but valid weight bytes of `dtype` for an [N, K] matrix: quantize_row where quant/ can
 *  (F32/F16/BF16/Q8_0/Q4_0/Q4_K), else random bytes whose scale fields are set to small values (the
 *  layout offsets of quant/blocks.h: fp16 d, MXFP4's E8M0, NVFP4's UE4M3, IQ1_M's nibbles, the FP8
 *  forms' float32 d with every E4M3 code but NaN, NVFP4_G64 / G16's E4M3 scales near 1 with a global
 *  scale that multiplies or, negative, divides (quant/nvfp4.h)). Random bytes are valid blocks of the other types:
 *  every index addresses its codebook, every trit byte decodes. */
inline std::vector<uint8_t> random_weight(DType dtype, int64_t N, int64_t K, uint32_t seed) {
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
    for (const detail::ScaleField& f : detail::scale_fields(dtype)) {
      float v = mag(rng);
      if (!f.positive && (rng() & 1)) v = -v;
      const uint16_t h = f32_to_f16(v);
      std::memcpy(blk + f.offset, &h, 2);
    }
  }
  return out;
}

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
inline void report(const std::string& op, const std::string& what, double err) {
  std::printf("[err] %-18s %-44s %.3e\n", op.c_str(), what.c_str(), err);
  std::fflush(stdout);
}

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
    FT_SKIP_WITHOUT_GPU();
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

  /** What checks a producer's int8 form (ActQ8, CudaOps::prepare_q8): a Q8_0 weight, two outputs
   *  and the handle `q8` for the producer to fill. Making it runs one integer-dot GEMV, after which
   *  producers write their output's int8 form when asked. */
  struct Q8Probe {
    Tensor w, y, y_ref;
    ActQ8 q8;
  };
  Q8Probe q8_probe(const Tensor& like) {
    const int64_t N = 64, T = like.rows(), K = like.cols();
    Q8Probe pr;
    pr.w = arena().dev_bytes(random_weight(DType::Q8_0, N, K, 3), DType::Q8_0, {N, K});
    pr.y = arena().dev_poisoned(like.dtype, {T, N});
    pr.y_ref = arena().dev_poisoned(like.dtype, {T, N});
    gpu().matmul(arena().dev_from(rand_bf16(static_cast<size_t>(T * K), 2), like.dtype, {T, K}), pr.w, pr.y, Tensor());
    return pr;
  }
  /** Whether handle h names a valid int8 form of t on the CUDA backend (CudaOps::handed_q8). */
  bool prepared_q8(const Tensor& t, const ActQ8& h) {
#ifdef FT_HAVE_CUDA
    return static_cast<CudaOps&>(gpu()).handed_q8(&h, t.data, t.dtype, t.rows(), t.cols()) != nullptr;
#else
    (void)t, (void)h;
    return false;
#endif
  }
  /** Right after t's producer (which filled pr.q8): t's form is handed iff `expect`, and a product of t
   *  through the handed int8 form equals one through a quantize launch (of a copy of t), bit for bit. */
  void expect_q8_probe(const Q8Probe& pr, const Tensor& t, bool expect, const std::string& what) {
    EXPECT_EQ(prepared_q8(t, pr.q8), expect) << what;
    gpu().matmul(t, pr.w, pr.y, Tensor(), &pr.q8);
    gpu().matmul(clone(t), pr.w, pr.y_ref, Tensor());
    EXPECT_TRUE(same_bits(pr.y, pr.y_ref)) << what << ": the prepared int8 form differs from a quantize launch's";
    EXPECT_EQ(count_nonfinite(arena().read(pr.y)), 0u) << what;
  }
  /** A device copy of t (at another address: no handle names it). */
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
