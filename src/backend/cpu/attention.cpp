// attention: causal GQA attention of the batch's queries over the paged KV cache (CPU backend).
// One work item per (token, query head) — over quantized pages per (token, several query heads of one
// KV head) — scores over the sequence's keys in position order, fp32 max-subtracted softmax (with the
// head's sink logit in the denominator when p.sinks is set), weighted sum of values. Independent of
// what else is in the batch. Quantized pages (fp8 / q8_0) are dequantized a head row at a time as
// they are read (kv_rows.h), once for the item's heads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kv_rows.h"
#include "backend/op_checks.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft {

void CpuOps::attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv, Tensor out,
                       ActQ8* out_q8) {
  if (out_q8) *out_q8 = ActQ8{};  // the CPU writes no int8 form
  cpu::check_batch("attention", batch);
  cpu::check_dtype("attention", "q", q, DType::F32);
  cpu::check_dtype("attention", "out", out, DType::F32);
  cpu::check_kv_pages("attention", kv);
  cpu::check_same_shape("attention", "out", out, q);
  cpu::check_same_shape("attention", "kv.v", kv.v, kv.k);
  const int64_t T = batch.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  if (H <= 0 || G <= 0 || D <= 0 || H % G != 0)
    fail(ErrorCode::kInvalidArgument, "attention: n_head {} must be a positive multiple of n_head_kv {} (head_dim {})",
         H, G, D);
  if (q.rows() != T || q.cols() != H * D)
    fail(ErrorCode::kInvalidArgument, "attention: q {} must be [{}, {}] (tokens, n_head x head_dim)", q.str(), T, H * D);
  if (kv.k.ndim != 4 || kv.k.dim(2) != G || kv.k.dim(3) != D)
    fail(ErrorCode::kInvalidArgument, "attention: kv.k {} must be [pages, page_size, {}, {}]", kv.k.str(), G, D);
  op_checks::attention_sinks("attention", p);
  if (!p.sinks.empty()) cpu::check_cpu("attention", "sinks", p.sinks);
  const float* sinks = p.sinks.empty() ? nullptr : p.sinks.ptr<float>();
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  const int64_t window = p.sliding_window;
  auto first_pos = [window](int64_t pp) { return window > 0 ? std::max<int64_t>(0, pp - window + 1) : 0; };
  // Validate every page the queries will read before going parallel (no throwing inside OpenMP).
  int64_t max_len = 0;
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = first_pos(pos[t]) / page; b <= pos[t] / page; ++b)
      cpu::page_slot("attention", batch, n_pages, page, si[t], static_cast<int32_t>(b * page));
    max_len = std::max<int64_t>(max_len, pos[t] - first_pos(pos[t]) + 1);
  }
  const int32_t* table = batch.block_tables.ptr<int32_t>();
  const cpu::KvRows krows(kv.k, kv.k_scale), vrows(kv.v, kv.v_scale);  // F32 in place, else dequantized
  const int64_t group = H / G;
  // An item is `hc` query heads of one KV head at one token: each key and value row it reads is
  // dequantized once for all of them. F32 pages are read in place (hc 1: the most items); quantized
  // ones take the largest divisor of the group that still leaves 4 items a thread. Each head's sums
  // run in the same order whatever hc is, so the result does not depend on it.
  int64_t hc = 1;
  if (kv.quantized())
    for (hc = group; hc > 1; --hc)
      if (group % hc == 0 && T * (H / hc) >= 4 * int64_t{n_threads_}) break;
  const int64_t n_hc = H / hc;
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 4) if (T * H * max_len * D > 262144)
  for (int64_t item = 0; item < T * n_hc; ++item) {
    const int64_t t = item / n_hc, h0 = (item % n_hc) * hc, g = h0 / group;
    thread_local std::vector<float> scores, row, inv;
    scores.resize(static_cast<size_t>(hc * max_len));
    inv.resize(static_cast<size_t>(hc));
    row.resize(static_cast<size_t>(D));
    const int32_t* bt = table + static_cast<int64_t>(si[t]) * batch.max_blocks;
    const int64_t lo = first_pos(pos[t]), hi = pos[t], n = hi - lo + 1;
    for (int64_t j = lo; j <= hi; ++j) {
      const float* kr = krows.head(bt[j / page] * page + j % page, g, row.data());
      for (int64_t i = 0; i < hc; ++i) {
        float s;
        cpu::dot_rows(q.ptr<float>() + t * H * D + (h0 + i) * D, kr, 0, 1, D, &s);
        scores[static_cast<size_t>(i * max_len + j - lo)] = s * p.scale;
      }
    }
    for (int64_t i = 0; i < hc; ++i) {
      float* sc = scores.data() + i * max_len;
      const int64_t h = h0 + i;
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) mx = std::max(mx, sc[j]);
      if (sinks) mx = std::max(mx, sinks[h]);
      float sum = sinks ? std::exp(sinks[h] - mx) : 0.0f;  // the sink: in the denominator, no value
      for (int64_t j = 0; j < n; ++j) {
        sc[j] = std::exp(sc[j] - mx);
        sum += sc[j];
      }
      inv[static_cast<size_t>(i)] = 1.0f / sum;
      std::memset(out.ptr<float>() + t * H * D + h * D, 0, static_cast<size_t>(D) * 4);
    }
    for (int64_t j = lo; j <= hi; ++j) {
      const float* vr = vrows.head(bt[j / page] * page + j % page, g, row.data());
      for (int64_t i = 0; i < hc; ++i)
        cpu::axpy(scores[static_cast<size_t>(i * max_len + j - lo)], vr, out.ptr<float>() + t * H * D + (h0 + i) * D, D);
    }
    for (int64_t i = 0; i < hc; ++i) {
      float* o = out.ptr<float>() + t * H * D + (h0 + i) * D;
      for (int64_t d = 0; d < D; ++d) o[d] *= inv[static_cast<size_t>(i)];
    }
  }
}

}  // namespace ft
