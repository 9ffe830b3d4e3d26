// gated_delta_rule, chunked form for prefill: the WY / UT-transform of the gated delta rule (Yang,
// Kautz, Hatamizadeh 2024, arXiv 2412.06464 §3; transformers' torch_chunk_gated_delta_rule and
// flash-linear-attention's chunk_gated_delta_rule compute the same). Each sequence is cut into chunks
// of kC = 64 rows from its first row. Within a chunk, with q, k L2-normalised (q also by 1/sqrt(dk)),
// g_i the log decay and G_i = g_1 + .. + g_i, and S0 the state before the chunk:
//   (I + A) u = beta v - beta e^G k S0,  A_ij = beta_i e^(G_i - G_j) k_i.k_j for j < i,
// so u = U - W S0 with U = (I + A)^-1 (beta v) and W = (I + A)^-1 (beta e^G k), and
//   out_i = e^G_i S0^T q_i + sum_{j <= i} e^(G_i - G_j) (q_i.k_j) u_j,
//   S_end = e^G_L S0 + sum_j e^(G_L - G_j) k_j u_j^T.
// Every exponent is <= 0 (g <= 0), so nothing overflows. Two kernels per slab of kSlabChunks chunks:
//  - prep (one block per (chunk, value head), all chunks of the slab at once): U, W by forward
//    substitution (one thread per column of [W | U]), the decayed q.k matrix, G, into scratch,
//    and the decayed queries and keys Qg = e^G q, Kg = e^(G_L - G) k;
//  - state (one block per (kDvg state columns, value head, sequence)): the sequence's chunks of the
//    slab in order, S in registers and shared memory, the chunk's W, Qg, Kg, U and q.k matrix loaded
//    with float4s; the products with S are fp32 on the CUDA cores (float4 shared-memory reads).
// fp32 throughout (bf16 inputs widened), like the recurrent kernel. Sequences with an out-of-range
// slot are skipped.
// Bytes moved: qkv read once, out written once, scratch (3 dk + dv + 65) floats per (row, head) written
// and read once, the state read and written once per slab.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gated_delta_chunked.h"
#include "backend/cuda/smem_opt_in.h"

