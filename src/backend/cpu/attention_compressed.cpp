// attention_compressed: DeepSeek-V4's attention, one shared K=V head over a sliding window of the
// sequence's normalised kv plus its compressed entries (all visible ones, or the indexer's picks),
// with per-head sinks and the output's tail RoPE undone (CPU backend; semantics in ops.h, after
// transformers' DeepseekV4Attention with eager_attention_forward). Key pages F32, or quantized
// (--kv-cache-dtype fp8 / q8_0: each row dequantized, kv_rows.h); entries dense [S, M, hd] or the
// pages' entry rows (KvLayer::e, entry_rows.h; addressed by p.entry_tables when given).
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/entry_rows.h"
#include "backend/cpu/kv_rows.h"
#include "util/error.h"

namespace ft {

void CpuOps::attention_compressed(const CompressedAttentionParams& p, const BatchInfo& batch, const Tensor& q,
                                  KvLayer kv, const Tensor& entries, const Tensor& selected, Tensor out) {
  const char* op = "attention_compressed";
  cpu::check_batch(op, batch);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"out", &out},
                                {"sinks", &p.sinks}, {"inv_freq", &p.rope.inv_freq}})
    cpu::check_dtype(op, name, *t, DType::F32);
  cpu::check_kv_page_tensor(op, "kv.k", kv.k, kv.k_scale);  // F32, or quantized codes and scales
  const int64_t T = batch.n_tokens, nh = p.n_head, hd = p.head_dim;
  if (nh < 1 || hd < 1 || p.window < 1 || p.rope.head_dim != hd || !q.has_shape({T, nh * hd}) ||
      !out.has_shape({T, nh * hd}) || kv.k.ndim != 4 || kv.k.dim(2) != 1 || kv.k.dim(3) != hd ||
      p.sinks.numel() != nh)
    fail(ErrorCode::kInvalidArgument, "{}: q {}, kv.k {}, out {}, sinks {} do not fit {} heads of {}", op, q.str(),
         kv.k.str(), out.str(), p.sinks.str(), nh, hd);
  if (out.data == q.data) fail(ErrorCode::kInvalidArgument, "{}: out must not alias q", op);
  const int64_t n_pages = kv.k.dim(0), ps = kv.k.dim(1);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  const int32_t* ss = batch.seq_start.ptr<int32_t>();
  // Each sequence's entries (pointers looked up, and their errors thrown, outside the parallel region).
  std::vector<std::vector<const float*>> ents(static_cast<size_t>(batch.n_seqs));
  const BatchInfo eb = entry_batch(op, batch, p.entry_tables);  // the entry pages' tables (their own pool's)
  if (!entries.empty()) {
    const cpu::EntryRows rows(op, eb, entries, hd, 0, ps, p.rate);
    for (int32_t s = 0; s < batch.n_seqs; ++s) {
      if (ss[s + 1] <= ss[s]) continue;
      const int64_t n = std::min<int64_t>((int64_t{pos[ss[s + 1] - 1]} + 1) / p.rate, rows.limit());
      for (int64_t w = 0; w < n; ++w) ents[static_cast<size_t>(s)].push_back(rows.at(s, w));
    }
  }
  if (!selected.empty()) {
    cpu::check_dtype(op, "selected", selected, DType::I32);
    if (selected.rows() != T || entries.empty())
      fail(ErrorCode::kInvalidArgument, "{}: selected {} needs [{}, k] rows and entries", op, selected.str(), T);
  }
  const cpu::KvRows pages(kv.k, kv.k_scale);
  for (int64_t t = 0; t < T; ++t)  // page lookups (and their errors) outside the parallel region
    for (int32_t j = std::max(0, pos[t] - p.window + 1); j <= pos[t]; ++j) cpu::page_slot(op, batch, n_pages, ps, si[t], j);
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 1)
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = si[t], P = pos[t];
    // Keys (= values): the window's rotated kv, then the entries this query sees.
    std::vector<float> keys;
    for (int32_t j = std::max(0, P - p.window + 1); j <= P; ++j) {
      const cpu::PageSlot at = cpu::page_slot(op, batch, n_pages, ps, s, j);
      keys.resize(keys.size() + static_cast<size_t>(hd));
      float* k = keys.data() + keys.size() - hd;
      const float* r = pages.head(at.page * ps + at.slot, 0, k);  // F32 in place, else dequantized into k
      if (r != k) std::copy_n(r, hd, k);
      cpu::rope_tail(p.rope, keys.data() + keys.size() - hd, j);
    }
    if (!entries.empty()) {
      const std::vector<const float*>& eb = ents[static_cast<size_t>(s)];
      const int64_t n_vis = std::min<int64_t>((int64_t{P} + 1) / p.rate, static_cast<int64_t>(eb.size()));
      if (selected.empty()) {
        for (int64_t w = 0; w < n_vis; ++w) keys.insert(keys.end(), eb[static_cast<size_t>(w)], eb[static_cast<size_t>(w)] + hd);
      } else {
        const int32_t* sel = selected.ptr<int32_t>() + t * selected.cols();
        for (int64_t j = 0; j < selected.cols(); ++j)
          if (sel[j] >= 0 && sel[j] < n_vis) {
            const float* e = eb[static_cast<size_t>(sel[j])];
            keys.insert(keys.end(), e, e + hd);
          }
      }
    }
    const int64_t n_keys = static_cast<int64_t>(keys.size()) / hd;
    std::vector<float> logit(static_cast<size_t>(n_keys)), qh(static_cast<size_t>(hd));
    for (int64_t h = 0; h < nh; ++h) {
      std::copy_n(q.ptr<float>() + t * nh * hd + h * hd, hd, qh.data());
      cpu::rope_tail(p.rope, qh.data(), P);
      float mx = p.sinks.ptr<float>()[h];
      for (int64_t i = 0; i < n_keys; ++i) {
        float dot = 0.0f;
        for (int64_t d = 0; d < hd; ++d) dot += qh[static_cast<size_t>(d)] * keys[static_cast<size_t>(i * hd + d)];
        logit[static_cast<size_t>(i)] = dot * p.scale;
        mx = std::fmax(mx, logit[static_cast<size_t>(i)]);
      }
      float sum = std::exp(p.sinks.ptr<float>()[h] - mx);
      for (int64_t i = 0; i < n_keys; ++i) sum += (logit[static_cast<size_t>(i)] = std::exp(logit[static_cast<size_t>(i)] - mx));
      float* o = out.ptr<float>() + t * nh * hd + h * hd;
      std::fill_n(o, hd, 0.0f);
      for (int64_t i = 0; i < n_keys; ++i) {
        const float pr = logit[static_cast<size_t>(i)] / sum;
        for (int64_t d = 0; d < hd; ++d) o[d] += pr * keys[static_cast<size_t>(i * hd + d)];
      }
      cpu::rope_tail(p.rope, o, P, -1.0f);
    }
  }
}

}  // namespace ft
