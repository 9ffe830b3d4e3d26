#pragma once
// Device-side dequantization of weight rows, in "chunks": a chunk is kChunk consecutive elements
// of a row that one thread decodes into registers (32 for every GGUF block type, one 16-byte
// load for F32/F16/BF16). Dq<T>::load(row, c, v) writes elements [c*kChunk, (c+1)*kChunk) of the
// row starting at `row` into v. Kernels (gemv, dequant_rows) are templated on Dq<T> and never
// expand weights in memory except the prefill path that asks for a bf16 copy.
//
// Formats: ggml/src/ggml-common.h block structs (mirrored in quant/blocks.h) and the reference
// dequantizers in quant/ (legacy.cpp, k_quants.cpp, iq_quants.cpp, ternary_fp4.cpp, fp8.cpp); each
// load() performs the same arithmetic per element, so the CUDA values equal the CPU's bit for bit.
// Block sizes here: Q4_0 18 B, Q4_1 20, Q5_0 22, Q5_1 24, Q8_0 34, IQ4_NL 18, MXFP4 17 (32 elements);
// Q2_K 84, Q3_K 110, Q4_K 144, Q5_K 176, Q6_K 210, IQ4_XS 136 (256 elements). The codebook I-quants
// (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) decode in dequant_iq.cuh; Q1_0, Q2_0, TQ1_0,
// TQ2_0, NVFP4, FreeToken's FP8 forms F8_E4M3_B32 / F8_E4M3_B16 (quant/fp8.h, chunk 16 for B16) and
// NVFP4 forms NVFP4_G64 / NVFP4_G16 (quant/nvfp4.h, chunk 16 for G16) in dequant_lowbit.cuh. Those two headers are included only by the files that instantiate kernels for
// their types (FT_CUDA_IQ_WEIGHT_TYPES / FT_CUDA_LOWBIT_WEIGHT_TYPES below: gemv_iq.cu,
// gemv_lowbit.cu, dequant_ext.cu, moe_grouped_gemm_iq.cu, moe_grouped_gemm_lowbit.cu); the dispatching
// files declare those instantiations extern. Supported types: cuda_weight_type.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "tensor/dtype.h"

/** `#pragma unroll` for the decoders' loops under nvcc, nothing in a host compiler (tests compile
 *  the decoders for the host: tests/backend/cuda_dequant_host_test.cpp). */
#if defined(__CUDACC__)
#define FT_UNROLL _Pragma("unroll")
#else
#define FT_UNROLL
#endif

namespace ft::cuda {

__device__ __forceinline__ float ld_f16(const uint8_t* p) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(p[0] | (p[1] << 8))));
}
__device__ __forceinline__ uint32_t ld_u32_bytes(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
/** Exact int -> float for |q| < 2^22 with two full-rate ops (I2F runs at 1/8 of the FMA rate on
 *  sm_90, and the decoders convert one integer per weight). */
__device__ __forceinline__ float i2f(int q) { return __int_as_float(0x4B400000 + q) - 12582912.0f; }
/** 16 bytes from a 16-byte aligned address. */
__device__ __forceinline__ uint4 ld16(const uint8_t* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Codebooks (ggml kvalues_iq4nl; kvalues_mxfp4 = E2M1 values times two, computed); per translation unit.
static __device__ __constant__ float kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                          1,    13,   25,  38,  53,  69,  89,  113};
__device__ __forceinline__ float kv_iq4nl(int i) { return kIq4nlValues[i]; }
/** ggml's kvalues_mxfp4[i] (0, 1, 2, 3, 4, 6, 8, 12, then the same negated, code 8 as +0) from the
 *  magnitudes packed as nibbles of one constant, not a __constant__ table: a warp's lanes read
 *  different codes, and a constant-memory read serializes over distinct addresses (the MXFP4 expert
 *  GEMV ran at ~150 GB/s on an H100 with the table, ncu). */
__device__ __forceinline__ float kv_mxfp4(int i) {
  const int mag = static_cast<int>((0xC8643210u >> ((i & 7) * 4)) & 15u);
  return i2f((i & 8) ? -mag : mag);
}

template <DType T>
struct Dq;

// ---- plain float types: one 16-byte load per chunk ----
template <>
struct Dq<DType::F32> {
  static constexpr int kBlock = 1, kBytes = 4, kChunk = 4;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(row) + c);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  }
};
template <>
struct Dq<DType::F16> {
  static constexpr int kBlock = 1, kBytes = 2, kChunk = 8;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint4 u = ld16(row + c * 16);
    const __half2* h = reinterpret_cast<const __half2*>(&u);
FT_UNROLL
    for (int i = 0; i < 4; ++i) {
      const float2 f = __half22float2(h[i]);
      v[2 * i] = f.x, v[2 * i + 1] = f.y;
    }
  }
};
template <>
struct Dq<DType::BF16> {
  static constexpr int kBlock = 1, kBytes = 2, kChunk = 8;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint4 u = ld16(row + c * 16);
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
FT_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
};

