// attention_mla's tensor-core kernel (launched by CudaOps::attention_mla, attention_mla.cu; the
// contract and the split plan are there). BF16 mma.sync m16n8k16 with fp32 accumulation (PTX ISA
// fragment layouts, mma.cuh), FlashAttention-2's online softmax (Dao, 2023) in base 2.
//
// A block has RT row tiles of 16 query rows (token, head), 4 warps each. Per tile of kMlaTile = 32
// keys, copied from the pages into shared memory as bf16 [c | r] rows (cp.async, double-buffered, for
// BF16 pages; loaded and rounded for F32 pages, and for quantized pages as code * scale, only when
// MlaTuning::tc asks for this kernel: attention_mla.cu sends quantized pages to the CUDA-core kernel):
//  - S [16 x 32] = Q [16 x (R + P)] K^T: warp w of a row tile scores keys 8w .. 8w + 7 (one n-tile);
//  - the row maxima of the 4 warps meet in shared memory (a named barrier per row tile), every warp
//    rescales with the same running max, writes its P = exp2(S - m) slice as bf16 to shared memory;
//  - O [16 x R] += P [16 x 32] C [32 x R]: warp w accumulates dims w R / 4 .. (w + 1) R / 4 (NT n-tiles
//    of 8) in registers; C's B fragments come from the same tile, transposed by ldmatrix.
// The latent rows are read from memory once per block for all its 16 RT heads. Q (pre-scaled by
// scale * log2 e) stays in shared memory as bf16. The sums l of the 4 warps add up at the end.
// Precision: q, c, r and p rounded to bf16 (~3e-3 relative), sums in fp32.
// Bytes moved: per block, its keys' c and r once; q and out (or partials) once.
#include <cstdint>

#include "backend/cuda/attention_mla.cuh"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_opt_in.h"

