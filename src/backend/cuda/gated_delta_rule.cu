// gated_delta_rule: Gated DeltaNet's recurrence (Yang, Kautz, Hatamizadeh 2024, arXiv 2412.06464;
// transformers' torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel), token by token.
// Column j of a head's state S [dk, dv] evolves from k, q, v_j, beta and the decay alone, so one warp
// takes 32 columns of one (sequence, value head) and each lane keeps its column of S in registers
// for the whole sequence: S is read and written once per step, whatever the number of tokens. The
// warp L2-normalises q and k of each token (shuffle sums) into shared memory, then every lane
// updates its column: S_j <- exp(g) S_j; u = beta (v_j - S_j . k); S_j += u k; out_j = S_j . q.
// Grid (dv / 32 column groups, Hv, S). Decode and short batches take this kernel; a batch of at least
// kChunkedMinTokens rows (and kChunkedMinRowsPerSeq per sequence on average) takes the chunked form of
// gated_delta_chunked.cu, whose matrix products replace the sequential walk over the rows. Sequences
// with an out-of-range slot are skipped (the CPU backend throws).
// Bytes moved: T * (2 Hk dk (per column group) + Hv dv * 2 + 2 Hv) elements + S Hv dk dv * 8.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gated_delta_chunked.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

// Measured on an H100 with Qwen3-Next's heads (32k rows, one sequence): the recurrent kernel spends
// ~2.3 us a row, latency-bound; the chunked kernels are bound by their products instead.
constexpr int64_t kChunkedMinTokens = 128, kChunkedMinRowsPerSeq = 4;

template <typename T, int DK>
__global__ void __launch_bounds__(32) gated_delta_kernel(const T* __restrict__ qkv, const void* __restrict__ a,
                                                         const void* __restrict__ b, int ab_code,
                                                         const float* __restrict__ a_log,
                                                         const float* __restrict__ dt_bias, float* state, T* out,
                                                         int Hk, int Hv, int dv, bool v_tiled, float l2_eps,
                                                         const int32_t* seq_start,
                                                         const int32_t* pos, const int32_t* slots, int64_t n_slots) {
  constexpr int kPer = DK / 32 > 0 ? DK / 32 : 1;  // q/k elements each lane normalises
  __shared__ float qs[DK], ks[DK];
  const int lane = threadIdx.x, h = blockIdx.y, s = blockIdx.z;
  const int j = blockIdx.x * 32 + lane;
  const bool col = j < dv;
  const int t0 = seq_start[s], t1 = seq_start[s + 1];
  const int64_t slot = slots[s];
  if (t1 <= t0 || slot < 0 || slot >= n_slots) return;
  const int kh = v_tiled ? h % Hk : h / (Hv / Hk);
  const int64_t W = 2LL * Hk * DK + static_cast<int64_t>(Hv) * dv;
  float* S = state + (slot * Hv + h) * DK * dv;
  float Sj[DK];
  const bool fresh = pos[t0] == 0;
#pragma unroll
  for (int i = 0; i < DK; ++i) Sj[i] = col && !fresh ? S[static_cast<int64_t>(i) * dv + j] : 0.0f;
  const float A = -__expf(a_log[h]), bias = dt_bias[h], q_scale = rsqrtf(static_cast<float>(DK));
  for (int t = t0; t < t1; ++t) {
    const T* row = qkv + static_cast<int64_t>(t) * W;
    float qv[kPer], kv[kPer], qq = 0.0f, kk = 0.0f;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int i = lane + 32 * e;
      qv[e] = i < DK ? to_f(row[kh * DK + i]) : 0.0f;
      kv[e] = i < DK ? to_f(row[Hk * DK + kh * DK + i]) : 0.0f;
      qq += qv[e] * qv[e];
      kk += kv[e] * kv[e];
    }
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qn = q_scale * rsqrtf(qq + l2_eps), kn = rsqrtf(kk + l2_eps);
    __syncwarp();  // the previous token's reads of qs, ks are done
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      const int i = lane + 32 * e;
      if (i < DK) qs[i] = qv[e] * qn, ks[i] = kv[e] * kn;
    }
    __syncwarp();
    const float x = load_any(a, ab_code, static_cast<int64_t>(t) * Hv + h) + bias;
    const float decay = __expf(A * (x > 20.0f ? x : log1pf(__expf(x))));
    const float beta = 1.0f / (1.0f + __expf(-load_any(b, ab_code, static_cast<int64_t>(t) * Hv + h)));
    if (col) {
      float u = 0.0f;
#pragma unroll
      for (int i = 0; i < DK; ++i) {
        Sj[i] *= decay;
        u += Sj[i] * ks[i];
      }
      u = beta * (to_f(row[2LL * Hk * DK + static_cast<int64_t>(h) * dv + j]) - u);
      float o = 0.0f;
#pragma unroll
      for (int i = 0; i < DK; ++i) {
        Sj[i] += ks[i] * u;
        o += Sj[i] * qs[i];
      }
      out[static_cast<int64_t>(t) * Hv * dv + static_cast<int64_t>(h) * dv + j] = from_f<T>(o);
    }
  }
  if (col)
