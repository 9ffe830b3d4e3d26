// Decode attention (one query token per sequence) for CudaOps::attention, attention.cu: the same
// contract and the same split partials as the general kernel there, so its combine kernel merges
// them. Flash-decoding (split-K over the key range; Dao et al., "Flash-Decoding for long-context
// inference", 2023) with one block per (token, kv head, split): the block's 4 warps take every 4th
// key of the split; a warp reads one key's K and V row with 16-byte loads (lane l holds dims
// l*DPL .. l*DPL + DPL - 1), scores it against all the group's query heads (held in registers),
// and keeps an online softmax per head. The warps' states merge through shared memory into one
// (max, sum, unnormalised output) partial per head. Splits that start past the token's position
// exit at once (the combine kernel never reads them), so a graph recorded for the pool's whole
// capacity costs little more than eager decode.
// Bytes moved: each of the token's keys' K and V once per kv head; q once; partials
// n_split * n_head * (head_dim + 2) * 4 per token.
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace ft::cuda {
namespace {

constexpr int kDecWarps = 4;

template <int DPL>
__device__ __forceinline__ void load_row(const void* base, bool f32, int64_t off, int lane, float (&out)[DPL]) {
  if (f32) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(base) + off + lane * DPL);
#pragma unroll
    for (int i = 0; i < DPL / 4; ++i) {
      const float4 v = __ldg(p + i);
      out[4 * i] = v.x, out[4 * i + 1] = v.y, out[4 * i + 2] = v.z, out[4 * i + 3] = v.w;
    }
  } else {
    const uint2* p = reinterpret_cast<const uint2*>(static_cast<const bf16*>(base) + off + lane * DPL);
#pragma unroll
    for (int i = 0; i < DPL / 4; ++i) {
      const uint2 v = __ldg(p + i);
      out[4 * i] = __uint_as_float(v.x << 16), out[4 * i + 1] = __uint_as_float(v.x & 0xffff0000u);
      out[4 * i + 2] = __uint_as_float(v.y << 16), out[4 * i + 3] = __uint_as_float(v.y & 0xffff0000u);
    }
  }
}

template <int DPL, int GROUP>
__global__ void __launch_bounds__(kDecWarps * 32) attention_decode_kernel(AttnDecodeArgs a) {
  extern __shared__ float sm[];  // [kDecWarps][GROUP][2 + D]: each warp's m, l, o per head
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x;
  const int g = blockIdx.y, split = blockIdx.z, D = a.D;
  const int seq = a.seq[t];
  if (seq < 0 || seq >= a.n_seqs) return;
  const int64_t p = a.pos[t];
  const int64_t split_lo = static_cast<int64_t>(split) * a.split_len;
  if (split_lo > p) return;  // past the token: never read by the combine
  const int64_t split_hi = split + 1 == a.n_split ? p + 1 : min(p + 1, split_lo + a.split_len);
  const int64_t lo = a.window > 0 ? max(split_lo, p - a.window + 1) : split_lo;
  const bool active = lane * DPL < D;

  float q[GROUP][DPL];
#pragma unroll
  for (int h = 0; h < GROUP; ++h)
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int d = lane * DPL + i;
      q[h][i] = d < D ? a.scale * load_any(a.q, a.q_code, (t * a.H + g * GROUP + h) * D + d) : 0.0f;
    }
  float m[GROUP], l[GROUP], o[GROUP][DPL];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[h][i] = 0.0f;
  }

  const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
  for (int64_t j = lo + warp; j < split_hi; j += kDecWarps) {
    const int64_t blk = j / a.page_size;
    const int64_t page = blk < a.max_blocks ? table[blk] : -1;
    if (page < 0 || page >= a.n_pages) continue;  // warp-uniform
    const int64_t off = ((page * a.page_size + j % a.page_size) * a.G + g) * D;
    float k[DPL], v[DPL];
    if (active) {
      load_row<DPL>(a.k, a.kv_f32, off, lane, k);
      load_row<DPL>(a.v, a.kv_f32, off, lane, v);
    } else {
#pragma unroll
      for (int i = 0; i < DPL; ++i) k[i] = v[i] = 0.0f;
    }
#pragma unroll
    for (int h = 0; h < GROUP; ++h) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) s = fmaf(q[h][i], k[i], s);
      s = warp_sum(s);
      const float m_new = fmaxf(m[h], s);
      const float alpha = __expf(m[h] - m_new);  // m[h] = -inf the first time: 0
      const float pj = __expf(s - m_new);
      l[h] = l[h] * alpha + pj;
      m[h] = m_new;
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[h][i] = fmaf(pj, v[i], o[h][i] * alpha);
    }
  }

  const int stride = 2 + D;
  float* mine = sm + static_cast<int64_t>(warp) * GROUP * stride;
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    if (lane == 0) mine[h * stride] = m[h], mine[h * stride + 1] = l[h];
#pragma unroll
    for (int i = 0; i < DPL; ++i)
      if (lane * DPL + i < D) mine[h * stride + 2 + lane * DPL + i] = o[h][i];
  }
  __syncthreads();
  // Merge the warps: thread x handles (head, dim) pairs; the partial goes to its split's slot.
  for (int idx = threadIdx.x; idx < GROUP * (D + 1); idx += blockDim.x) {
    const int h = idx / (D + 1), d = idx % (D + 1) - 1;  // d = -1: the (m, l) pair
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, sm[(w * GROUP + h) * stride]);
    float acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) {
      const float* st = sm + (w * GROUP + h) * stride;
      const float sc = st[0] == -INFINITY ? 0.0f : __expf(st[0] - M);
      acc = fmaf(sc, d < 0 ? st[1] : st[2 + d], acc);
    }
    float* pp = a.part + (static_cast<int64_t>(split) * a.T * a.H + t * a.H + g * GROUP + h) * (D + 2);
    if (d < 0) pp[0] = M, pp[1] = acc;
    else pp[2 + d] = acc;
  }
}

template <int DPL, int GROUP>
void launch(const AttnDecodeArgs& a, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.T), static_cast<unsigned>(a.G), static_cast<unsigned>(a.n_split));
  const size_t smem = static_cast<size_t>(kDecWarps) * GROUP * (2 + a.D) * 4;
  attention_decode_kernel<DPL, GROUP><<<grid, kDecWarps * 32, smem, s>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

template <int DPL>
bool launch_group(const AttnDecodeArgs& a, cudaStream_t s) {
  switch (a.H / a.G) {
    case 1: launch<DPL, 1>(a, s); return true;
    case 2: launch<DPL, 2>(a, s); return true;
    case 4: launch<DPL, 4>(a, s); return true;
    case 8: launch<DPL, 8>(a, s); return true;
    default: return false;
  }
}

}  // namespace

bool attention_decode_supports(int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
  const int64_t group = n_head / n_head_kv;
  return head_dim % 4 == 0 && (head_dim <= 128 || (head_dim <= 256 && head_dim % 8 == 0)) &&
         (group == 1 || group == 2 || group == 4 || group == 8);
}

void launch_attention_decode(const AttnDecodeArgs& a, cudaStream_t stream) {
  if (a.D <= 128) launch_group<4>(a, stream);
  else launch_group<8>(a, stream);
}

}  // namespace ft::cuda
