// Tensor-core attention for long prefill batches (called by CudaOps::attention, attention.cu).
// Same contract as the CUDA-core kernel there: q, out [T, n_head * head_dim] F32 or BF16; paged K/V
// [n_pages, page_size, n_head_kv, head_dim] F32 or BF16; query t (sequence s, position p) attends to
// s's keys at max(0, p - window + 1) .. p; fp32 online softmax (FlashAttention-2 recurrence: Dao,
// "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning", 2023).
//
// A block owns 64 consecutive tokens x one query head; each of its 4 warps 16 of the rows. Key
// tiles of 32 are gathered from the pages into shared memory as floats; S = Q K^T and O += P V run
// on the tensor cores as TF32 wmma (m16n16k8, fp32 accumulation: inputs keep 10 mantissa bits, the
// products and sums are fp32). O lives in shared memory so each row can be rescaled by its running
// max (wmma fragments have no defined row layout). Tokens of different sequences in one block are
// handled as consecutive runs, like the CUDA-core kernel.
// Bytes moved: per block, the K and V of its sequence's keys up to its last position, once; q and
// out once. Shared memory: (64 (Q) + 64 (O) + 2 x 32 (K, V)) x (head_dim + 8) + 64 x 40 floats.
#include <mma.h>

#include "backend/cuda/attention_tc.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"