// ---- legacy 32-element blocks ----
template <>
struct Dq<DType::Q4_0> {
  static constexpr int kBlock = 32, kBytes = 18, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b);
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[2 + j];
      v[j] = i2f((q & 15) - 8) * d;
      v[j + 16] = i2f((q >> 4) - 8) * d;
    }
  }
};
template <>
struct Dq<DType::Q4_1> {
  static constexpr int kBlock = 32, kBytes = 20, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b), m = ld_f16(b + 2);
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[4 + j];
      v[j] = i2f(q & 15) * d + m;
      v[j + 16] = i2f(q >> 4) * d + m;
    }
  }
};
template <>
struct Dq<DType::Q5_0> {
  static constexpr int kBlock = 32, kBytes = 22, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b);
    const uint32_t qh = ld_u32_bytes(b + 2);
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[6 + j];
      const int h0 = static_cast<int>((qh >> j) & 1) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
      v[j] = i2f(((q & 15) | h0) - 16) * d;
      v[j + 16] = i2f(((q >> 4) | h1) - 16) * d;
    }
  }
};
template <>
struct Dq<DType::Q5_1> {
  static constexpr int kBlock = 32, kBytes = 24, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b), m = ld_f16(b + 2);
    const uint32_t qh = ld_u32_bytes(b + 4);
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[8 + j];
      const int h0 = static_cast<int>((qh >> j) & 1) << 4, h1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
      v[j] = i2f((q & 15) | h0) * d + m;
      v[j + 16] = i2f((q >> 4) | h1) * d + m;
    }
  }
};
template <>
struct Dq<DType::Q8_0> {
  static constexpr int kBlock = 32, kBytes = 34, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b);
FT_UNROLL
    for (int j = 0; j < 32; ++j) v[j] = i2f(static_cast<int8_t>(b[2 + j])) * d;
  }
};
template <>
struct Dq<DType::IQ4_NL> {
  static constexpr int kBlock = 32, kBytes = 18, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const float d = ld_f16(b);
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[2 + j];
      v[j] = d * kv_iq4nl(q & 15);
      v[j + 16] = d * kv_iq4nl(q >> 4);
    }
  }
};
template <>
struct Dq<DType::MXFP4> {
  static constexpr int kBlock = 32, kBytes = 17, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    const uint32_t e = b[0];
    const float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);  // 2^(e-127) / 2
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = b[1 + j];
      v[j] = kv_mxfp4(q & 15) * d;
      v[j + 16] = kv_mxfp4(q >> 4) * d;
    }
  }
};

// ---- K-quants: chunk c = sub-block (c % 8) of super-block (c / 8) ----
template <>
struct Dq<DType::Q2_K> {
  static constexpr int kBlock = 256, kBytes = 84, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7), n = s >> 2, j = s & 3;
    const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
    const uint8_t* q = b + 16 + 32 * n;
FT_UNROLL
    for (int part = 0; part < 2; ++part) {
      const int sc = b[8 * n + 2 * j + part];
      const float dl = d * i2f(sc & 15), ml = dmin * i2f(sc >> 4);
FT_UNROLL
      for (int l = 0; l < 16; ++l) v[16 * part + l] = dl * i2f((q[16 * part + l] >> (2 * j)) & 3) - ml;
    }
  }
};
template <>
struct Dq<DType::Q3_K> {
  static constexpr int kBlock = 256, kBytes = 110, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7), n = s >> 2, j = s & 3;
    const float d = ld_f16(b + 108);
    const uint8_t* hm = b;
    const uint8_t* q = b + 32 + 32 * n;
    const uint8_t* sc = b + 96;
    const int m = 1 << (4 * n + j);
FT_UNROLL
    for (int part = 0; part < 2; ++part) {
      const int is = 8 * n + 2 * j + part;
      const int lo = is < 8 ? (sc[is] & 15) : (sc[is - 8] >> 4);
      const int hi = (sc[8 + (is & 3)] >> (2 * (is >> 2))) & 3;
      const float dl = d * i2f((lo | hi << 4) - 32);
FT_UNROLL
      for (int l = 16 * part; l < 16 * part + 16; ++l)
        v[l] = dl * i2f(((q[l] >> (2 * j)) & 3) - ((hm[l] & m) ? 0 : 4));
    }
  }
};

