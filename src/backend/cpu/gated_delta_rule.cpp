// gated_delta_rule on the CPU: Gated DeltaNet's recurrence token by token (the recurrent form of
// Yang et al. 2024, arXiv 2412.06464; transformers' torch_recurrent_gated_delta_rule). The chunked
// (WY) form computes the same values with matmuls; on the CPU the recurrent form does as few flops
// (4 dk dv per token and head) and is exact to fp32 rounding. Parallel over (sequence, value head).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv, const Tensor& a,
                              const Tensor& b, Tensor ssm_state, Tensor out) {
  op_checks::gated_delta_rule(p, batch, qkv, a, b, ssm_state, out);
  cpu::check_batch("gated_delta_rule", batch);
  cpu::check_dtype("gated_delta_rule", "qkv", qkv, DType::F32);
  const int64_t Hk = p.n_k_heads, Hv = p.n_v_heads, dk = p.k_head_dim, dv = p.v_head_dim, n_slots = ssm_state.dim(0);
  const int64_t W = qkv.cols(), group = Hv / Hk;
  const int32_t* start = batch.seq_start.ptr<int32_t>();
  const int32_t* pos = batch.positions.ptr<int32_t>();
  cpu::check_state_slots("gated_delta_rule", batch, n_slots);
  const int32_t* slots = batch.state_slots.ptr<int32_t>();
  const float* in = qkv.ptr<float>();
  const float* av = a.ptr<float>();
  const float* bv = b.ptr<float>();
  const float* a_log = p.a_log.ptr<float>();
  const float* dt_bias = p.dt_bias.ptr<float>();
  float* st = ssm_state.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t work = static_cast<int64_t>(batch.n_seqs) * Hv;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 1) if (work > 1)
  for (int64_t w = 0; w < work; ++w) {
    const int32_t s = static_cast<int32_t>(w / Hv);
    const int64_t h = w % Hv, kh = p.v_tiled ? h % Hk : h / group;
    const int64_t t0 = start[s], t1 = start[s + 1];
    if (t1 <= t0) continue;
    float* S = st + (static_cast<int64_t>(slots[s]) * Hv + h) * dk * dv;  // [dk, dv]
    if (pos[t0] == 0)
      for (int64_t i = 0; i < dk * dv; ++i) S[i] = 0.0f;
    std::vector<float> q(static_cast<size_t>(dk)), k(static_cast<size_t>(dk)), u(static_cast<size_t>(dv));
    const float A = -std::exp(a_log[h]);
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = in + t * W;
      const float* qr = row + kh * dk;
      const float* kr = row + Hk * dk + kh * dk;
      const float* vr = row + 2 * Hk * dk + h * dv;
      float qq = 0.0f, kk = 0.0f;
      for (int64_t i = 0; i < dk; ++i) qq += qr[i] * qr[i], kk += kr[i] * kr[i];
      const float qn = q_scale / std::sqrt(qq + p.l2_eps), kn = 1.0f / std::sqrt(kk + p.l2_eps);
      for (int64_t i = 0; i < dk; ++i) q[static_cast<size_t>(i)] = qr[i] * qn, k[static_cast<size_t>(i)] = kr[i] * kn;
      const float x = av[t * Hv + h] + dt_bias[h];
      const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));
      const float decay = std::exp(A * softplus);
      const float beta = 1.0f / (1.0f + std::exp(-bv[t * Hv + h]));
      // u = beta (v - (decay S)^T k), S <- decay S + k u^T, out = S^T q
      for (int64_t j = 0; j < dv; ++j) u[static_cast<size_t>(j)] = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        float* Si = S + i * dv;
        const float ki = k[static_cast<size_t>(i)];
        for (int64_t j = 0; j < dv; ++j) {
          Si[j] *= decay;
          u[static_cast<size_t>(j)] += Si[j] * ki;
        }
      }
      for (int64_t j = 0; j < dv; ++j) u[static_cast<size_t>(j)] = beta * (vr[j] - u[static_cast<size_t>(j)]);
      float* orow = o + t * Hv * dv + h * dv;
      for (int64_t j = 0; j < dv; ++j) orow[j] = 0.0f;
      for (int64_t i = 0; i < dk; ++i) {
        float* Si = S + i * dv;
        const float ki = k[static_cast<size_t>(i)], qi = q[static_cast<size_t>(i)];
        for (int64_t j = 0; j < dv; ++j) {
          Si[j] += ki * u[static_cast<size_t>(j)];
          orow[j] += Si[j] * qi;
        }
      }
    }
  }
}

}  // namespace ft
