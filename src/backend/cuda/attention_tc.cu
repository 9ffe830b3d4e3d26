// Tensor-core attention for long prefill batches (called by CudaOps::attention, attention.cu).
// Same contract as the CUDA-core kernel there: q, out [T, n_head * head_dim] F32 or BF16; paged K/V
// [n_pages, page_size, n_head_kv, head_dim] F32 or BF16, or quantized (--kv-cache-dtype fp8 / q8_0:
// one-byte codes and their scales, dequantized on load exactly as the CPU does, kv_quant.cuh); query t (sequence s, position p) attends to
// s's keys at max(0, p - window + 1) .. p; fp32 online softmax (FlashAttention-2 recurrence: Dao,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
//
// A block has 8 warps; each warp owns 16 tokens x one query head. The block's warps take HW query
// heads of one kv head (HW = 4, 2 or 1, dividing the group) x 8 / HW token tiles, so every key tile
// gathered into shared memory serves 8 warps. Key tiles of 64 (32 for head_dim 256) are read from the pages (16-byte
// loads; quantized pages 4 codes a load, times their scale), rounded to bf16 into row-major K and V tiles (V's B fragments come transposed from
// ldmatrix .trans); S = Q K^T and O += P V are mma.sync
// m16n8k16 bf16 products with fp32 accumulation (PTX ISA fragment layouts), S and O stay in
// registers, P is re-packed from the S accumulators as the next A operand. Tokens of different
// sequences in one block are handled as consecutive runs (rows outside the run are masked).
// Precision: Q, K, V and P rounded to bf16 (~3e-3 relative), sums in fp32.
// Sinks (AttentionParams::sinks): the head's sink logit joins each row's denominator at the end
// (attention_sink.cuh). Keys below the run's lowest window start are never loaded (a key tile that
// starts below it loads zeros there), so KV pages wholly below the window are not read.
// Bytes moved: per block, the K and V of its keys once; q and out once.
#include <cstdint>

#include "backend/cuda/attention_sink.cuh"
#include "backend/cuda/attention_tc.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_quant.cuh"

namespace ft::cuda {
namespace {

constexpr int kWarpsTc = 8, kRowsTc = 16 * kWarpsTc;
constexpr float kLog2e = 1.4426950408889634f;

/** KEYS keys a tile: 64, or 32 for head_dim 256 (the K and V tiles then fit the 48 KB of static
 *  shared memory). KV: the pages' form (kKvFloat: F32 or BF16 as a.kv_f32 says; kKvFp8, kKvQ8). */
template <int D, int KEYS, int KV>
__global__ void __launch_bounds__(kWarpsTc * 32) attention_tc_kernel(AttnTcArgs a, int hw) {
  constexpr int kKeys = KEYS;
  constexpr int KS = D + 8;  // padded row stride (bf16 elements): conflict-free fragment loads
  __shared__ __align__(16) bf16 k_s[kKeys * KS];
  __shared__ __align__(16) bf16 v_s[kKeys * KS];
  __shared__ int64_t key_off[kKeys];
  __shared__ int row_seq[kRowsTc], row_pos[kRowsTc];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;
  const int ts = warp / hw, n_ts = kWarpsTc / hw;
  const int h = blockIdx.y * hw + warp % hw, g = h / (a.H / a.G);
  const int64_t t_block = static_cast<int64_t>(blockIdx.x) * 16 * n_ts;
  const int n_rows = 16 * n_ts;

  for (int r = threadIdx.x; r < n_rows; r += blockDim.x) {
    const int64_t t = t_block + r;
    int s = t < a.T ? a.seq[t] : -1;
    if (s >= a.n_seqs) s = -1;
    row_seq[r] = s;
    row_pos[r] = s >= 0 ? a.pos[t] : -1;
  }
  // Q fragments of this warp's 16 rows, pre-scaled by scale * log2(e) (softmax in base 2).
  const int r0 = ts * 16 + gid, r1 = r0 + 8;
  const int64_t t0 = t_block + r0, t1 = t_block + r1;
  uint32_t qf[D / 16][4];
  const float qs = a.scale * kLog2e;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const int64_t t = e & 2 ? t1 : t0;  // elements 0,1 / 4,5: row gid; 2,3 / 6,7: row gid + 8
      const int d = kk * 16 + tig * 2 + (e & 1) + (e >= 4 ? 8 : 0);
      v[e] = t < a.T ? qs * load_any(a.q, a.q_code, (t * a.H + h) * D + d) : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) qf[kk][i] = pack_bf16(v[2 * i], v[2 * i + 1]);
  }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
  __syncthreads();
  const int seq0 = row_seq[r0], seq1 = row_seq[r1];
  const int64_t p0 = row_pos[r0], p1 = row_pos[r1];

