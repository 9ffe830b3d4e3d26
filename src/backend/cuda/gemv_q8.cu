// Integer-dot GEMV for Q4_0, Q8_0, Q4_K and Q6_K weights (the types of llama.cpp's common Q4_K_M /
// Q8_0 files). The activation rows are first quantized in two int8 terms per element with one
// scale per 32 elements (quantize_q8_kernel): x ~= d * (q1 + q2 / 254), |error| <= d / 508, i.e.
// ~3e-5 relative (one int8 term, as ggml's q8_1, costs ~0.4% per dot and ~1% through an expert
// FFN). Then each warp computes output rows: a lane unpacks a 32-weight chunk into 8 words of int8
// once and runs 16 dp4a per token against it, instead of ~6 float instructions per weight (the
// float decoder of gemv.cuh is instruction-bound well below the memory bandwidth). Modes as in
// gemv.cuh (plain, expert table, GLU).
// Bytes moved: activations read once and written as 2 x int8 (2.25 bytes per element), then per
// problem N * row_bytes of weights + the int8 rows (cached).
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.h"

namespace ft::cuda {

namespace {

__device__ __forceinline__ uint32_t ld_u32_2(const uint8_t* p) {  // 2-byte aligned 32-bit load
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
}

/** Byte i (0..11) of the 12 packed K-quant scale bytes held in three words. */
__device__ __forceinline__ int scale_byte(uint32_t w0, uint32_t w1, uint32_t w2, int i) {
  const uint32_t w = i < 4 ? w0 : (i < 8 ? w1 : w2);
  return static_cast<int>((w >> (8 * (i & 3))) & 0xff);
}

/** One 32-weight chunk unpacked to signed or unsigned int8 lanes: weight_i = s(i) * q_i - m, where
 *  s = s0 for elements 0..15 and s1 for 16..31. */
struct WChunk {
  int q[8];
  float s0, s1, m;
};

template <DType T>
struct Unpack;

template <>
struct Unpack<DType::Q8_0> {
  __device__ static void load(const uint8_t* row, int64_t c, WChunk& w) {
    const uint8_t* b = row + c * 34;
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>(ld_u32_2(b + 2 + 4 * i));
    w.s0 = w.s1 = ld_f16(b), w.m = 0.0f;
  }
};
template <>
struct Unpack<DType::Q4_0> {
  __device__ static void load(const uint8_t* row, int64_t c, WChunk& w) {
    const uint8_t* b = row + c * 18;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t v = ld_u32_2(b + 2 + 4 * i);
      w.q[i] = static_cast<int>(__vsub4(v & 0x0F0F0F0Fu, 0x08080808u));             // elements 4i..
      w.q[i + 4] = static_cast<int>(__vsub4((v >> 4) & 0x0F0F0F0Fu, 0x08080808u));  // elements 16+4i..
    }
    w.s0 = w.s1 = ld_f16(b), w.m = 0.0f;
  }
};
template <>
struct Unpack<DType::Q4_K> {
  __device__ static void load(const uint8_t* row, int64_t c, WChunk& w) {
    const uint8_t* b = row + (c >> 3) * 144;
    const int j = static_cast<int>(c & 7);
    const uint4 hdr = ld16(b);  // d, dmin, 12 scale bytes
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x & 0xffff)));
    const float dmin = __half2float(__ushort_as_half(static_cast<unsigned short>(hdr.x >> 16)));
    int sc, m;
    if (j < 4) {
      sc = scale_byte(hdr.y, hdr.z, hdr.w, j) & 63;
      m = scale_byte(hdr.y, hdr.z, hdr.w, j + 4) & 63;
    } else {
      sc = (scale_byte(hdr.y, hdr.z, hdr.w, j + 4) & 15) | ((scale_byte(hdr.y, hdr.z, hdr.w, j - 4) >> 6) << 4);
      m = (scale_byte(hdr.y, hdr.z, hdr.w, j + 4) >> 4) | ((scale_byte(hdr.y, hdr.z, hdr.w, j) >> 6) << 4);
    }
    const uint8_t* q = b + 16 + 32 * (j >> 1);
    const uint4 u0 = ld16(q), u1 = ld16(q + 16);
    const uint32_t v[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    const int shift = 4 * (j & 1);
#pragma unroll
    for (int i = 0; i < 8; ++i) w.q[i] = static_cast<int>((v[i] >> shift) & 0x0F0F0F0Fu);
    w.s0 = w.s1 = d * static_cast<float>(sc);
    w.m = dmin * static_cast<float>(m);
  }
};
template <>
struct Unpack<DType::Q6_K> {
  __device__ static void load(const uint8_t* row, int64_t c, WChunk& w) {
    const uint8_t* b = row + (c >> 3) * 210;
    const int s = static_cast<int>(c & 7), n = s >> 2, qq = s & 3;
    const uint8_t* ql = b + 64 * n + 32 * (qq & 1);
    const uint8_t* qh = b + 128 + 32 * n;
    const int nib = 4 * (qq >> 1), hs = 2 * qq;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (ld_u32_2(ql + 4 * i) >> nib) & 0x0F0F0F0Fu;
      const uint32_t hi = ((ld_u32_2(qh + 4 * i) >> hs) & 0x03030303u) << 4;
      w.q[i] = static_cast<int>(__vsub4(lo | hi, 0x20202020u));
    }
    const float d = ld_f16(b + 208);
    const uint16_t sc = *reinterpret_cast<const uint16_t*>(b + 192 + 8 * n + 2 * qq);  // 2-byte aligned
    w.s0 = d * static_cast<float>(static_cast<int8_t>(sc & 0xff));
    w.s1 = d * static_cast<float>(static_cast<int8_t>(sc >> 8));
    w.m = 0.0f;
  }
};

