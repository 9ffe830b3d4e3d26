// sample: one token from each logit row, by the sampler backend/sampling.h defines (CPU backend; also
// the host sampler's, engine/sampler.h). Thresholds by sorting the candidates' order keys; the CUDA
// twin (backend/cuda/sample.cu) finds the same thresholds by radix select.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {
namespace cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline float clean(float x) { return std::isnan(x) ? kNegInf : x; }

inline uint32_t key_of(float z) {
  uint32_t bits;
  std::memcpy(&bits, &z, sizeof bits);
  return sample_order_key(bits);
}

/** The largest key v among `cand` whose members with key >= v weigh at least `target` (sorts cand). */
uint32_t select_key(std::vector<std::pair<uint32_t, uint64_t>>& cand, uint64_t target) {
  std::sort(cand.begin(), cand.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  uint64_t cum = 0;
  for (size_t i = 0; i < cand.size();) {
    const uint32_t key = cand[i].first;
    for (; i < cand.size() && cand[i].first == key; ++i) cum += cand[i].second;
    if (cum >= target) return key;
  }
  return cand.empty() ? 0 : cand.back().first;  // unreachable when target <= the total weight
}

}  // namespace

void sample_row(const float* x, int64_t V, const SampleRow& p, LogitEdit* edits, SampleResult& out,
                SampleScratch& s) {
  // 1. Raw log-softmax and the top_logprobs.
  float xmax = kNegInf;
  for (int64_t i = 0; i < V; ++i) xmax = std::max(xmax, clean(x[i]));
  float lse = kNegInf;
  if (xmax != kNegInf) {
    double sum = 0.0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(clean(x[i]) - xmax));
    lse = xmax + static_cast<float>(std::log(sum));
  }
  out.n_top = 0;
  if (p.top_logprobs > 0 && xmax != kNegInf) {
    const int64_t n = std::min<int64_t>({p.top_logprobs, kMaxTopLogprobs, V});
    s.order.resize(static_cast<size_t>(V));
    std::iota(s.order.begin(), s.order.end(), 0);
    std::partial_sort(s.order.begin(), s.order.begin() + n, s.order.end(), [&](int32_t a, int32_t b) {
      const float la = clean(x[a]), lb = clean(x[b]);
      return la > lb || (la == lb && a < b);
    });
    for (int64_t j = 0; j < n; ++j) {
      out.top_ids[j] = s.order[static_cast<size_t>(j)];
      out.top_logprobs[j] = clean(x[s.order[static_cast<size_t>(j)]]) - lse;
    }
    out.n_top = static_cast<int32_t>(n);
  }
  // 2. Edits.
  s.z.resize(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) s.z[static_cast<size_t>(i)] = clean(x[i]);
  for (int32_t j = p.edit_begin; j < p.edit_end; ++j) {
    LogitEdit& e = edits[j];
    e.raw = s.z[static_cast<size_t>(e.id)];
    s.z[static_cast<size_t>(e.id)] = sample_edit_logit(e.raw, e, p, kNegInf);
  }
  const float* z = s.z.data();
  // 3. Greedy: the lowest id holding the maximum.
  float m = kNegInf;
  int32_t id = 0;
  int64_t n_finite = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (z[i] > m) m = z[i], id = static_cast<int32_t>(i);
    n_finite += z[i] != kNegInf;
  }
  // 4-5. Thresholds and one draw.
  if (p.temperature > 0.0f && m != kNegInf) {
    uint32_t tk = 0, tp = 0;
    if (p.top_k > 0 && p.top_k < n_finite) {
      s.keys.clear();
      for (int64_t i = 0; i < V; ++i)
        if (z[i] != kNegInf) s.keys.push_back(key_of(z[i]));
      std::nth_element(s.keys.begin(), s.keys.begin() + (p.top_k - 1), s.keys.end(), std::greater<uint32_t>());
      tk = s.keys[static_cast<size_t>(p.top_k - 1)];
    }
    const float inv_t = 1.0f / p.temperature;
    auto prob = [&](float zi) { return sample_exp((zi - m) * inv_t); };
    if (p.top_p < 1.0f) {
      s.cand.clear();
      uint64_t total = 0;
      for (int64_t i = 0; i < V; ++i) {
        const uint32_t key = key_of(z[i]);
        if (z[i] == kNegInf || key < tk) continue;
        const uint64_t w = sample_weight(prob(z[i]));
        s.cand.emplace_back(key, w);
        total += w;
      }
      tp = select_key(s.cand, sample_top_p_target(p.top_p, total));
    }
    const uint32_t t = std::max(tk, tp);
    auto weight = [&](float zi) -> uint64_t {
      if (zi == kNegInf || key_of(zi) < t) return 0;
      const float pr = prob(zi);
      return pr >= p.min_p ? sample_weight(pr) : 0;
    };
    uint64_t W = 0;
    for (int64_t i = 0; i < V; ++i) W += weight(z[i]);
    const uint64_t r = sample_mulhi(sample_random_bits(p), W);
    uint64_t cum = 0;
    for (int64_t i = 0; i < V; ++i) {
      cum += weight(z[i]);
      if (cum > r) {
        id = static_cast<int32_t>(i);
        break;
      }
    }
  }
  out.id = id;
  float raw = clean(x[id]);
  for (int32_t j = p.edit_begin; j < p.edit_end; ++j)
    if (edits[j].id == id) raw = edits[j].raw;
  out.logprob = lse == kNegInf ? kNegInf : raw - lse;
}

}  // namespace cpu

void CpuOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
                    const SampleRow* /*host_rows*/) {
  cpu::check_dtype("sample", "logits", logits, DType::F32);
  cpu::check_cpu("sample", "rows", rows);
  cpu::check_cpu("sample", "out", out);
  const int64_t R = logits.rows(), V = logits.cols();
  const int64_t n_edits = op_checks::sample(logits, rows, edits, out);
  const auto* rp = static_cast<const SampleRow*>(rows.data);
  auto* ep = n_edits > 0 ? static_cast<LogitEdit*>(edits.data) : nullptr;
  auto* op = static_cast<SampleResult*>(out.data);
  thread_local cpu::SampleScratch scratch;
  for (int64_t r = 0; r < R; ++r) {
    const SampleRow& p = rp[r];
    if (p.skip) continue;
    if (p.edit_begin < 0 || p.edit_end < p.edit_begin || p.edit_end > n_edits)
      fail(ErrorCode::kInvalidArgument, "sample: row {} names edits [{}, {}) of {}", r, p.edit_begin, p.edit_end,
           n_edits);
    for (int32_t j = p.edit_begin; j < p.edit_end; ++j)
      if (ep[j].id < 0 || ep[j].id >= V)
        fail(ErrorCode::kInvalidArgument, "sample: row {} edits id {} outside the vocabulary [0, {})", r, ep[j].id, V);
    cpu::sample_row(logits.ptr<float>() + r * V, V, p, ep, op[r], scratch);
  }
}

}  // namespace ft