namespace ft::cuda {
namespace {

constexpr int kPS = kMlaTile + 8;  // p_s row stride (bf16): 80 bytes, conflict-free ldmatrix rows
constexpr int kMaxQkTc = 640;      // R + P bound of this kernel (shared memory at 4 row tiles)

/** Barrier of the 4 warps (128 threads) of row tile `tile` (ids 1..4; 0 is __syncthreads). */
__device__ __forceinline__ void bar_tile(int tile) { asm volatile("bar.sync %0, 128;\n" ::"r"(1 + tile) : "memory"); }

__host__ __device__ constexpr int tc_dq(int R, int P) { return (R + P + 15) / 16 * 16; }
/** Dynamic shared memory (bytes) of the kernel for R + P and RT row tiles. */
__host__ __device__ constexpr int tc_smem_bytes(int R, int P, int RT) {
  return (16 * RT * (tc_dq(R, P) + 8) + 2 * kMlaTile * (tc_dq(R, P) + 8) + 16 * RT * kPS) * 2 + 16 * RT * 4 * 4;
}

/** Dims d .. d + 7 of the [c | r] key row at page row kr from quantized pages (a.kv_form kKvFp8 or
 *  kKvQ8): code * scale as the CPU's (rounded to bf16 by the caller). R and P are multiples of 8. */
__device__ __forceinline__ void load_quant8(const MlaArgs& a, int64_t kr, int d, float* v) {
  const int R = a.R;
  if (a.kv_form == kKvFp8) {
    if (d < R) load_kv_quant<kKvFp8, 8>(a.c, a.c_scale, kr, R, a.c_sph, d, v);
    else load_kv_quant<kKvFp8, 8>(a.r, a.r_scale, kr, a.P, a.r_sph, d - R, v);
  } else {
    if (d < R) load_kv_quant<kKvQ8, 8>(a.c, a.c_scale, kr, R, a.c_sph, d, v);
    else load_kv_quant<kKvQ8, 8>(a.r, a.r_scale, kr, a.P, a.r_sph, d - R, v);
  }
}

template <int NT, int RT>  // NT = R / 32: n-tiles of 8 output dims per warp; RT row tiles of 16 rows
__global__ void __launch_bounds__(RT * 128) mla_tc_kernel(MlaArgs a) {
  constexpr int kRows = 16 * RT, kThreads = 128 * RT, R = NT * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int P = a.P, DQ = tc_dq(R, P), QS = DQ + 8;  // QS: an odd multiple of 16 bytes
  bf16* q_s = reinterpret_cast<bf16*>(smem_raw);            // [kRows][QS], pre-scaled, zero-padded
  bf16* kv_s = q_s + kRows * QS;                             // [2][kMlaTile][QS]: [c | r | 0] rows
  bf16* p_s = kv_s + 2 * kMlaTile * QS;                      // [kRows][kPS]
  float* red = reinterpret_cast<float*>(p_s + kRows * kPS);  // [kRows][4]: per-warp row maxima, then sums
  __shared__ int row_t[kRows], row_h[kRows], row_seq[kRows], row_pos[kRows];
  __shared__ int64_t key_row[2][kMlaTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
  const int rt = warp >> 2, w4 = warp & 3;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * a.nt;
  const int hchunk = blockIdx.y, split = blockIdx.z;
  pdl_enter();  // q was written by the kernel before, the pages by kv_write
  for (int r = threadIdx.x; r < kRows; r += kThreads) mla_row(a, r, t0, hchunk, row_t[r], row_h[r], row_seq[r], row_pos[r]);
  __syncthreads();
  int max_pos = -1;
  for (int r = 0; r < kRows; ++r) max_pos = max(max_pos, row_pos[r]);
  const int64_t per = mla_piece(a, max_pos);  // per_token: nt == 1, every valid row has the token's position
  const int64_t split_lo = split * per, split_hi = split_lo + per;
  if (split_lo > max_pos && split > 0) return;  // no row has keys here (the merge skips it too)

  const int cq = DQ / 8;  // 16-byte chunks (8 bf16) per row
  // The block's query rows into q_s (bf16, pre-scaled, zero-padded); called once, after the first key
  // tile's copy is under way, so the two overlap.
  auto load_q = [&] {
    for (int c = threadIdx.x; c < kRows * cq; c += kThreads) {
      const int r = c / cq, d = (c - r * cq) * 8;
      float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      if (row_t[r] >= 0 && d < R + P) {
        const int64_t qr = static_cast<int64_t>(row_t[r]) * a.H + row_h[r];
        if (d < R) load_x_any<8>(a.q_lat, a.q_f32, qr * R + d, v);
        else load_x_any<8>(a.q_rope, a.q_f32, qr * P + d - R, v);
      }
      const float s = a.scale_log2;
      *reinterpret_cast<uint4*>(q_s + r * QS + d) = make_uint4(pack_bf16(s * v[0], s * v[1]), pack_bf16(s * v[2], s * v[3]),
                                                               pack_bf16(s * v[4], s * v[5]), pack_bf16(s * v[6], s * v[7]));
    }
  };
  // Page rows of a tile's keys (threads < 32) for buffer b, and the tile's copy into buffer b.
  auto tile_rows = [&](int b, int64_t j0, int64_t kend, const int32_t* table) {
    if (threadIdx.x < kMlaTile) {
      const int64_t j = j0 + threadIdx.x;
      key_row[b][threadIdx.x] = j < kend ? mla_page_row(a, table, j) : -1;
    }
  };
  auto issue = [&](int b) {
    bf16* dst = kv_s + b * kMlaTile * QS;
    for (int c = threadIdx.x; c < kMlaTile * cq; c += kThreads) {
      const int key = c / cq, d = (c - key * cq) * 8;
      const int64_t kr = key_row[b][key];
      const bool ok = kr >= 0 && d < R + P;
      const int64_t off = d < R ? kr * R + d : kr * P + d - R;
      if (!a.kv_f32) {
        const bf16* src = ok ? static_cast<const bf16*>(d < R ? a.c : a.r) + off : static_cast<const bf16*>(a.c);
        cp_async_16(dst + key * QS + d, src, ok ? 16 : 0);
      } else {
        float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (ok) {
          if (a.kv_form == kKvFloat) load_x<8>(static_cast<const float*>(d < R ? a.c : a.r) + off, v);
          else load_quant8(a, kr, d, v);
        }
        *reinterpret_cast<uint4*>(dst + key * QS + d) = make_uint4(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]),
                                                                   pack_bf16(v[4], v[5]), pack_bf16(v[6], v[7]));
      }
    }
    cp_async_commit();
  };