/** 6-bit scale and min of sub-block j of Q4_K/Q5_K (ggml get_scale_min_k4). */
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

template <>
struct Dq<DType::Q4_K> {
  static constexpr int kBlock = 256, kBytes = 144, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7);
    const uint32_t dd = *reinterpret_cast<const uint32_t*>(b);
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(dd & 0xffff)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(dd >> 16)));
    const uint32_t w0 = *reinterpret_cast<const uint32_t*>(b + 4), w1 = *reinterpret_cast<const uint32_t*>(b + 8),
                   w2 = *reinterpret_cast<const uint32_t*>(b + 12);
    auto byte = [&](int i) {  // scale byte i without a local array (a run-time index would spill it)
      const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
      return static_cast<int>((w >> (8 * (i & 3))) & 0xff);
    };
    int sc, m;
    if (s < 4) {
      sc = byte(s) & 63, m = byte(s + 4) & 63;
    } else {
      sc = (byte(s + 4) & 15) | ((byte(s - 4) >> 6) << 4);
      m = (byte(s + 4) >> 4) | ((byte(s) >> 6) << 4);
    }
    const float d1 = d * i2f(sc), m1 = dmin * i2f(m);
    const uint8_t* q = b + 16 + 32 * (s >> 1);
    const uint4 u0 = ld16(q), u1 = ld16(q + 16);
    const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    const int shift = 4 * (s & 1);
FT_UNROLL
    for (int i = 0; i < 8; ++i)
FT_UNROLL
      for (int k = 0; k < 4; ++k) v[4 * i + k] = d1 * i2f((w[i] >> (8 * k + shift)) & 15) - m1;
  }
};
template <>
struct Dq<DType::Q5_K> {
  static constexpr int kBlock = 256, kBytes = 176, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7);
    const float d = ld_f16(b), dmin = ld_f16(b + 2);
    int sc, m;
    scale_min_k4(s, b + 4, sc, m);
    const float d1 = d * i2f(sc), m1 = dmin * i2f(m);
    const uint8_t* qh = b + 16;
    const uint8_t* ql = b + 48 + 32 * (s >> 1);
    const int shift = 4 * (s & 1);
FT_UNROLL
    for (int l = 0; l < 32; ++l)
      v[l] = d1 * i2f(((ql[l] >> shift) & 15) + (((qh[l] >> s) & 1) << 4)) - m1;
  }
};
template <>
struct Dq<DType::Q6_K> {
  static constexpr int kBlock = 256, kBytes = 210, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7), n = s >> 2, qq = s & 3;
    const float d = ld_f16(b + 208);
    const uint8_t* ql = b + 64 * n + 32 * (qq & 1);
    const uint8_t* qh = b + 128 + 32 * n;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * n + 2 * qq;
    const int nib = 4 * (qq >> 1);
FT_UNROLL
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> nib) & 15) | (((qh[l] >> (2 * qq)) & 3) << 4)) - 32;
      v[l] = d * i2f(sc[l >> 4]) * i2f(q);
    }
  }
};
template <>
struct Dq<DType::IQ4_XS> {
  static constexpr int kBlock = 256, kBytes = 136, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const int scales_h = b[2] | (b[3] << 8);
    const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 15) | (((scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * i2f(ls - 32);
    const uint8_t* qs = b + 8 + 16 * ib;
FT_UNROLL
    for (int j = 0; j < 16; ++j) {
      const int q = qs[j];
      v[j] = dl * kv_iq4nl(q & 15);
      v[j + 16] = dl * kv_iq4nl(q >> 4);
    }
  }
};

/** True for weight dtypes the CUDA kernels decode (host side). */
inline bool cuda_weight_type(DType t) {
  switch (t) {
    case DType::F32: case DType::F16: case DType::BF16: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0:
    case DType::Q5_1: case DType::Q8_0: case DType::Q2_K: case DType::Q3_K: case DType::Q4_K: case DType::Q5_K:
    case DType::Q6_K: case DType::IQ4_NL: case DType::IQ4_XS: case DType::MXFP4:
    case DType::IQ2_XXS: case DType::IQ2_XS: case DType::IQ2_S: case DType::IQ3_XXS: case DType::IQ3_S:
    case DType::IQ1_S: case DType::IQ1_M: case DType::Q1_0: case DType::Q2_0: case DType::TQ1_0:
    case DType::TQ2_0: case DType::NVFP4: case DType::F8_E4M3_B32: case DType::F8_E4M3_B16:
    case DType::NVFP4_G64: case DType::NVFP4_G16:
      return true;
    default:
      return false;
  }
}

/** Elements per chunk of `t` (host side; `t` must satisfy cuda_weight_type). */
inline int chunk_elems(DType t) {
  if (t == DType::F32) return 4;
  if (t == DType::F16 || t == DType::BF16) return 8;
  return t == DType::F8_E4M3_B16 || t == DType::NVFP4_G16 ? 16 : 32;
}

}  // namespace ft::cuda

