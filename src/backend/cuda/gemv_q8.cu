// Integer-dot GEMV for Q4_0, Q8_0, Q4_K and Q6_K weights (the types of llama.cpp's common Q4_K_M /
// Q8_0 files). The activation rows are first quantized in two int8 terms per element with one
// scale per 32 elements (quantize_q8_kernel): x ~= d * (q1 + q2 / 254), |error| <= d / 508, i.e.
// ~3e-5 relative (one int8 term, as ggml's q8_1, costs ~0.4% per dot and ~1% through an expert
// FFN). Then the GEMV: a lane unpacks a 32-weight chunk into 8 words of int8 once and runs 16 dp4a
// per token against it, instead of ~6 float instructions per weight (the float decoder of gemv.cuh
// is instruction-bound well below the memory bandwidth). A row goes to 1-4 warps (ks, as in
// gemv.cuh), one-token launches on matrices of at least 4096 rows take 4 rows per warp, and expert
// GEMVs of short rows take lane groups (gemv_q8_lanes_kernel). Every choice depends on the matrix
// (N, K) only, never on the batch, so a row's sum order is the same at every batch size.
// Modes as in gemv.cuh (plain, expert table, GLU); the lane-group kernel can also write a GLU pair's
// int8 form (GemvArgs::q8_out) or a down GEMV's weighted sum over slots (GemvArgs::combine_*).
// GemvArgs::q8_ready skips the quantize launch: the activation's producer or the router wrote the
// same bytes already (CudaOps::handed_q8).
// Bytes moved: activations read once and written as 2 x int8 (2.25 bytes per element), then per
// problem N * row_bytes of weights + the int8 rows (cached).
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/q8_act.cuh"

