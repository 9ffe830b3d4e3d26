// indexer_topk: DeepSeek-V4's lightning indexer, the top-k compressed entries of each query (CPU
// backend; semantics in ops.h, after transformers' DeepseekV4Indexer and DeepseekV4IndexerScorer).
// Scores tie exactly whenever the ReLU zeroes every head (common), so the selection among equal
// scores matters: it is torch.topk's on the CPU (ATen's TopKImpl: (score, index) pairs in index
// order over the sequence's n entries, masked ones at -inf; std::partial_sort of the first k when
// 64 k <= n, else std::nth_element at k - 1 and std::sort of the first k - 1; a comparator on the
// score alone), which is what the reference logits were computed with. Keys dense [S, M, hd] or the
// KV pages' entry rows (KvLayer::e at IndexerParams::key_col, entry_rows.h).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/entry_rows.h"
#include "util/error.h"

namespace ft {

void CpuOps::indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                          const Tensor& keys, Tensor ids) {
  const char* op = "indexer_topk";
  cpu::check_batch(op, batch);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"q", &q}, {"w", &w},
                                {"inv_freq", &p.rope.inv_freq}})
    cpu::check_dtype(op, name, *t, DType::F32);
  cpu::check_dtype(op, "ids", ids, DType::I32);
  const int64_t T = batch.n_tokens, nh = p.n_head, hd = p.head_dim, K = p.top_k;
  if (nh < 1 || hd < 1 || K < 1 || p.rate < 1 || p.rope.head_dim != hd || !q.has_shape({T, nh * hd}) ||
      !w.has_shape({T, nh}) || !ids.has_shape({T, K}))
    fail(ErrorCode::kInvalidArgument, "{}: q {}, w {}, keys {}, ids {} do not fit {} heads of {} and top_k {}", op,
         q.str(), w.str(), keys.str(), ids.str(), nh, hd, K);
  const cpu::EntryRows rows(op, batch, keys, hd, keys.ndim == 4 ? p.key_col : 0, p.page_size, p.rate);
  const int64_t M = rows.limit();
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  const int32_t* ss = batch.seq_start.ptr<int32_t>();
  // Each sequence's keys (looked up, and their errors thrown, outside the parallel region).
  std::vector<std::vector<const float*>> kseq(static_cast<size_t>(batch.n_seqs));
  for (int32_t s = 0; s < batch.n_seqs; ++s) {
    if (ss[s + 1] <= ss[s]) continue;
    const int64_t n = std::min<int64_t>((int64_t{pos[ss[s + 1] - 1]} + 1) / p.rate, M);
    for (int64_t e = 0; e < n; ++e) kseq[static_cast<size_t>(s)].push_back(rows.at(s, e));
  }
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float weight_scale = 1.0f / std::sqrt(static_cast<float>(nh));
#pragma omp parallel for num_threads(n_threads_) schedule(dynamic, 1)
  for (int64_t t = 0; t < T; ++t) {
    const int64_t n_vis = std::min<int64_t>((int64_t{pos[t]} + 1) / p.rate, M);
    std::vector<float> qr(q.ptr<float>() + t * nh * hd, q.ptr<float>() + (t + 1) * nh * hd);
    for (int64_t h = 0; h < nh; ++h) cpu::rope_tail(p.rope, qr.data() + h * hd, pos[t]);
    const std::vector<const float*>& kb = kseq[static_cast<size_t>(si[t])];
    // Every entry of the sequence so far competes (n of them); those the query cannot see yet score -inf.
    // (per_query: only the query's own visible entries, as Qwen4-Exp's indexer ranks them.)
    const int64_t n = p.per_query ? n_vis : std::min<int64_t>((int64_t{pos[ss[si[t] + 1] - 1]} + 1) / p.rate, M);
    std::vector<std::pair<float, int32_t>> cand(static_cast<size_t>(n));
    for (int64_t e = 0; e < n; ++e) {
      float total = -INFINITY;
      if (e < n_vis) {
        total = 0.0f;
        for (int64_t h = 0; h < nh; ++h) {
          float dot = 0.0f;
          const float* key = kb[static_cast<size_t>(e)];
          for (int64_t d = 0; d < hd; ++d) dot += qr[static_cast<size_t>(h * hd + d)] * key[d];
          total += std::max(dot, 0.0f) * softmax_scale * (w.ptr<float>()[t * nh + h] * weight_scale);
        }
      }
      cand[static_cast<size_t>(e)] = {total, static_cast<int32_t>(e)};
    }
    const int64_t k = std::min<int64_t>(K, n);
    auto better = [](const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
      return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
    };
    if (k > 0 && k * 64 <= n) {
      std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), better);
    } else if (k > 0) {
      std::nth_element(cand.begin(), cand.begin() + (k - 1), cand.end(), better);
      std::sort(cand.begin(), cand.begin() + (k - 1), better);
    }
    int32_t* out = ids.ptr<int32_t>() + t * K;
    for (int64_t j = 0; j < K; ++j)
      out[j] = j < k && cand[static_cast<size_t>(j)].second < n_vis ? cand[static_cast<size_t>(j)].second : -1;
  }
}

}  // namespace ft