  const int r0 = rt * 16 + gid, r1 = r0 + 8;  // this thread's fragment rows
  float o[NT][4];
#pragma unroll
  for (int n = 0; n < NT; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  bool q_loaded = false;

  for (int run_begin = 0; run_begin < kRows;) {  // runs of rows of one sequence
    const int seq = row_seq[run_begin];
    int run_end = run_begin + 1;
    while (run_end < kRows && row_seq[run_end] == seq) ++run_end;
    if (seq < 0) {
      run_begin = run_end;
      continue;
    }
    int64_t hi = -1;
    for (int r = run_begin; r < run_end; ++r) hi = max(hi, static_cast<int64_t>(row_pos[r]));
    const int64_t kbeg = split_lo, kend = min(hi + 1, split_hi);
    const int n_tiles = kend > kbeg ? static_cast<int>((kend - kbeg + kMlaTile - 1) / kMlaTile) : 0;
    const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
    const bool in0 = r0 >= run_begin && r0 < run_end, in1 = r1 >= run_begin && r1 < run_end;
    const int64_t p0 = row_pos[r0], p1 = row_pos[r1];
    if (n_tiles > 0) {
      tile_rows(0, kbeg, kend, table);
      if (n_tiles > 1) tile_rows(1, kbeg + kMlaTile, kend, table);
      __syncthreads();
      issue(0);
      if (!q_loaded) load_q(), q_loaded = true;  // visible after the barrier that follows the tile's wait
    }
    for (int i = 0; i < n_tiles; ++i) {
      const int b = i & 1;
      const int64_t j0 = kbeg + static_cast<int64_t>(i) * kMlaTile;
      if (i + 1 < n_tiles) {
        issue(b ^ 1);  // the next tile's copy overlaps this tile's products
        cp_async_wait<1>();
      } else {
        cp_async_wait<0>();
      }
      __syncthreads();  // tile i is in buffer b for every thread; key_row[b] is no longer read
      if (i + 2 < n_tiles) tile_rows(b, j0 + 2 * kMlaTile, kend, table);
      const bf16* kv = kv_s + b * kMlaTile * QS;
      // S = Q K^T for this warp's 8 keys (base-2 logits).
      // Two accumulator chains (even and odd k-steps): half the dependent mma latency.
      float s4[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s4b[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const bf16* qrow = q_s + (rt * 16 + (lane & 15)) * QS + (lane >> 4) * 8;
      const bf16* krow = kv + (w4 * 8 + gid) * QS + tig * 2;
      const int ksteps = DQ / 16;
      int kk = 0;
#pragma unroll 2
      for (; kk + 1 < ksteps; kk += 2) {
        uint32_t af[4], ag[4];
        ldmatrix_x4(af, qrow + kk * 16);
        ldmatrix_x4(ag, qrow + kk * 16 + 16);
        mma_bf16_16816(s4, af, *reinterpret_cast<const uint32_t*>(krow + kk * 16),
                       *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 8));
        mma_bf16_16816(s4b, ag, *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 16),
                       *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 24));
      }
      if (kk < ksteps) {
        uint32_t af[4];
        ldmatrix_x4(af, qrow + kk * 16);
        mma_bf16_16816(s4, af, *reinterpret_cast<const uint32_t*>(krow + kk * 16),
                       *reinterpret_cast<const uint32_t*>(krow + kk * 16 + 8));
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) s4[e] += s4b[e];
      const int64_t jb = j0 + w4 * 8 + tig * 2;
      const bool v00 = in0 && jb < kend && jb <= p0, v01 = in0 && jb + 1 < kend && jb + 1 <= p0;
      const bool v10 = in1 && jb < kend && jb <= p1, v11 = in1 && jb + 1 < kend && jb + 1 <= p1;
      float mx0 = fmaxf(v00 ? s4[0] : -INFINITY, v01 ? s4[1] : -INFINITY);
      float mx1 = fmaxf(v10 ? s4[2] : -INFINITY, v11 ? s4[3] : -INFINITY);
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      if (tig == 0) red[r0 * 4 + w4] = mx0, red[r1 * 4 + w4] = mx1;
      bar_tile(rt);
      const float4 a0 = *reinterpret_cast<const float4*>(red + r0 * 4), a1 = *reinterpret_cast<const float4*>(red + r1 * 4);
      const float mn0 = fmaxf(m0, fmaxf(fmaxf(a0.x, a0.y), fmaxf(a0.z, a0.w)));
      const float mn1 = fmaxf(m1, fmaxf(fmaxf(a1.x, a1.y), fmaxf(a1.z, a1.w)));
      const float al0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), al1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
      m0 = mn0, m1 = mn1;
      const float e0 = v00 ? exp2f(s4[0] - mn0) : 0.0f, e1 = v01 ? exp2f(s4[1] - mn0) : 0.0f;
      const float e2 = v10 ? exp2f(s4[2] - mn1) : 0.0f, e3 = v11 ? exp2f(s4[3] - mn1) : 0.0f;
      l0 = l0 * al0 + (e0 + e1);
      l1 = l1 * al1 + (e2 + e3);
      *reinterpret_cast<uint32_t*>(p_s + r0 * kPS + w4 * 8 + tig * 2) = pack_bf16(e0, e1);
      *reinterpret_cast<uint32_t*>(p_s + r1 * kPS + w4 * 8 + tig * 2) = pack_bf16(e2, e3);
#pragma unroll
      for (int n = 0; n < NT; ++n) o[n][0] *= al0, o[n][1] *= al0, o[n][2] *= al1, o[n][3] *= al1;
      bar_tile(rt);
      // O += P C for this warp's dims.
      const bf16* prow = p_s + (rt * 16 + (lane & 15)) * kPS + (lane >> 4) * 8;
#pragma unroll
      for (int kk = 0; kk < kMlaTile / 16; ++kk) {
        uint32_t pa[4];
        ldmatrix_x4(pa, prow + kk * 16);
        const bf16* vrow = kv + (kk * 16 + (lane & 15)) * QS + w4 * (NT * 8);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          uint32_t b0, b1;
          ldmatrix_x2_trans(b0, b1, vrow + n * 8);
          mma_bf16_16816(o[n], pa, b0, b1);
        }
      }
      __syncthreads();  // buffer b, red and p_s are rewritten next
    }
    run_begin = run_end;
  }

  // Row sums: the 4 lanes of a row, then the 4 warps of its tile (fixed order).
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  if (tig == 0) red[r0 * 4 + w4] = l0, red[r1 * 4 + w4] = l1;
  __syncthreads();
  const float4 s0 = *reinterpret_cast<const float4*>(red + r0 * 4), s1 = *reinterpret_cast<const float4*>(red + r1 * 4);
  const float L[2] = {(s0.x + s0.y) + (s0.z + s0.w), (s1.x + s1.y) + (s1.z + s1.w)};
  const float M[2] = {m0, m1};
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    const int r = rr ? r1 : r0;
    if (row_t[r] < 0) continue;
    const int64_t qrow = static_cast<int64_t>(row_t[r]) * a.H + row_h[r];
    const int n_row = a.n_split == 1 ? 1 : mla_active(a, row_pos[r], per);  // pieces of this row's range
    if (split >= n_row) continue;  // none of its keys here (an invalid row's zeros: the merge writes them)
    if (n_row == 1) {  // the whole range in this block (invalid rows without splits: zeros)
      const float inv = L[rr] > 0.0f ? 1.0f / L[rr] : 0.0f;
#pragma unroll
      for (int n = 0; n < NT; ++n) {
        const int64_t i = qrow * R + w4 * (NT * 8) + n * 8 + tig * 2;
        const float x = o[n][2 * rr] * inv, y = o[n][2 * rr + 1] * inv;
        if (a.out_f32) *reinterpret_cast<float2*>(static_cast<float*>(a.out) + i) = make_float2(x, y);
        else *reinterpret_cast<uint32_t*>(static_cast<bf16*>(a.out) + i) = pack_bf16(x, y);
      }
    } else {
      float* pp = a.part + (static_cast<int64_t>(split) * a.T * a.H + qrow) * (R + 4);
      if (w4 == 0 && tig == 0) pp[0] = M[rr], pp[1] = L[rr];
#pragma unroll
      for (int n = 0; n < NT; ++n)
        *reinterpret_cast<float2*>(pp + 4 + w4 * (NT * 8) + n * 8 + tig * 2) = make_float2(o[n][2 * rr], o[n][2 * rr + 1]);
    }
  }
}