namespace ft::cuda {

namespace {

__device__ __forceinline__ uint32_t ld_u32_2(const uint8_t* p) {  // 2-byte aligned 32-bit load
  const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
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
    // ggml's get_scale_min_k4 without branches: with jj = j % 4 and b_i = byte jj of scale word i,
    // j < 4: (b0 & 63, b1 & 63); j >= 4: ((b2 & 15) | (b0 >> 6) << 4, (b2 >> 4) | (b1 >> 6) << 4).
    const int sh = 8 * (j & 3);
    const int b0 = (hdr.y >> sh) & 0xff, b1 = (hdr.z >> sh) & 0xff, b2 = (hdr.w >> sh) & 0xff;
    const int sc = j < 4 ? b0 & 63 : (b2 & 15) | ((b0 >> 6) << 4);
    const int m = j < 4 ? b1 & 63 : (b2 >> 4) | ((b1 >> 6) << 4);
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

/** One 32-element chunk of a quantized activation row: both int8 terms, the scale and the sum. */
struct XChunk {
  int4 a, b, c, e;  // q1[0..15], q1[16..31], q2[0..15], q2[16..31]
  float d, s;
};

__device__ __forceinline__ XChunk load_x_chunk(const int8_t* q1, const int8_t* q2, const float* xd, const float* xs,
                                               int64_t qo, int64_t xi) {
  XChunk x;
  x.a = reinterpret_cast<const int4*>(q1 + qo)[0], x.b = reinterpret_cast<const int4*>(q1 + qo)[1];
  x.c = reinterpret_cast<const int4*>(q2 + qo)[0], x.e = reinterpret_cast<const int4*>(q2 + qo)[1];
  x.d = xd[xi], x.s = xs[xi];
  return x;
}

/** sum_i weight_i * x_i for one chunk, x = xd * (q1 + q2 / 254), xs = sum(x) as quantized. Every
 *  unpacked weight byte is a small signed value (Q4_K nibbles 0..15 included): signed dp4a. */
__device__ __forceinline__ float chunk_dot(const WChunk& w, const XChunk& x) {
  int lo = __dp4a(w.q[0], x.a.x, 0), hi = __dp4a(w.q[4], x.b.x, 0);
  lo = __dp4a(w.q[1], x.a.y, lo), lo = __dp4a(w.q[2], x.a.z, lo), lo = __dp4a(w.q[3], x.a.w, lo);
  hi = __dp4a(w.q[5], x.b.y, hi), hi = __dp4a(w.q[6], x.b.z, hi), hi = __dp4a(w.q[7], x.b.w, hi);
  int lo2 = __dp4a(w.q[0], x.c.x, 0), hi2 = __dp4a(w.q[4], x.e.x, 0);
  lo2 = __dp4a(w.q[1], x.c.y, lo2), lo2 = __dp4a(w.q[2], x.c.z, lo2), lo2 = __dp4a(w.q[3], x.c.w, lo2);
  hi2 = __dp4a(w.q[5], x.e.y, hi2), hi2 = __dp4a(w.q[6], x.e.z, hi2), hi2 = __dp4a(w.q[7], x.e.w, hi2);
  constexpr float kInv = 1.0f / 254.0f;
  return x.d * (w.s0 * fmaf(static_cast<float>(lo2), kInv, static_cast<float>(lo)) +
                w.s1 * fmaf(static_cast<float>(hi2), kInv, static_cast<float>(hi))) -
         w.m * x.s;
}

/** Two-term int8 quantization per 32-element chunk (quantize_q8_lane, q8_act.cuh), one warp per chunk,
 *  into the Q8Layout(rows, K) at q8. */
__global__ void quantize_q8_kernel(const void* x, bool x_f32, int64_t ldx, int64_t rows, int64_t K, int8_t* q8) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = K / 32, total = rows * nb;
  const Q8Layout lay(rows, K);
  pdl_enter();
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; i < total;
       i += (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5) {
    const int64_t r = i / nb, b = i % nb, off = r * ldx + b * 32 + lane;
    const float v = x_f32 ? static_cast<const float*>(x)[off] : __bfloat162float(static_cast<const bf16*>(x)[off]);
    quantize_q8_lane(v, q8, lay, r * K + b * 32 + lane, i);
  }
}

/** The quantized activations of a launch, as quantize_q8_kernel wrote them into GemvArgs::q8. */
struct Q8View {
  const int8_t* q1;
  const int8_t* q2;
  const float* xd;
  const float* xs;
  uint32_t x_div;  // 32-bit divisions (problems < 2^31): a 64-bit one is a ~70-instruction routine
  __device__ Q8View(const GemvArgs& a, int64_t n_problems) : x_div(static_cast<uint32_t>(a.x_div)) {
    const int64_t rows = a.table ? (static_cast<uint32_t>(n_problems) + x_div - 1) / x_div : a.T;
    const Q8Layout lay(rows, a.K);
    q1 = static_cast<const int8_t*>(a.q8), q2 = q1 + lay.q2;
    xd = reinterpret_cast<const float*>(q1 + lay.xd), xs = reinterpret_cast<const float*>(q1 + lay.xs);
  }
  __device__ XChunk chunk(int64_t row, int64_t c, int64_t K) const {
    return load_x_chunk(q1, q2, xd, xs, row * K + c * 32, row * (K / 32) + c);
  }
};

constexpr int kWarpsQ8 = kGemvWarps;  // warps per block: kWarpsQ8 / ks output rows

// Minimum resident blocks per SM for __launch_bounds__ (register caps: 65,536 / (128 * blocks)).
// Occupancy bounds these GEMVs, a wave of short-lived blocks each lane of which issues one round of
// loads: the lane-group kernels at <= 64 registers (8 blocks; 64-78 uncapped) and the dense one-token
// 4-row kernel at <= 80 (6 blocks; 88 uncapped), each with a few bytes spilled. H200, q4_k
// qwen3-30b-a3b decode, one lease, two runs each: batch 1 363.1 / 368.2 -> 378.7 / 379.2 tok/s, batch 8
// 761.1 / 766.4 -> 795.0 / 793.5 (the lane-group cap alone: 372.0 / 377.9 and 776.7 / 786.0; the dense
// kernel at <= 64 registers spills 152 bytes).
constexpr int kLanesMinBlocks = 8;
constexpr int q8_min_blocks(int maxt, bool glu, int r) { return maxt == 1 && !glu && r == 4 ? 6 : 0; }

/** R output rows per warp (R > 1 only for one token per problem): every row's chunk loads are
 *  issued together and the activation chunk is loaded once for all of them, so each warp keeps R
 *  times the bytes in flight for the same fixed cost (expert-table lookup, reduction, store). */
template <DType WT, int MAXT, bool GLU, int R>
__global__ void __launch_bounds__(kWarpsQ8 * 32, q8_min_blocks(MAXT, GLU, R)) gemv_q8_kernel(GemvArgs a, int64_t n_problems, int ks_log2) {
  static_assert(R == 1 || MAXT == 1, "several rows per warp only for one token");
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ks = 1 << ks_log2;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * (kWarpsQ8 >> ks_log2) + (warp >> ks_log2)) * R;
  gemv_enter(a);
  const bool valid = n0 < a.N;
  if (ks == 1 && !valid) return;  // no block barrier in the epilogue when ks == 1
  const int64_t c0 = lane + 32 * (warp & (ks - 1)), cstep = 32 * ks;
  const Q8View xv(a, n_problems);
  const int64_t K = a.K, nb = K / 32;
  for (int64_t p = blockIdx.y; p < n_problems; p += gridDim.y) {
    const uint8_t* wa;
    const uint8_t* wb = nullptr;
    int64_t xrow, yrow;
    int nt;
    if (a.table) {
      if (!expert_weights<GLU>(a, p, wa, wb)) continue;  // block-uniform: every warp of the block has this p
      xrow = static_cast<uint32_t>(p) / xv.x_div, yrow = p, nt = 1;
    } else {
      wa = a.w, xrow = yrow = p * MAXT;
      nt = static_cast<int>(min(static_cast<int64_t>(MAXT), a.T - yrow));
    }
    const uint8_t* ra[R];
    const uint8_t* rb[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {  // rows past N read row N - 1 and store nothing
      const int64_t n = min(n0 + r, a.N - 1);
      ra[r] = wa + n * a.row_bytes;
      rb[r] = GLU ? wb + n * a.row_bytes : nullptr;
    }
    float acc[R][MAXT], accb[R][GLU ? MAXT : 1];
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
      for (int t = 0; t < MAXT; ++t) acc[r][t] = 0.0f;
#pragma unroll
      for (int t = 0; t < (GLU ? MAXT : 1); ++t) accb[r][t] = 0.0f;
    }
#pragma unroll 2
    for (int64_t c = c0; valid && c < nb; c += cstep) {
      WChunk w[R], w2[GLU ? R : 1];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        Unpack<WT>::load(ra[r], c, w[r]);
        if constexpr (GLU) Unpack<WT>::load(rb[r], c, w2[r]);
      }
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        if (t < nt) {
          const XChunk x = xv.chunk(xrow + t, c, K);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            acc[r][t] += chunk_dot(w[r], x);
            if constexpr (GLU) accb[r][t] += chunk_dot(w2[r], x);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
      gemv_epilogue<MAXT, GLU>(a, acc[r], accb[r], nt, yrow, n0 + r, n0 + r < a.N, ks_log2, warp, lane);
  }
}

/** What a lane-group launch writes (gemv_q8_lanes_kernel):
 *  - kY: y, as every GEMV mode does (kWarpsQ8 warps a block);
 *  - kQ8: for a GLU pair, y's int8 form instead of y (GemvArgs::q8_out): a block holds 32 rows (one
 *    q8 chunk) of one problem, L warps of 32 / L rows;
 *  - kCombine: for the down GEMV, the weighted sum over each token's k slots (GemvArgs::combine_*):
 *    a block holds k warps, warp j slot j of token blockIdx.y, for the same 32 / L rows. */
enum class LanesOut { kY, kQ8, kCombine };

constexpr int lanes_max_threads(LanesOut o) { return o == LanesOut::kY ? kWarpsQ8 * 32 : 512; }
// Every mode keeps 1,024 threads a SM at <= 64 registers (kLanesMinBlocks blocks of 128).
constexpr int lanes_min_blocks(LanesOut o) { return kLanesMinBlocks * kWarpsQ8 * 32 / lanes_max_threads(o); }

/** One token per problem, short rows (up to 64 chunks: K <= 2048): L lanes per output row, 32 / L rows
 *  per warp, each lane taking every L-th chunk of its row. Compared with a whole warp per row, a
 *  lane keeps nb / L chunks in flight instead of one or two, the reduction is log2(L) shuffles, and
 *  registers stay at one chunk per matrix (so occupancy stays high). Every mode (LanesOut) computes
 *  a row's dot products with the same chunks in the same order, so their bits agree. */
template <DType WT, bool GLU, int L, LanesOut OUT>
__global__ void __launch_bounds__(lanes_max_threads(OUT), lanes_min_blocks(OUT))
    gemv_q8_lanes_kernel(GemvArgs a, int64_t n_problems) {
  static_assert(OUT != LanesOut::kQ8 || GLU, "the int8 output is for the GLU pair");
  static_assert(OUT != LanesOut::kCombine || !GLU, "the combine is for the down GEMV");
  constexpr int kRows = 32 / L;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, li = lane & (L - 1);
  const int64_t row_block = OUT == LanesOut::kY ? static_cast<int64_t>(blockIdx.x) * kWarpsQ8 + warp
                            : OUT == LanesOut::kQ8 ? static_cast<int64_t>(blockIdx.x) * L + warp
                                                   : static_cast<int64_t>(blockIdx.x);
  const int64_t n = row_block * kRows + lane / L;
  const int64_t K = a.K, nb = K / 32;
  // Problem of this warp's first round: blockIdx.y, or slot `warp` of token blockIdx.y (kCombine).
  const int64_t p_first = OUT == LanesOut::kCombine ? static_cast<int64_t>(blockIdx.y) * a.combine_k + warp
                                                    : static_cast<int64_t>(blockIdx.y);
  const int64_t p_step = OUT == LanesOut::kCombine ? n_problems : gridDim.y;
  // GemvArgs::ids_before: the first problem's first kPre chunks of the row are unpacked before the PDL wait.
  constexpr int kPre = GLU ? 1 : 2;
  WChunk wpre[kPre];
  bool pre = false;
  if constexpr (!GLU) {
    const uint8_t* w0;
    const uint8_t* w1 = nullptr;
    if (a.ids_before && a.table && p_first < n_problems && expert_weights<false>(a, p_first, w0, w1)) {
      pre = true;
#pragma unroll
      for (int i = 0; i < kPre; ++i)
        if (li + i * L < nb) Unpack<WT>::load(w0 + min(n, a.N - 1) * a.row_bytes, li + i * L, wpre[i]);
    }
  }
  gemv_enter(a);
  const bool valid = n < a.N;  // rows past N compute row N - 1 and store nothing (the shuffles need every lane)
  const Q8View xv(a, n_problems);
  for (int64_t p = p_first; p < n_problems; p += p_step) {
    const uint8_t* wa;
    const uint8_t* wb = nullptr;
    int64_t xrow;
    bool used = true;
    if (a.table) {
      used = expert_weights<GLU>(a, p, wa, wb);
      xrow = static_cast<uint32_t>(p) / xv.x_div;
    } else {
      wa = a.w, xrow = p;
    }
    // kY and kQ8: p is the block's, so a skipped problem skips the whole block's round. kCombine's
    // warps hold different slots and meet at the block barrier below.
    if (OUT != LanesOut::kCombine && !used) continue;
    float acc = 0.0f, accb = 0.0f;
    if (used) {
      const int64_t nr = min(n, a.N - 1);
      const uint8_t* ra = wa + nr * a.row_bytes;
      const uint8_t* rb = GLU ? wb + nr * a.row_bytes : nullptr;
      int64_t cfirst = li;
      if constexpr (!GLU) {
        if (pre && p == p_first) {  // the same chunks, in the same order, from the registers
#pragma unroll
          for (int i = 0; i < kPre; ++i)
            if (li + i * L < nb) acc += chunk_dot(wpre[i], xv.chunk(xrow, li + i * L, K));
          cfirst = li + kPre * L;
        }
      }
#pragma unroll 4
      for (int64_t c = cfirst; c < nb; c += L) {
        WChunk w, w2;
        Unpack<WT>::load(ra, c, w);
        if constexpr (GLU) Unpack<WT>::load(rb, c, w2);
        const XChunk x = xv.chunk(xrow, c, K);
        acc += chunk_dot(w, x);
        if constexpr (GLU) accb += chunk_dot(w2, x);
      }
#pragma unroll
      for (int o = L / 2; o > 0; o >>= 1) {
        acc += __shfl_xor_sync(0xffffffffu, acc, o);
        if constexpr (GLU) accb += __shfl_xor_sync(0xffffffffu, accb, o);
      }
    }
    if constexpr (OUT == LanesOut::kY) {
      if (li == 0 && valid) gemv_store<GLU>(a, acc, accb, p, n);
    } else if constexpr (OUT == LanesOut::kQ8) {
      // y's row chunk as gemv_store would store it (rounded to y's dtype), then quantized as
      // quantize_q8_kernel would quantize it from there: the same bytes, one launch fewer.
      __shared__ float hs[32];
      if (li == 0) {
        float g = acc, u = accb;
        add_expert_bias<true>(a, p, n, g, u);  // n < N: N % 32 == 0 here
        const float v = expert_glu(a.glu_kind, a.glu_alpha, a.glu_limit, g, u);
        hs[n & 31] = a.y_f32 ? v : __bfloat162float(__float2bfloat16_rn(v));
      }
      __syncthreads();
      if (warp == 0)
        quantize_q8_lane(hs[lane], static_cast<int8_t*>(a.q8_out), Q8Layout(n_problems, a.N), p * a.N + (n & ~int64_t{31}) + lane,
                         p * (a.N / 32) + n / 32);
      __syncthreads();  // hs is free for the next problem
    } else {
      // The combine's sum (moe_experts.cu, moe_combine_kernel) for the block's rows: slots in order.
      __shared__ float red[kCombineMaxSlots * kRows];  // [slot][row]
      if (li == 0) {  // the expert's down_bias first: y = dot + b, as the kY store
        if (used && valid) add_expert_bias<false>(a, p, n, acc, acc);
        red[warp * kRows + lane / L] = acc;
      }
      __syncthreads();
      gemv_combine_store(a, red, kRows, blockIdx.y, row_block * kRows);
      return;  // one round: p_step covers every problem
    }
  }
}

template <DType WT, int L>
void launch_q8_lanes(bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const unsigned gy = static_cast<unsigned>(n_problems < 65535 ? n_problems : 65535);
  if (a.q8_out) {
    FT_CHECK(glu && a.N % 32 == 0);
    launch_pdl(gemv_q8_lanes_kernel<WT, true, L, LanesOut::kQ8>, dim3(static_cast<unsigned>(a.N / 32), gy), L * 32, 0, s,
               a, n_problems);
  } else if (a.combine_weights) {
    FT_CHECK(!glu && a.combine_k >= 1 && a.combine_k <= kCombineMaxSlots && n_problems % a.combine_k == 0);
    constexpr int64_t kRows = 32 / L;
    const dim3 grid(static_cast<unsigned>((a.N + kRows - 1) / kRows), static_cast<unsigned>(n_problems / a.combine_k));
    launch_pdl(gemv_q8_lanes_kernel<WT, false, L, LanesOut::kCombine>, grid, a.combine_k * 32, 0, s, a, n_problems);
  } else {
    const int64_t rows_per_block = kWarpsQ8 * (32 / L);
    const dim3 grid(static_cast<unsigned>((a.N + rows_per_block - 1) / rows_per_block), gy);
    if (glu) launch_pdl(gemv_q8_lanes_kernel<WT, true, L, LanesOut::kY>, grid, kWarpsQ8 * 32, 0, s, a, n_problems);
    else launch_pdl(gemv_q8_lanes_kernel<WT, false, L, LanesOut::kY>, grid, kWarpsQ8 * 32, 0, s, a, n_problems);
  }
}

/** Rows per warp: 4 for one token per problem and a matrix of at least 4096 rows (not a function of
 *  the problem count: see gemv_warps_per_row). */
int q8_rows_per_warp(int maxt, int64_t N) { return maxt == 1 && N >= 4096 ? 4 : 1; }

template <DType WT, int R>
void launch_q8_r(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const int64_t row_groups = (a.N + R - 1) / R;
  const int ks = gemv_warps_per_row(row_groups, a.K / 32, 1);
  const int per_block = kWarpsQ8 / ks;
  const dim3 grid(static_cast<unsigned>((row_groups + per_block - 1) / per_block),
                  static_cast<unsigned>(n_problems < 65535 ? n_problems : 65535));
  const int lg = gemv_log2(ks);
  if (glu) launch_pdl(gemv_q8_kernel<WT, 1, true, R>, grid, kWarpsQ8 * 32, 0, s, a, n_problems, lg);
  else if (maxt == 1) launch_pdl(gemv_q8_kernel<WT, 1, false, R>, grid, kWarpsQ8 * 32, 0, s, a, n_problems, lg);
  else if constexpr (R == 1) launch_pdl(gemv_q8_kernel<WT, 8, false, 1>, grid, kWarpsQ8 * 32, 0, s, a, n_problems, lg);
  else FT_CHECK(false && "gemv_q8: several rows per warp only for one token");
}

template <DType WT>
void launch_q8_t(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const int64_t nb = a.K / 32;
  // Expert GEMVs (one token per problem, short rows): lane groups. Measured on the H200 (qwen3-30b-a3b,
  // batch-1 decode): gate/up 13.3 -> 8.9 us, down 9.7 -> 8.2 us; dense rows (q/k/v, LM head) stay on
  // 4 rows per warp, which measured faster for them (6.3 vs 6.6 us, 86 vs 95 us).
  if (maxt == 1 && a.table && gemv_q8_lanes_serves(WT, a.N, a.K)) {
    if (nb > 32) return launch_q8_lanes<WT, 16>(glu, a, n_problems, s);
    return launch_q8_lanes<WT, 8>(glu, a, n_problems, s);
  }
  FT_CHECK(!a.q8_out && !a.combine_weights);  // lane-group outputs only
  if (q8_rows_per_warp(maxt, a.N) == 4) return launch_q8_r<WT, 4>(maxt, glu, a, n_problems, s);
  launch_q8_r<WT, 1>(maxt, glu, a, n_problems, s);
}

}  // namespace

bool gemv_q8_supports(DType wt) {
  return wt == DType::Q4_0 || wt == DType::Q8_0 || wt == DType::Q4_K || wt == DType::Q6_K;
}

bool gemv_q8_lanes_serves(DType wt, int64_t N, int64_t K) {
  return gemv_q8_supports(wt) && K % 32 == 0 && K / 32 <= 64 && N >= 256;
}

int64_t gemv_q8_scratch_bytes(int64_t rows, int64_t K) { return Q8Layout::bytes(rows, K); }

void launch_gemv_q8(DType wt, int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  FT_CHECK(a.q8 != nullptr && a.K % 32 == 0);
  const int64_t rows = a.table ? (n_problems + a.x_div - 1) / a.x_div : a.T, K = a.K;
  if (!a.q8_ready)
    launch_pdl(quantize_q8_kernel, grid_1d(rows * (K / 32) * 32, 256), 256, 0, s, a.x, a.x_f32, a.ldx, rows, K,
               static_cast<int8_t*>(a.q8));
  switch (wt) {
    case DType::Q4_0: return launch_q8_t<DType::Q4_0>(maxt, glu, a, n_problems, s);
    case DType::Q8_0: return launch_q8_t<DType::Q8_0>(maxt, glu, a, n_problems, s);
    case DType::Q4_K: return launch_q8_t<DType::Q4_K>(maxt, glu, a, n_problems, s);
    case DType::Q6_K: return launch_q8_t<DType::Q6_K>(maxt, glu, a, n_problems, s);
    default: FT_CHECK(false && "gemv_q8: unsupported weight type");
  }
}

}  // namespace ft::cuda