namespace ft::cuda {
namespace {

constexpr int kC = 64;            // rows per chunk
constexpr int kSlabChunks = 16;   // chunks whose intermediates sit in scratch at once
constexpr int kDvg = 16;          // state columns per block of the state kernel
constexpr int kPrepThreads = 256, kStateThreads = 128;

/** Floats of scratch per (chunk, value head): W, Qg = e^G q, Kg = e^(G_L - G) k (each [kC, dk]), U
 *  [kC, dv], the decayed q.k matrix [kC, kC] and G [kC]; every part starts 16-byte aligned. */
__host__ __device__ inline int64_t block_floats(int dk, int dv) { return int64_t{kC} * (3 * dk + dv + kC + 1); }

__device__ __forceinline__ float softplus(float x) { return x > 20.0f ? x : log1pf(__expf(x)); }

/** chunk_start[s] = number of chunks of the sequences before s; chunk_start[S] = the total. */
__global__ void chunk_prefix_kernel(const int32_t* seq_start, int S, int32_t* chunk_start) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t acc = 0;
  for (int s = 0; s < S; ++s) {
    chunk_start[s] = acc;
    const int n = seq_start[s + 1] - seq_start[s];
    acc += n > 0 ? (n + kC - 1) / kC : 0;
  }
  chunk_start[S] = acc;
}

/** The sequence of chunk c (< chunk_start[S]): the largest s with chunk_start[s] <= c. */
__device__ int find_seq(const int32_t* chunk_start, int S, int c) {
  int lo = 0, hi = S - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (chunk_start[mid] <= c) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

template <typename T, int DK>
__global__ void __launch_bounds__(kPrepThreads) gdn_chunk_prep_kernel(GatedDeltaChunkedArgs a,
                                                                      const int32_t* chunk_start, float* work,
                                                                      int c_lo) {
  extern __shared__ float4 sm4[];
  float* sm = reinterpret_cast<float*>(sm4);
  constexpr int KS = DK + 1;  // padded rows: threads reading different rows hit different banks
  const int NX = DK + a.dv;
  float* qs = sm;
  float* ks = qs + kC * KS;
  float* Am = ks + kC * KS;
  float* Xs = Am + kC * (kC + 1);
  float* Gs = Xs + kC * NX;
  float* Bs = Gs + kC;
  const int c = c_lo + blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  if (c >= chunk_start[a.S]) return;
  const int s = find_seq(chunk_start, a.S, c);
  const int64_t slot = a.slots[s];
  if (slot < 0 || slot >= a.n_slots) return;
  const int t0 = a.seq_start[s], t1 = a.seq_start[s + 1];
  const int c0 = t0 + (c - chunk_start[s]) * kC, L = min(kC, t1 - c0);
  const int kh = a.v_tiled ? h % a.Hk : h / (a.Hv / a.Hk);
  const int64_t W = 2LL * a.Hk * DK + static_cast<int64_t>(a.Hv) * a.dv;
  const T* qkv = static_cast<const T*>(a.qkv);
#pragma unroll 4
  for (int idx = tid; idx < L * DK; idx += kPrepThreads) {
    const int i = idx / DK, d = idx % DK;
    const T* row = qkv + static_cast<int64_t>(c0 + i) * W;
    qs[i * KS + d] = to_f(row[kh * DK + d]);
    ks[i * KS + d] = to_f(row[a.Hk * DK + kh * DK + d]);
  }
  if (tid < L) {
    const int64_t e = static_cast<int64_t>(c0 + tid) * a.Hv + h;
    Gs[tid] = -__expf(a.a_log[h]) * softplus(load_any(a.a, a.ab_code, e) + a.dt_bias[h]);
    Bs[tid] = 1.0f / (1.0f + __expf(-load_any(a.b, a.ab_code, e)));
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < L; ++i) Gs[i] += Gs[i - 1];
  const int warp = tid / 32, lane = tid % 32;
  const float q_scale = rsqrtf(static_cast<float>(DK));
  for (int i = warp; i < L; i += kPrepThreads / 32) {
    float qq = 0.0f, kk = 0.0f;
    for (int d = lane; d < DK; d += 32) qq += qs[i * KS + d] * qs[i * KS + d], kk += ks[i * KS + d] * ks[i * KS + d];
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qn = q_scale * rsqrtf(qq + a.l2_eps), kn = rsqrtf(kk + a.l2_eps);
    for (int d = lane; d < DK; d += 32) qs[i * KS + d] *= qn, ks[i * KS + d] *= kn;
  }
  __syncthreads();

  float* blk = work + (static_cast<int64_t>(blockIdx.x) * a.Hv + h) * block_floats(DK, a.dv);
  float* Wg = blk;
  float* Qg = Wg + kC * DK;
  float* Kg = Qg + kC * DK;
  float* Ug = Kg + kC * DK;
  float* Aq = Ug + kC * a.dv;
  float* Gg = Aq + kC * kC;
  for (int idx = tid; idx < L * L; idx += kPrepThreads) {
    const int i = idx / L, j = idx % L;
    if (j > i) continue;
    float kk = 0.0f, qk = 0.0f;
#pragma unroll 8
    for (int d = 0; d < DK; ++d) {
      const float kj = ks[j * KS + d];
      kk += ks[i * KS + d] * kj;
      qk += qs[i * KS + d] * kj;
    }
    const float dec = __expf(Gs[i] - Gs[j]);
    Am[i * (kC + 1) + j] = Bs[i] * dec * kk;  // the diagonal is never read
    Aq[i * kC + j] = dec * qk;
  }
  if (tid < L) Gg[tid] = Gs[tid];
  for (int idx = tid; idx < L * DK; idx += kPrepThreads) {
    const int i = idx / DK, d = idx % DK;
    Qg[idx] = qs[i * KS + d] * __expf(Gs[i]);
    Kg[idx] = ks[i * KS + d] * __expf(Gs[L - 1] - Gs[i]);
  }
  // The right-hand sides [beta e^G k | beta v] into Xs (the value rows' loads all in flight).
  const T* vb = qkv + 2LL * a.Hk * DK + static_cast<int64_t>(h) * a.dv;
#pragma unroll 4
  for (int idx = tid; idx < L * NX; idx += kPrepThreads) {
    const int i = idx / NX, col = idx % NX;
    Xs[idx] = col < DK ? Bs[i] * __expf(Gs[i]) * ks[i * KS + col]
                       : Bs[i] * to_f(vb[static_cast<int64_t>(c0 + i) * W + (col - DK)]);
  }
  __syncthreads();

  // Forward substitution (I + A) X = B in place, one column per thread, rows in order.
  for (int col = tid; col < NX; col += kPrepThreads) {
    for (int i = 1; i < L; ++i) {
      float x = Xs[i * NX + col], x2 = 0.0f;
      const float* Ai = Am + i * (kC + 1);
      int j = 0;
      for (; j + 1 < i; j += 2) {
        x -= Ai[j] * Xs[j * NX + col];
        x2 -= Ai[j + 1] * Xs[(j + 1) * NX + col];
      }
      if (j < i) x -= Ai[j] * Xs[j * NX + col];
      Xs[i * NX + col] = x + x2;
    }
    for (int i = 0; i < L; ++i) {
      if (col < DK) Wg[i * DK + col] = Xs[i * NX + col];
      else Ug[i * a.dv + (col - DK)] = Xs[i * NX + col];
    }
  }
}

/** Copies `rows` rows of N floats (a multiple of 4; 16-byte aligned rows) from global src (row stride
 *  ld_src) to shared dst (row stride ld_dst), every thread's float4 loads issued before any store. */
template <int N>
__device__ __forceinline__ void load_rows(float* dst, int ld_dst, const float* src, int64_t ld_src, int rows,
                                          int tid) {
  constexpr int Q = N / 4, kIter = (kC * Q + kStateThreads - 1) / kStateThreads;
  float4 v[kIter];
#pragma unroll
  for (int k = 0; k < kIter; ++k) {
    const int idx = tid + k * kStateThreads, i = idx / Q;
    v[k] = i < rows ? __ldg(reinterpret_cast<const float4*>(src + i * ld_src + 4 * (idx % Q))) : float4{};
  }
#pragma unroll
  for (int k = 0; k < kIter; ++k) {
    const int idx = tid + k * kStateThreads, i = idx / Q;
    if (i < rows) *reinterpret_cast<float4*>(dst + i * ld_dst + 4 * (idx % Q)) = v[k];
  }
}

template <typename T, int DK>
__global__ void __launch_bounds__(kStateThreads) gdn_chunk_state_kernel(GatedDeltaChunkedArgs a,
                                                                        const int32_t* chunk_start,
                                                                        const float* work, int c_lo, int c_hi) {
  // Rows padded by 4 floats: float4 reads of two rows in one warp fall in different banks.
  constexpr int KS = DK + 4, AS = kC + 4, G = kStateThreads / kDvg, R = kC / G, M = DK / G;
  static_assert(M % 4 == 0 && kC % G == 0, "gdn_chunk_state_kernel: each thread's state rows are float4s");
  extern __shared__ float4 sm4[];
  float* sm = reinterpret_cast<float*>(sm4);
  float* Ma = sm;               // W of the chunk, then its decayed keys Kg
  float* Qs = Ma + kC * KS;     // decayed, normalised queries Qg
  float* Ss = Qs + kC * KS;     // S [DK, kDvg]
  float* us = Ss + DK * kDvg;   // U, then u [kC, kDvg]
  float* Aq = us + kC * kDvg;   // [kC, AS]
  const int s = blockIdx.z, h = blockIdx.y, cgc = blockIdx.x * kDvg;
  const int tid = threadIdx.x, col = tid % kDvg, grp = tid / kDvg;
  const int cb = max(chunk_start[s], c_lo), ce = min(chunk_start[s + 1], c_hi);
  if (cb >= ce) return;
  const int64_t slot = a.slots[s];
  if (slot < 0 || slot >= a.n_slots) return;
  const int t0 = a.seq_start[s], t1 = a.seq_start[s + 1];
  T* out = static_cast<T*>(a.out);
  float* S = a.state + (slot * a.Hv + h) * static_cast<int64_t>(DK) * a.dv + cgc + col;
  const bool fresh = cb == chunk_start[s] && a.pos[t0] == 0;
  float Sr[M];  // this thread's state rows d = grp M + m
#pragma unroll
  for (int m = 0; m < M; ++m) {
    const int d = grp * M + m;
    Sr[m] = fresh ? 0.0f : S[static_cast<int64_t>(d) * a.dv];
    Ss[d * kDvg + col] = Sr[m];
  }
  const int64_t P = block_floats(DK, a.dv);
  for (int c = cb; c < ce; ++c) {
    const int c0 = t0 + (c - chunk_start[s]) * kC, L = min(kC, t1 - c0);
    const float* Wg = work + (static_cast<int64_t>(c - c_lo) * a.Hv + h) * P;
    const float* Qg = Wg + kC * DK;
    const float* Kg = Qg + kC * DK;
    const float* Ug = Kg + kC * DK;
    const float* Aqg = Ug + kC * a.dv;
    const float gl = Aqg[kC * kC + L - 1];
    __syncthreads();  // the previous chunk is done with every shared array, and Ss holds its state
    load_rows<DK>(Ma, KS, Wg, DK, L, tid);
    load_rows<DK>(Qs, KS, Qg, DK, L, tid);
    load_rows<kDvg>(us, kDvg, Ug + cgc, a.dv, L, tid);
    load_rows<kC>(Aq, AS, Aqg, kC, L, tid);
    __syncthreads();
    // This thread's rows i = grp + G r: u = U - W S0 and the inter-chunk output Qg S0.
    float au[R], ao[R];
#pragma unroll
    for (int r = 0; r < R; ++r) au[r] = 0.0f, ao[r] = 0.0f;
#pragma unroll 2
    for (int d = 0; d < DK; d += 4) {
      const float s0 = Ss[d * kDvg + col], s1 = Ss[(d + 1) * kDvg + col], s2 = Ss[(d + 2) * kDvg + col],
                  s3 = Ss[(d + 3) * kDvg + col];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int i = grp + G * r;
        const float4 w = *reinterpret_cast<const float4*>(Ma + i * KS + d);
        const float4 q = *reinterpret_cast<const float4*>(Qs + i * KS + d);
        au[r] += w.x * s0 + w.y * s1 + w.z * s2 + w.w * s3;
        ao[r] += q.x * s0 + q.y * s1 + q.z * s2 + q.w * s3;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {  // us[i][col] of these rows belongs to this thread alone
      const int i = grp + G * r;
      if (i < L) us[i * kDvg + col] -= au[r];
    }
    __syncthreads();  // every read of W is done
    load_rows<DK>(Ma, KS, Kg, DK, L, tid);
    __syncthreads();
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int i = grp + G * r;
      if (i >= L) continue;
      float o = ao[r];
      const float* Ai = Aq + i * AS;
      int j = 0;
      for (; j + 3 <= i; j += 4) {
        const float4 a4 = *reinterpret_cast<const float4*>(Ai + j);
        o += a4.x * us[j * kDvg + col] + a4.y * us[(j + 1) * kDvg + col] + a4.z * us[(j + 2) * kDvg + col] +
             a4.w * us[(j + 3) * kDvg + col];
      }
      for (; j <= i; ++j) o += Ai[j] * us[j * kDvg + col];
      out[static_cast<int64_t>(c0 + i) * a.Hv * a.dv + static_cast<int64_t>(h) * a.dv + cgc + col] = from_f<T>(o);
    }
    const float eg = __expf(gl);
#pragma unroll
    for (int m = 0; m < M; ++m) Sr[m] *= eg;
    for (int j = 0; j < L; ++j) {  // S += Kg^T u
      const float uj = us[j * kDvg + col];
#pragma unroll
      for (int m = 0; m < M; m += 4) {
        const float4 k4 = *reinterpret_cast<const float4*>(Ma + j * KS + grp * M + m);
        Sr[m] += k4.x * uj, Sr[m + 1] += k4.y * uj, Sr[m + 2] += k4.z * uj, Sr[m + 3] += k4.w * uj;
      }
    }
#pragma unroll
    for (int m = 0; m < M; ++m) Ss[(grp * M + m) * kDvg + col] = Sr[m];  // Ss was last read before two barriers
  }
#pragma unroll
  for (int m = 0; m < M; ++m) S[static_cast<int64_t>(grp * M + m) * a.dv] = Sr[m];
}

int prep_smem_bytes(int dk, int dv) {
  return static_cast<int>(sizeof(float)) * (2 * kC * (dk + 1) + kC * (kC + 1) + kC * (dk + dv) + 2 * kC);
}
int state_smem_bytes(int dk) {
  return static_cast<int>(sizeof(float)) * (2 * kC * (dk + 4) + dk * kDvg + kC * kDvg + kC * (kC + 4));
}
int64_t chunk_index_bytes(int S) { return (static_cast<int64_t>(S + 1) * 4 + 255) / 256 * 256; }

template <typename T, int DK>
void launch_dk(const GatedDeltaChunkedArgs& a, void* scratch, cudaStream_t stream) {
  auto* chunk_start = static_cast<int32_t*>(scratch);
  auto* work = reinterpret_cast<float*>(static_cast<char*>(scratch) + chunk_index_bytes(a.S));
  chunk_prefix_kernel<<<1, 32, 0, stream>>>(a.seq_start, a.S, chunk_start);
  const int smem_a = prep_smem_bytes(DK, a.dv), smem_b = state_smem_bytes(DK);
  opt_in_shared_memory(gdn_chunk_prep_kernel<T, DK>, smem_a);
  opt_in_shared_memory(gdn_chunk_state_kernel<T, DK>, smem_b);
  const int64_t bound = a.T / kC + a.S;  // >= the number of chunks
  for (int64_t c_lo = 0; c_lo < bound; c_lo += kSlabChunks) {
    const int lo = static_cast<int>(c_lo);
    gdn_chunk_prep_kernel<T, DK><<<dim3(kSlabChunks, static_cast<unsigned>(a.Hv)), kPrepThreads, smem_a, stream>>>(
        a, chunk_start, work, lo);
    gdn_chunk_state_kernel<T, DK>
        <<<dim3(static_cast<unsigned>(a.dv / kDvg), static_cast<unsigned>(a.Hv), static_cast<unsigned>(a.S)),
           kStateThreads, smem_b, stream>>>(a, chunk_start, work, lo, lo + kSlabChunks);
  }
}

template <typename T>
void launch_t(const GatedDeltaChunkedArgs& a, void* scratch, cudaStream_t stream) {
  switch (a.dk) {
    case 32: launch_dk<T, 32>(a, scratch, stream); break;
    case 64: launch_dk<T, 64>(a, scratch, stream); break;
    case 128: launch_dk<T, 128>(a, scratch, stream); break;
    default: fail(ErrorCode::kUnsupported, "gated_delta_rule: key head dim {} has no chunked kernel", a.dk);
  }
}

}  // namespace

bool gated_delta_chunked_supported(int dk, int dv) {
  return (dk == 32 || dk == 64 || dk == 128) && dv >= kDvg && dv % kDvg == 0 && dv <= 256;
}

int64_t gated_delta_chunked_scratch_bytes(int Hv, int dk, int dv, int S) {
  return chunk_index_bytes(S) + int64_t{kSlabChunks} * Hv * block_floats(dk, dv) * static_cast<int64_t>(sizeof(float));
}

void launch_gated_delta_chunked(const GatedDeltaChunkedArgs& a, void* scratch, cudaStream_t stream) {
  if (a.act_f32) launch_t<float>(a, scratch, stream);
  else launch_t<bf16>(a, scratch, stream);
}

}  // namespace ft::cuda