  for (int run_begin = 0; run_begin < n_rows;) {  // runs of rows of one sequence
    const int seq = row_seq[run_begin];
    if (seq < 0) break;  // invalid rows only at the end of the batch
    int run_end = run_begin + 1;
    while (run_end < n_rows && row_seq[run_end] == seq) ++run_end;
    int64_t lo = INT64_MAX, hi = -1;
    for (int r = run_begin; r < run_end; ++r) {
      const int64_t p = row_pos[r];
      lo = min(lo, a.window > 0 ? max(int64_t{0}, p - a.window + 1) : int64_t{0});
      hi = max(hi, p);
    }
    const bool in0 = seq0 == seq, in1 = seq1 == seq;
    const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
    for (int64_t j0 = lo / kKeys * kKeys; j0 <= hi; j0 += kKeys) {
      if (threadIdx.x < kKeys) {
        const int64_t j = j0 + threadIdx.x;
        int64_t off = -1;
        if (j >= lo && j <= hi) {  // keys before lo: masked for every row, and their page may be gone
          const int64_t blk = j / a.page_size;
          const int64_t page = blk < a.max_blocks ? table[blk] : -1;
          if (page >= 0 && page < a.n_pages) {
            off = (page * a.page_size + j % a.page_size) * a.G + g;  // the head row (quantized: its index)
            if constexpr (KV == kKvFloat) off *= D;
          }
        }
        key_off[threadIdx.x] = off;
      }
      __syncthreads();
      for (int c = threadIdx.x; c < kKeys * D / 4; c += blockDim.x) {  // 4 elements per chunk
        const int key = c / (D / 4), d = (c % (D / 4)) * 4;
        const int64_t off = key_off[key];
        float kv[4] = {0, 0, 0, 0}, vv[4] = {0, 0, 0, 0};
        if (off >= 0) {
          if constexpr (KV != kKvFloat) {  // d is a multiple of 4: the run lies in one 32-value block
            load_kv_quant<KV, 4>(a.k, a.k_scale, off, D, a.kv_sph, d, kv);
            load_kv_quant<KV, 4>(a.v, a.v_scale, off, D, a.kv_sph, d, vv);
          } else if (a.kv_f32) {
            const float4 k4 = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(a.k) + off + d));
            const float4 v4 = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(a.v) + off + d));
            kv[0] = k4.x, kv[1] = k4.y, kv[2] = k4.z, kv[3] = k4.w;
            vv[0] = v4.x, vv[1] = v4.y, vv[2] = v4.z, vv[3] = v4.w;
          } else {
            const uint2 k2 = __ldg(reinterpret_cast<const uint2*>(static_cast<const bf16*>(a.k) + off + d));
            const uint2 v2 = __ldg(reinterpret_cast<const uint2*>(static_cast<const bf16*>(a.v) + off + d));
            kv[0] = __uint_as_float(k2.x << 16), kv[1] = __uint_as_float(k2.x & 0xffff0000u);
            kv[2] = __uint_as_float(k2.y << 16), kv[3] = __uint_as_float(k2.y & 0xffff0000u);
            vv[0] = __uint_as_float(v2.x << 16), vv[1] = __uint_as_float(v2.x & 0xffff0000u);
            vv[2] = __uint_as_float(v2.y << 16), vv[3] = __uint_as_float(v2.y & 0xffff0000u);
          }
        }
        *reinterpret_cast<uint2*>(k_s + key * KS + d) = make_uint2(pack_bf16(kv[0], kv[1]), pack_bf16(kv[2], kv[3]));
        *reinterpret_cast<uint2*>(v_s + key * KS + d) = make_uint2(pack_bf16(vv[0], vv[1]), pack_bf16(vv[2], vv[3]));
      }
      __syncthreads();

      // S [16 x 64] = Q K^T (base-2 logits).
      float s[kKeys / 8][4];
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        const bf16* kr = k_s + (n * 8 + gid) * KS + tig * 2;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          mma_bf16_16816(s[n], qf[kk], *reinterpret_cast<const uint32_t*>(kr + kk * 16),
                   *reinterpret_cast<const uint32_t*>(kr + kk * 16 + 8));
      }
      // Mask, online softmax per row (the 4 lanes of a row group share it).
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + n * 8 + tig * 2 + (e & 1);
          const bool row1 = e >= 2;
          const int64_t p = row1 ? p1 : p0;
          const bool ok = (row1 ? in1 : in0) && j <= p && (a.window <= 0 || j > p - a.window);
          s[n][e] = ok ? s[n][e] : -INFINITY;
          if (row1) mx1 = fmaxf(mx1, s[n][e]);
          else mx0 = fmaxf(mx0, s[n][e]);
        }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float al0 = mn0 == -INFINITY ? 1.0f : exp2f(m0 - mn0), al1 = mn1 == -INFINITY ? 1.0f : exp2f(m1 - mn1);
      m0 = mn0, m1 = mn1;
      float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
      for (int n = 0; n < kKeys / 8; ++n) {
        s[n][0] = s[n][0] == -INFINITY ? 0.0f : exp2f(s[n][0] - mn0);
        s[n][1] = s[n][1] == -INFINITY ? 0.0f : exp2f(s[n][1] - mn0);
        s[n][2] = s[n][2] == -INFINITY ? 0.0f : exp2f(s[n][2] - mn1);
        s[n][3] = s[n][3] == -INFINITY ? 0.0f : exp2f(s[n][3] - mn1);
        sum0 += s[n][0] + s[n][1];
        sum1 += s[n][2] + s[n][3];
      }
      l0 = l0 * al0 + sum0;
      l1 = l1 * al1 + sum1;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) o[n][0] *= al0, o[n][1] *= al0, o[n][2] *= al1, o[n][3] *= al1;
      // O [16 x D] += P [16 x 64] V [64 x D]: P's A fragments are the S accumulators re-packed.
