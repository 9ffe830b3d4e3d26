// attention_qsa on the CPU: Qwen4-Exp's sparse attention (transformers Qwen4ExpTextAttention under the
// mask of its QSA indexer): each query attends to the tokens of its selected key blocks and to the
// tail of its own incomplete block. One work item per (token, query head); fp32 max-subtracted
// softmax over the chosen positions in increasing order. Semantics in ops.h.
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

void CpuOps::attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q,
                           KvLayer kv, const Tensor& selected, Tensor out) {
  const char* op = "attention_qsa";
  cpu::check_batch(op, batch);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"out", &out}})
    cpu::check_dtype(op, name, *t, DType::F32);
  cpu::check_kv_pages(op, kv);
  cpu::check_dtype(op, "selected", selected, DType::I32);
  op_checks::attention_qsa(p, block, batch, q, kv, selected, out);
  const int64_t T = batch.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1);
  const int64_t K = selected.cols();
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  const int32_t* sel = selected.ptr<int32_t>();
  // The key positions of every query, validated before going parallel (no throwing inside OpenMP).
  std::vector<std::vector<int32_t>> keys(static_cast<size_t>(T));
  int64_t max_len = 0;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t>& ks = keys[static_cast<size_t>(t)];
    const int64_t tail = (int64_t{pos[t]} + 1) / block * block;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t w = sel[t * K + j];
      if (w < 0) continue;
      if ((w + 1) * block > tail)
        fail(ErrorCode::kInvalidArgument, "{}: token {} at position {} selects block {} it cannot see", op, t, pos[t], w);
      for (int64_t i = w * block; i < (w + 1) * block; ++i) ks.push_back(static_cast<int32_t>(i));
    }
    for (int64_t i = tail; i <= pos[t]; ++i) ks.push_back(static_cast<int32_t>(i));
    std::sort(ks.begin(), ks.end());
    ks.erase(std::unique(ks.begin(), ks.end()), ks.end());
    for (int32_t i : ks) cpu::page_slot(op, batch, n_pages, page, si[t], i);
    max_len = std::max<int64_t>(max_len, static_cast<int64_t>(ks.size()));
  }
  const int32_t* table = batch.block_tables.ptr<int32_t>();
  // Keys a head row each; a value row holds the query heads' values at g * D (and, for Qwen4-Exp,
  // the indexer's columns after them), in heads of any width: F32 in place, else the heads dequantized.
  const cpu::KvRows krows(kv.k, kv.k_scale), vrows(kv.v, kv.v_scale);
  const int64_t vdim = kv.v.dim(3);
  const int64_t group = H / G;
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 4) if (T * H * max_len * D > 262144)
  for (int64_t item = 0; item < T * H; ++item) {
    const int64_t t = item / H, h = item % H, g = h / group;
    const std::vector<int32_t>& ks = keys[static_cast<size_t>(t)];
    thread_local std::vector<float> scores, krow, vrow;
    scores.resize(ks.size());
    krow.resize(static_cast<size_t>(D));
    vrow.resize(static_cast<size_t>(D + 2 * vdim));
    const float* qv = q.ptr<float>() + t * H * D + h * D;
    const int32_t* bt = table + static_cast<int64_t>(si[t]) * batch.max_blocks;
    float mx = -INFINITY;
    for (size_t i = 0; i < ks.size(); ++i) {
      const int64_t j = ks[i];
      const float* kr = krows.head(bt[j / page] * page + j % page, g, krow.data());
      float s;
      cpu::dot_rows(qv, kr, 0, 1, D, &s);
      scores[i] = s * p.scale;
      mx = std::max(mx, scores[i]);
    }
    float sum = 0.0f;
    for (float& s : scores) {
      s = std::exp(s - mx);
      sum += s;
    }
    float* o = out.ptr<float>() + t * H * D + h * D;
    std::memset(o, 0, static_cast<size_t>(D) * 4);
    for (size_t i = 0; i < ks.size(); ++i) {
      const int64_t j = ks[i];
      // The value: columns [g D, (g + 1) D) of the row (in one or more heads of vdim).
      cpu::axpy(scores[i], vrows.cols(bt[j / page] * page + j % page, g * D, D, vrow.data()), o, D);
    }
    const float inv = 1.0f / sum;
    for (int64_t d = 0; d < D; ++d) o[d] *= inv;
  }
}

}  // namespace ft