#pragma unroll
    for (int i = 0; i < DK; ++i) S[static_cast<int64_t>(i) * dv + j] = Sj[i];
}

}  // namespace
}  // namespace cuda

void CudaOps::gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv, const Tensor& a,
                               const Tensor& b, Tensor ssm_state, Tensor out) {
  op_checks::gated_delta_rule(p, batch, qkv, a, b, ssm_state, out);
  cuda::check_act("gated_delta_rule", "qkv", qkv);
  cuda::check_dev("gated_delta_rule", "ssm_state", ssm_state);
  cuda::check_dev("gated_delta_rule", "a_log", p.a_log);
  cuda::check_dev("gated_delta_rule", "dt_bias", p.dt_bias);
  cuda::check_dev("gated_delta_rule", "a", a);
  cuda::check_dev("gated_delta_rule", "b", b);
  const int ab_code = cuda::float_code("gated_delta_rule", "a", a.dtype);
  if (batch.n_tokens == 0 || batch.n_seqs == 0) return;
  if (batch.n_tokens >= cuda::kChunkedMinTokens && batch.n_tokens >= cuda::kChunkedMinRowsPerSeq * batch.n_seqs &&
      cuda::gated_delta_chunked_supported(static_cast<int>(p.k_head_dim), static_cast<int>(p.v_head_dim))) {
    cuda::GatedDeltaChunkedArgs c;
    c.qkv = qkv.data, c.act_f32 = qkv.dtype == DType::F32, c.a = a.data, c.b = b.data, c.ab_code = ab_code;
    c.a_log = p.a_log.ptr<float>(), c.dt_bias = p.dt_bias.ptr<float>();
    c.state = ssm_state.ptr<float>(), c.n_slots = ssm_state.dim(0), c.out = out.data;
    c.Hk = p.n_k_heads, c.Hv = p.n_v_heads, c.dk = p.k_head_dim, c.dv = p.v_head_dim, c.v_tiled = p.v_tiled;
    c.l2_eps = p.l2_eps, c.seq_start = batch.seq_start.ptr<int32_t>(), c.pos = batch.positions.ptr<int32_t>();
    c.slots = batch.state_slots.ptr<int32_t>(), c.S = static_cast<int>(batch.n_seqs), c.T = batch.n_tokens;
    void* work = scratch(Scratch::kLinearAttention,
                         cuda::gated_delta_chunked_scratch_bytes(c.Hv, c.dk, c.dv, c.S));
    cuda::launch_gated_delta_chunked(c, work, stream_);
    FT_CUDA_LAUNCH_CHECK();
    return;
  }
  const dim3 grid(static_cast<unsigned>((p.v_head_dim + 31) / 32), static_cast<unsigned>(p.n_v_heads),
                  static_cast<unsigned>(batch.n_seqs));
  FT_DISPATCH_ACT("gated_delta_rule", "qkv", qkv.dtype, {
    auto launch = [&](auto kernel) {
      kernel<<<grid, 32, 0, stream_>>>(qkv.ptr<T>(), a.data, b.data, ab_code, p.a_log.ptr<float>(),
                                       p.dt_bias.ptr<float>(), ssm_state.ptr<float>(), out.ptr<T>(), p.n_k_heads,
                                       p.n_v_heads, p.v_head_dim, p.v_tiled, p.l2_eps, batch.seq_start.ptr<int32_t>(),
                                       batch.positions.ptr<int32_t>(), batch.state_slots.ptr<int32_t>(),
                                       ssm_state.dim(0));
    };
    switch (p.k_head_dim) {
      case 16: launch(cuda::gated_delta_kernel<T, 16>); break;
      case 32: launch(cuda::gated_delta_kernel<T, 32>); break;
      case 64: launch(cuda::gated_delta_kernel<T, 64>); break;
      case 128: launch(cuda::gated_delta_kernel<T, 128>); break;
      default:
        fail(ErrorCode::kUnsupported, "gated_delta_rule: key head dim {} (the CUDA backend has 16, 32, 64, 128)",
             p.k_head_dim);
    }
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