#pragma unroll
      for (int kk = 0; kk < kKeys / 16; ++kk) {
        const uint32_t pa[4] = {pack_bf16(s[2 * kk][0], s[2 * kk][1]), pack_bf16(s[2 * kk][2], s[2 * kk][3]),
                                pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
        for (int n = 0; n < D / 8; ++n) {
          uint32_t b0, b1;  // V rows kk*16 .. +15 (keys), columns n*8 .. +7 (dims), transposed on load
          ldmatrix_x2_trans(b0, b1, v_s + (kk * 16 + (lane & 15)) * KS + n * 8);
          mma_bf16_16816(o[n], pa, b0, b1);
        }
      }
      __syncthreads();  // k_s / v_s are refilled next
    }
    run_begin = run_end;
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  if (a.sinks) {  // the head's sink in base 2, as the logits
    const float sk = a.sinks[h] * kLog2e;
    inv0 = sink_scale2(m0, l0, sk), inv1 = sink_scale2(m1, l1, sk);
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int d = n * 8 + tig * 2;
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int64_t t = rr ? t1 : t0;
      if (t >= a.T || (rr ? seq1 : seq0) < 0) continue;
      const float inv = rr ? inv1 : inv0;
      const int64_t i = (t * a.H + h) * D + d;
      if (a.out_f32) {
        static_cast<float*>(a.out)[i] = o[n][2 * rr] * inv;
        static_cast<float*>(a.out)[i + 1] = o[n][2 * rr + 1] * inv;
      } else {
        static_cast<bf16*>(a.out)[i] = __float2bfloat16_rn(o[n][2 * rr] * inv);
        static_cast<bf16*>(a.out)[i + 1] = __float2bfloat16_rn(o[n][2 * rr + 1] * inv);
      }
    }
  }
}

}  // namespace

bool attention_tc_supports(int64_t head_dim) {
  return head_dim == 64 || head_dim == 96 || head_dim == 128 || head_dim == 256;
}

namespace {

template <int KV>
void launch_tc(const AttnTcArgs& a, dim3 grid, int hw, cudaStream_t stream) {
  switch (a.D) {
    case 64: attention_tc_kernel<64, 64, KV><<<grid, kWarpsTc * 32, 0, stream>>>(a, hw); break;
    case 96: attention_tc_kernel<96, 64, KV><<<grid, kWarpsTc * 32, 0, stream>>>(a, hw); break;
    case 256: attention_tc_kernel<256, 32, KV><<<grid, kWarpsTc * 32, 0, stream>>>(a, hw); break;
    default: attention_tc_kernel<128, 64, KV><<<grid, kWarpsTc * 32, 0, stream>>>(a, hw); break;
  }
}

}  // namespace

void launch_attention_tc(const AttnTcArgs& a, cudaStream_t stream) {
  const int group = a.H / a.G;
  const int hw = group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;  // heads per block, dividing the group
  const int64_t tokens = 16 * (kWarpsTc / hw);
  const dim3 grid(static_cast<unsigned>((a.T + tokens - 1) / tokens), static_cast<unsigned>(a.H / hw));
  if (a.kv_form == kKvFp8) launch_tc<kKvFp8>(a, grid, hw, stream);
  else if (a.kv_form == kKvQ8) launch_tc<kKvQ8>(a, grid, hw, stream);
  else launch_tc<kKvFloat>(a, grid, hw, stream);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