/** sum_i weight_i * x_i for one chunk, x = xd * (q1 + q2 / 254), xs = sum(x) as quantized. Every
 *  unpacked weight byte is a small signed value (Q4_K nibbles 0..15 included): signed dp4a. */
__device__ __forceinline__ float chunk_dot(const WChunk& w, const int8_t* q1, const int8_t* q2, float xd, float xs) {
  const int4 a = reinterpret_cast<const int4*>(q1)[0], b = reinterpret_cast<const int4*>(q1)[1];
  const int4 c = reinterpret_cast<const int4*>(q2)[0], e = reinterpret_cast<const int4*>(q2)[1];
  int lo = __dp4a(w.q[0], a.x, 0), hi = __dp4a(w.q[4], b.x, 0);
  lo = __dp4a(w.q[1], a.y, lo), lo = __dp4a(w.q[2], a.z, lo), lo = __dp4a(w.q[3], a.w, lo);
  hi = __dp4a(w.q[5], b.y, hi), hi = __dp4a(w.q[6], b.z, hi), hi = __dp4a(w.q[7], b.w, hi);
  int lo2 = __dp4a(w.q[0], c.x, 0), hi2 = __dp4a(w.q[4], e.x, 0);
  lo2 = __dp4a(w.q[1], c.y, lo2), lo2 = __dp4a(w.q[2], c.z, lo2), lo2 = __dp4a(w.q[3], c.w, lo2);
  hi2 = __dp4a(w.q[5], e.y, hi2), hi2 = __dp4a(w.q[6], e.z, hi2), hi2 = __dp4a(w.q[7], e.w, hi2);
  constexpr float kInv = 1.0f / 254.0f;
  return xd * (w.s0 * fmaf(static_cast<float>(lo2), kInv, static_cast<float>(lo)) +
               w.s1 * fmaf(static_cast<float>(hi2), kInv, static_cast<float>(hi))) -
         w.m * xs;
}

/** Two-term int8 quantization per 32-element chunk: q1 = round(x / d), d = max|x| / 127, then
 *  q2 = round((x - d q1) / (d / 254)); xd = d, xs = sum of the quantized values. One warp per
 *  chunk. Layout (gemv_q8_scratch_bytes): q1 int8 [rows, K], q2 int8 [rows, K], xd, xs [rows, K/32]. */
__global__ void quantize_q8_kernel(const void* x, bool x_f32, int64_t ldx, int64_t rows, int64_t K, int8_t* q1,
                                   int8_t* q2, float* xd, float* xs) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = K / 32, total = rows * nb;
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; i < total;
       i += (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) {
    const int64_t r = i / nb, b = i % nb, off = r * ldx + b * 32 + lane;
    const float v = x_f32 ? static_cast<const float*>(x)[off] : __bfloat162float(static_cast<const bf16*>(x)[off]);
    const float d = warp_max(fabsf(v)) / 127.0f;
    int a = 0, c = 0;
    if (d > 0.0f) {
      a = __float2int_rn(v / d);
      c = max(-127, min(127, __float2int_rn((v - d * static_cast<float>(a)) * (254.0f / d))));
    }
    const float sum = warp_sum(d * fmaf(static_cast<float>(c), 1.0f / 254.0f, static_cast<float>(a)));
    q1[r * K + b * 32 + lane] = static_cast<int8_t>(a);
    q2[r * K + b * 32 + lane] = static_cast<int8_t>(c);
    if (lane == 0) xd[i] = d, xs[i] = sum;
  }
}

/** Offsets of the parts of the q8 scratch for `rows` x K activations. */
struct Q8Layout {
  int64_t q2, xd, xs;
  __host__ __device__ Q8Layout(int64_t rows, int64_t K) {
    const int64_t qbytes = (rows * K + 15) & ~int64_t{15};
    q2 = qbytes, xd = 2 * qbytes, xs = 2 * qbytes + rows * (K / 32) * 4;
  }
};

