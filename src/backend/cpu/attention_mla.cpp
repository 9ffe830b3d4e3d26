// attention_mla: multi-head latent attention in latent space over the paged latent and RoPE-key
// pages (CPU backend). DeepSeek-V2 (arXiv 2405.04434) §2.1.2: with W_UK absorbed into the query and
// W_UV applied after attention, every head attends over the one shared latent c_j (its values too)
// plus the shared rotated key r_j. One work item per (token, head); fp32 max-subtracted softmax.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kv_rows.h"
#include "backend/cpu/simd.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat,
                           const Tensor& q_rope, KvLayer kv, Tensor out) {
  op_checks::attention_mla(p, batch, q_lat, q_rope, kv, out);
  cpu::check_batch("attention_mla", batch);
  cpu::check_dtype("attention_mla", "q_lat", q_lat, DType::F32);
  cpu::check_dtype("attention_mla", "q_rope", q_rope, DType::F32);
  cpu::check_dtype("attention_mla", "out", out, DType::F32);
  cpu::check_kv_pages("attention_mla", kv);
  const int64_t T = batch.n_tokens, H = p.n_head, R = p.kv_lora_rank, P = p.rope_dim;
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  int64_t max_len = 0;  // validate every page read before going parallel (no throwing inside OpenMP)
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b <= pos[t] / page; ++b)
      cpu::page_slot("attention_mla", batch, n_pages, page, si[t], static_cast<int32_t>(b * page));
    max_len = std::max<int64_t>(max_len, pos[t] + 1);
  }
  const int32_t* table = batch.block_tables.ptr<int32_t>();
  // Latents and RoPE keys: one head row a token each (F32 in place, else dequantized).
  const cpu::KvRows crows(kv.k, kv.k_scale), rrows(kv.v, kv.v_scale);
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 4) if (T * H * max_len * R > 262144)
  for (int64_t item = 0; item < T * H; ++item) {
    const int64_t t = item / H, h = item % H;
    thread_local std::vector<float> scores, crow, rrow;
    scores.resize(static_cast<size_t>(max_len));
    crow.resize(static_cast<size_t>(R));
    rrow.resize(static_cast<size_t>(P));
    const float* ql = q_lat.ptr<float>() + (t * H + h) * R;
    const float* qr = q_rope.ptr<float>() + (t * H + h) * P;
    const int32_t* bt = table + static_cast<int64_t>(si[t]) * batch.max_blocks;
    const int64_t hi = pos[t];
    float mx = -INFINITY;
    for (int64_t j = 0; j <= hi; ++j) {
      const int64_t slot = bt[j / page] * page + j % page;
      float sl, sr;
      cpu::dot_rows(ql, crows.head(slot, 0, crow.data()), 0, 1, R, &sl);
      cpu::dot_rows(qr, rrows.head(slot, 0, rrow.data()), 0, 1, P, &sr);
      const float s = (sl + sr) * p.scale;
      scores[static_cast<size_t>(j)] = s;
      mx = std::max(mx, s);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j <= hi; ++j) sum += (scores[static_cast<size_t>(j)] = std::exp(scores[static_cast<size_t>(j)] - mx));
    float* o = out.ptr<float>() + (t * H + h) * R;
    std::memset(o, 0, static_cast<size_t>(R) * 4);
    for (int64_t j = 0; j <= hi; ++j)
      cpu::axpy(scores[static_cast<size_t>(j)], crows.head(bt[j / page] * page + j % page, 0, crow.data()), o, R);
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < R; ++d) o[d] *= inv;
  }
}

}  // namespace ft