/** The weight types whose kernels are instantiated in their own files (dequant_iq.cuh's and
 *  dequant_lowbit.cuh's): X(TYPE, ...) for each, the DType's name unqualified. */
#define FT_CUDA_IQ_WEIGHT_TYPES(X, ...) \
  X(IQ2_XXS, __VA_ARGS__) X(IQ2_XS, __VA_ARGS__) X(IQ2_S, __VA_ARGS__) X(IQ3_XXS, __VA_ARGS__) \
  X(IQ3_S, __VA_ARGS__) X(IQ1_S, __VA_ARGS__) X(IQ1_M, __VA_ARGS__)
#define FT_CUDA_LOWBIT_WEIGHT_TYPES(X, ...) \
  X(Q1_0, __VA_ARGS__) X(Q2_0, __VA_ARGS__) X(TQ1_0, __VA_ARGS__) X(TQ2_0, __VA_ARGS__) \
  X(NVFP4, __VA_ARGS__) X(F8_E4M3_B32, __VA_ARGS__) X(F8_E4M3_B16, __VA_ARGS__) \
  X(NVFP4_G64, __VA_ARGS__) X(NVFP4_G16, __VA_ARGS__)
#define FT_DISPATCH_WEIGHT_CASE_(T, ...) \
  case ::ft::DType::T: { constexpr auto WT = ::ft::DType::T; __VA_ARGS__; break; }

/** Binds constant `WT` to the DType of a supported weight type and runs the body; the caller
 *  checks cuda_weight_type() first. */
#define FT_DISPATCH_WEIGHT(dtype, ...)                                \
  switch (dtype) {                                                    \
    case ::ft::DType::F32: { constexpr auto WT = ::ft::DType::F32; __VA_ARGS__; break; }       \
    case ::ft::DType::F16: { constexpr auto WT = ::ft::DType::F16; __VA_ARGS__; break; }       \
    case ::ft::DType::BF16: { constexpr auto WT = ::ft::DType::BF16; __VA_ARGS__; break; }     \
    case ::ft::DType::Q4_0: { constexpr auto WT = ::ft::DType::Q4_0; __VA_ARGS__; break; }     \
    case ::ft::DType::Q4_1: { constexpr auto WT = ::ft::DType::Q4_1; __VA_ARGS__; break; }     \
    case ::ft::DType::Q5_0: { constexpr auto WT = ::ft::DType::Q5_0; __VA_ARGS__; break; }     \
    case ::ft::DType::Q5_1: { constexpr auto WT = ::ft::DType::Q5_1; __VA_ARGS__; break; }     \
    case ::ft::DType::Q8_0: { constexpr auto WT = ::ft::DType::Q8_0; __VA_ARGS__; break; }     \
    case ::ft::DType::Q2_K: { constexpr auto WT = ::ft::DType::Q2_K; __VA_ARGS__; break; }     \
    case ::ft::DType::Q3_K: { constexpr auto WT = ::ft::DType::Q3_K; __VA_ARGS__; break; }     \
    case ::ft::DType::Q4_K: { constexpr auto WT = ::ft::DType::Q4_K; __VA_ARGS__; break; }     \
    case ::ft::DType::Q5_K: { constexpr auto WT = ::ft::DType::Q5_K; __VA_ARGS__; break; }     \
    case ::ft::DType::Q6_K: { constexpr auto WT = ::ft::DType::Q6_K; __VA_ARGS__; break; }     \
    case ::ft::DType::IQ4_NL: { constexpr auto WT = ::ft::DType::IQ4_NL; __VA_ARGS__; break; } \
    case ::ft::DType::IQ4_XS: { constexpr auto WT = ::ft::DType::IQ4_XS; __VA_ARGS__; break; } \
    case ::ft::DType::MXFP4: { constexpr auto WT = ::ft::DType::MXFP4; __VA_ARGS__; break; }   \
    FT_CUDA_IQ_WEIGHT_TYPES(FT_DISPATCH_WEIGHT_CASE_, __VA_ARGS__)                              \
    FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_DISPATCH_WEIGHT_CASE_, __VA_ARGS__)                          \
    default: FT_CHECK(false && "unsupported weight dtype reached FT_DISPATCH_WEIGHT");           \
  }