constexpr int kWarpsQ8 = 4;  // output rows per block (one per warp)

template <DType WT, int MAXT, bool GLU>
__global__ void __launch_bounds__(kWarpsQ8 * 32) gemv_q8_kernel(GemvArgs a, int64_t n_problems) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsQ8 + warp;
  if (n >= a.N) return;
  const int64_t K = a.K, nb = K / 32, x_rows = a.table ? (n_problems + a.x_div - 1) / a.x_div : a.T;
  const Q8Layout lay(x_rows, K);
  const int8_t* xq = static_cast<const int8_t*>(a.q8);
  const int8_t* xq2 = xq + lay.q2;
  const float* xd = reinterpret_cast<const float*>(xq + lay.xd);
  const float* xs = reinterpret_cast<const float*>(xq + lay.xs);
  for (int64_t p = blockIdx.y; p < n_problems; p += gridDim.y) {
    const uint8_t* wa;
    const uint8_t* wb = nullptr;
    int64_t xrow, yrow;
    int nt;
    if (a.table) {
      const int32_t e = a.ids[p];
      if (e < 0 || e >= a.n_expert) continue;
      wa = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_a]);
      if constexpr (GLU) wb = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_b]);
      xrow = p / a.x_div, yrow = p, nt = 1;
    } else {
      wa = a.w, xrow = yrow = p * MAXT;
      nt = static_cast<int>(min(static_cast<int64_t>(MAXT), a.T - yrow));
    }
    const uint8_t* ra = wa + n * a.row_bytes;
    const uint8_t* rb = GLU ? wb + n * a.row_bytes : nullptr;
    float acc[MAXT], accb[GLU ? MAXT : 1];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int t = 0; t < (GLU ? MAXT : 1); ++t) accb[t] = 0.0f;
    for (int64_t c = lane; c < nb; c += 32) {
      WChunk w, w2;
      Unpack<WT>::load(ra, c, w);
      if constexpr (GLU) Unpack<WT>::load(rb, c, w2);
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        if (t < nt) {
          const int64_t xi = (xrow + t) * nb + c, qo = (xrow + t) * K + c * 32;
          acc[t] += chunk_dot(w, xq + qo, xq2 + qo, xd[xi], xs[xi]);
          if constexpr (GLU) accb[t] += chunk_dot(w2, xq + qo, xq2 + qo, xd[xi], xs[xi]);
        }
      }
    }
    gemv_epilogue<MAXT, GLU>(a, acc, accb, nt, yrow, n, lane);
  }
}

template <DType WT>
void launch_q8_t(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.N + kWarpsQ8 - 1) / kWarpsQ8),
                  static_cast<unsigned>(n_problems < 65535 ? n_problems : 65535));
  if (glu) gemv_q8_kernel<WT, 1, true><<<grid, kWarpsQ8 * 32, 0, s>>>(a, n_problems);
  else if (maxt == 1) gemv_q8_kernel<WT, 1, false><<<grid, kWarpsQ8 * 32, 0, s>>>(a, n_problems);
  else gemv_q8_kernel<WT, 8, false><<<grid, kWarpsQ8 * 32, 0, s>>>(a, n_problems);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace

bool gemv_q8_supports(DType wt) {
  return wt == DType::Q4_0 || wt == DType::Q8_0 || wt == DType::Q4_K || wt == DType::Q6_K;
}

int64_t gemv_q8_scratch_bytes(int64_t rows, int64_t K) { return Q8Layout(rows, K).xs + rows * (K / 32) * 4; }

void launch_gemv_q8(DType wt, int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  FT_CHECK(a.q8 != nullptr && a.K % 32 == 0);
  const int64_t rows = a.table ? (n_problems + a.x_div - 1) / a.x_div : a.T, K = a.K;
  auto* xq = static_cast<int8_t*>(a.q8);
  const Q8Layout lay(rows, K);
  quantize_q8_kernel<<<grid_1d(rows * (K / 32) * 32, 256), 256, 0, s>>>(
      a.x, a.x_f32, a.ldx, rows, K, xq, xq + lay.q2, reinterpret_cast<float*>(xq + lay.xd),
      reinterpret_cast<float*>(xq + lay.xs));
  FT_CUDA_LAUNCH_CHECK();
  switch (wt) {
    case DType::Q4_0: return launch_q8_t<DType::Q4_0>(maxt, glu, a, n_problems, s);
    case DType::Q8_0: return launch_q8_t<DType::Q8_0>(maxt, glu, a, n_problems, s);
    case DType::Q4_K: return launch_q8_t<DType::Q4_K>(maxt, glu, a, n_problems, s);
    case DType::Q6_K: return launch_q8_t<DType::Q6_K>(maxt, glu, a, n_problems, s);
    default: FT_CHECK(false && "gemv_q8: unsupported weight type");
  }
}

}  // namespace ft::cuda