namespace ft::cuda {
namespace {

using namespace nvcuda;

constexpr int kQ = 64, kK = 32, kWarpsTc = 4, kSs = kK + 8;

__device__ __forceinline__ float kv_at(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const bf16*>(p)[i]);
}

__global__ void __launch_bounds__(kWarpsTc * 32) attention_tc_kernel(AttnTcArgs a) {
  extern __shared__ __align__(32) float sm[];
  const int D = a.D, ld = D + 8;  // row stride: 32-byte aligned fragment rows, fewer bank conflicts
  float* q_s = sm;                // [kQ][ld], pre-scaled
  float* o_s = q_s + kQ * ld;     // [kQ][ld] unnormalised output
  float* k_s = o_s + kQ * ld;     // [kK][ld]
  float* v_s = k_s + kK * ld;     // [kK][ld]
  float* s_s = v_s + kK * ld;     // [kQ][kSs] scores, then probabilities
  __shared__ int row_pos[kQ], row_seq[kQ];
  __shared__ int64_t key_off[kK];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * kQ;
  const int h = blockIdx.y, g = h / (a.H / a.G);

  for (int r = threadIdx.x; r < kQ; r += blockDim.x) {
    const int64_t t = t0 + r;
    int s = t < a.T ? a.seq[t] : -1;
    if (s >= a.n_seqs) s = -1;
    row_seq[r] = s;
    row_pos[r] = s >= 0 ? a.pos[t] : -1;
  }
  for (int i = threadIdx.x; i < kQ * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    const int64_t t = t0 + r;
    q_s[r * ld + d] = t < a.T ? a.scale * load_any(a.q, a.q_code, (t * a.H + h) * D + d) : 0.0f;
    o_s[r * ld + d] = 0.0f;
  }
  // Each lane pair owns one row of its warp's 16: running max and sum (both lanes keep a copy).
  const int my_row = warp * 16 + lane / 2, half = lane & 1;
  float m = -INFINITY, l = 0.0f;
  __syncthreads();

  for (int run_begin = 0; run_begin < kQ;) {  // runs of rows of one sequence
    const int seq = row_seq[run_begin];
    if (seq < 0) break;  // invalid rows only at the end of the batch
    int run_end = run_begin + 1;
    while (run_end < kQ && row_seq[run_end] == seq) ++run_end;
    int64_t lo = INT64_MAX, hi = -1;
    for (int r = run_begin; r < run_end; ++r) {
      const int64_t p = row_pos[r];
      lo = min(lo, a.window > 0 ? max(int64_t{0}, p - a.window + 1) : int64_t{0});
      hi = max(hi, p);
    }
    lo = lo / kK * kK;
    const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
    const bool in_run = my_row >= run_begin && my_row < run_end;
    const int64_t p_row = row_pos[my_row];
    for (int64_t j0 = lo; j0 <= hi; j0 += kK) {
      if (threadIdx.x < kK) {
        const int64_t j = j0 + threadIdx.x;
        int64_t off = -1;
        if (j <= hi) {
          const int64_t blk = j / a.page_size;
          const int64_t page = blk < a.max_blocks ? table[blk] : -1;
          if (page >= 0 && page < a.n_pages) off = ((page * a.page_size + j % a.page_size) * a.G + g) * D;
        }
        key_off[threadIdx.x] = off;
      }
      __syncthreads();
      for (int i = threadIdx.x; i < kK * D; i += blockDim.x) {
        const int kk = i / D, d = i % D;
        const int64_t off = key_off[kk];
        k_s[kk * ld + d] = off >= 0 ? kv_at(a.k, a.kv_f32, off + d) : 0.0f;
        v_s[kk * ld + d] = off >= 0 ? kv_at(a.v, a.kv_f32, off + d) : 0.0f;
      }
      __syncthreads();
      // S[16 x 32] of this warp = Q_w K^T.
      {
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc[kK / 16];
#pragma unroll
        for (int n = 0; n < kK / 16; ++n) wmma::fill_fragment(acc[n], 0.0f);
        for (int k0 = 0; k0 < D; k0 += 8) {
          wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
          wmma::load_matrix_sync(fa, q_s + warp * 16 * ld + k0, ld);
#pragma unroll
          for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
#pragma unroll
          for (int n = 0; n < kK / 16; ++n) {
            wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
            wmma::load_matrix_sync(fb, k_s + n * 16 * ld + k0, ld);
#pragma unroll
            for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
            wmma::mma_sync(acc[n], fa, fb, acc[n]);
          }
        }
#pragma unroll
        for (int n = 0; n < kK / 16; ++n)
          wmma::store_matrix_sync(s_s + warp * 16 * kSs + n * 16, acc[n], kSs, wmma::mem_row_major);
      }
      __syncwarp();
      // Online softmax on this lane's half row (16 keys), then rescale its half of O's row.
      float* srow = s_s + my_row * kSs + half * 16;
      float tmax = -INFINITY;
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const int64_t j = j0 + half * 16 + c;
        const bool ok = in_run && j <= p_row && (a.window <= 0 || j > p_row - a.window);
        if (!ok) srow[c] = -INFINITY;
        tmax = fmaxf(tmax, srow[c]);
      }
      tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
      const float m_new = fmaxf(m, tmax);
      const float alpha = m_new == -INFINITY ? 1.0f : __expf(m - m_new);
      float psum = 0.0f;
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const float p = srow[c] == -INFINITY ? 0.0f : __expf(srow[c] - m_new);
        srow[c] = p;
        psum += p;
      }
      psum += __shfl_xor_sync(0xffffffffu, psum, 1);
      l = l * alpha + psum;
      m = m_new;
      if (alpha != 1.0f) {
        float* orow = o_s + my_row * ld;
        for (int d = half; d < D; d += 2) orow[d] *= alpha;
      }
      __syncwarp();
      // O_w[16 x D] += P_w[16 x 32] V[32 x D].
      for (int n0 = 0; n0 < D; n0 += 16) {
        wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
        wmma::load_matrix_sync(acc, o_s + warp * 16 * ld + n0, ld, wmma::mem_row_major);
#pragma unroll
        for (int k0 = 0; k0 < kK; k0 += 8) {
          wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, s_s + warp * 16 * kSs + k0, kSs);
          wmma::load_matrix_sync(fb, v_s + k0 * ld + n0, ld);
#pragma unroll
          for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
#pragma unroll
          for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
          wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(o_s + warp * 16 * ld + n0, acc, ld, wmma::mem_row_major);
      }
      __syncthreads();  // k_s / v_s are refilled next
    }
    run_begin = run_end;
  }

  // out = O / l for this lane's half row.
  const int64_t t = t0 + my_row;
  if (t < a.T && row_seq[my_row] >= 0) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const float* orow = o_s + my_row * ld;
    for (int d = half; d < D; d += 2) {
      const float v = orow[d] * inv;
      if (a.out_f32) static_cast<float*>(a.out)[(t * a.H + h) * D + d] = v;
      else static_cast<bf16*>(a.out)[(t * a.H + h) * D + d] = __float2bfloat16_rn(v);
    }
  }
}

}  // namespace

bool attention_tc_supports(int64_t head_dim) { return head_dim % 16 == 0 && head_dim <= kAttnTcMaxHeadDim; }

void launch_attention_tc(const AttnTcArgs& a, cudaStream_t stream) {
  const int ld = a.D + 8;
  const size_t smem = static_cast<size_t>((2 * kQ + 2 * kK) * ld + kQ * kSs) * 4;
  static bool configured = false;  // raise the dynamic shared memory limit once
  if (!configured) {
    const int most = ((2 * kQ + 2 * kK) * (kAttnTcMaxHeadDim + 8) + kQ * kSs) * 4;
    FT_CUDA_CHECK(cudaFuncSetAttribute(attention_tc_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
    configured = true;
  }
  const dim3 grid(static_cast<unsigned>((a.T + kQ - 1) / kQ), static_cast<unsigned>(a.H));
  attention_tc_kernel<<<grid, kWarpsTc * 32, smem, stream>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