template <int NT, int RT>
void launch(const MlaArgs& a, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.T + a.nt - 1) / a.nt), static_cast<unsigned>(a.n_hchunks),
                  static_cast<unsigned>(a.n_split));
  const int smem = tc_smem_bytes(a.R, a.P, RT);
  opt_in_shared_memory(mla_tc_kernel<NT, RT>, smem);
  launch_pdl(mla_tc_kernel<NT, RT>, grid, dim3(RT * 128), static_cast<size_t>(smem), s, a);
}

template <int NT>
void launch_rt(const MlaArgs& a, cudaStream_t s) {
  if (a.rows == 64) return launch<NT, 4>(a, s);
  if (a.rows == 32) return launch<NT, 2>(a, s);
  launch<NT, 1>(a, s);
}

}  // namespace

bool mla_tc_supports(int64_t R, int64_t P) {
  return (R == 32 || R == 64 || R == 128 || R == 256 || R == 512) && P % 8 == 0 && P >= 0 && R + P <= kMaxQkTc;
}

void launch_mla_tc(const MlaArgs& a, cudaStream_t stream) {
  FT_CHECK(a.rows == 16 || a.rows == 32 || a.rows == 64);
  switch (a.R) {
    case 32: return launch_rt<1>(a, stream);
    case 64: return launch_rt<2>(a, stream);
    case 128: return launch_rt<4>(a, stream);
    case 256: return launch_rt<8>(a, stream);
    default: return launch_rt<16>(a, stream);
  }
}

}  // namespace ft::cuda
