// sample: one token from each logit row, by the sampler backend/sampling.h defines (CPU backend; also
// the host sampler's, engine/sampler.h). The top-k threshold by nth_element on the order keys, the
// top-p one by the same radix digits as the CUDA twin (backend/cuda/sample.cu). One core, 152k
// logits (development machine): greedy 0.8 ms, top-p 2.5 ms (a sort of the candidates took 24 ms).
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

/** The largest key v such that the members (weight > 0) with key >= v weigh at least `target` (given
 *  that all of them do): the same three radix digits (12, 10, 10 bits) as the CUDA kernels. */
uint32_t select_key(const uint32_t* keys, const uint64_t* w, int64_t V, uint64_t target,
                    std::vector<uint64_t>& hist) {
  constexpr int kShift[3] = {20, 10, 0}, kBits[3] = {12, 10, 10};
  uint32_t prefix = 0;
  uint64_t above = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level], nb = 1 << kBits[level];
    const uint32_t mask_hi = level == 0 ? 0u : ~((1u << (shift + kBits[level])) - 1u);
    hist.assign(static_cast<size_t>(nb), 0);
    for (int64_t i = 0; i < V; ++i)
      if (w[i] && (keys[i] & mask_hi) == prefix) hist[(keys[i] >> shift) & static_cast<uint32_t>(nb - 1)] += w[i];
    uint64_t cum = above;
    int bin = 0;
    for (int b = nb - 1; b >= 0; --b) {
      if (cum + hist[static_cast<size_t>(b)] >= target) {
        bin = b;
        break;
      }
      cum += hist[static_cast<size_t>(b)];
    }
    prefix |= static_cast<uint32_t>(bin) << shift;
    above = cum;
  }
  return prefix;
}

// The per-logit loops in two builds of the same code: the baseline (x86-64-v2: fmaf from libm) and,
// where the CPU has them, AVX2 + FMA (fmaf in hardware). An fma rounds once either way, so both give
// the same bits.
#define FT_SAMPLE_LOOPS(SUFFIX, ATTR)                                                                     \
  /** sum of exp(x[i] - mx) over the row (NaN as -inf). */                                            \
  ATTR double exp_sum_##SUFFIX(const float* x, int64_t V, float mx) {                                   \
    double total = 0.0;                                                                                 \
    for (int64_t i0 = 0; i0 < V; i0 += 4096) {                                                          \
      const int64_t n = std::min<int64_t>(4096, V - i0);                                                \
      float part = 0.0f;                                                                                \
      _Pragma("omp simd reduction(+ : part)") for (int64_t i = 0; i < n; ++i) {                          \
        const float v = x[i0 + i];                                                                      \
        part += sample_exp((v != v ? kNegInf : v) - mx);                                                \
      }                                                                                                 \
      total += part;                                                                                    \
    }                                                                                                   \
    return total;                                                                                       \
  }                                                                                                     \
  /** p[i] = exp((z[i] - m) / T) (0 for -inf) and its order key. */                                   \
  ATTR void probs_##SUFFIX(const float* z, int64_t V, float m, float inv_t, float* p, uint32_t* keys) {  \
    _Pragma("omp simd") for (int64_t i = 0; i < V; ++i) {                                                \
      p[i] = sample_exp((z[i] - m) * inv_t);                                                            \
      uint32_t bits;                                                                                    \
      std::memcpy(&bits, &z[i], sizeof bits);                                                           \
      keys[i] = sample_order_key(bits);                                                                 \
    }                                                                                                   \
  }

FT_SAMPLE_LOOPS(base, )
#if defined(__x86_64__)
FT_SAMPLE_LOOPS(fma, __attribute__((target("avx2,fma"))))
const bool kHasFma = [] {
  __builtin_cpu_init();  // static initialisation may run before libgcc's
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}();
#else
constexpr bool kHasFma = false;
#endif

double exp_sum(const float* x, int64_t V, float mx) {
#if defined(__x86_64__)
  if (kHasFma) return exp_sum_fma(x, V, mx);
#endif
  return exp_sum_base(x, V, mx);
}

void probs(const float* z, int64_t V, float m, float inv_t, float* p, uint32_t* keys) {
#if defined(__x86_64__)
  if (kHasFma) return probs_fma(z, V, m, inv_t, p, keys);
#endif
  probs_base(z, V, m, inv_t, p, keys);
}

/** Scratch of sample_row, grown to the vocabulary once. */
struct SampleScratch {
  std::vector<float> z;         // [V] edited logits
  std::vector<int32_t> order;   // [V] ids (top_logprobs)
  std::vector<float> p;         // [V] exp((z - m) / T)
  std::vector<uint32_t> keys;   // [V] order keys of z
  std::vector<uint64_t> w;      // [V] integer weights
  std::vector<uint32_t> sorted; // finite keys (top-k)
  std::vector<uint64_t> hist;   // radix histogram (top-p)
};

/** Samples one token from the logit row x [V]: `p` names its range of `edits`; the result to `out`. */
void sample_row(const float* x, int64_t V, const SampleRow& p, LogitEdit* edits, const uint32_t* mask,
                SampleResult& out, SampleScratch& s) {
  // 1. Raw log-softmax and the top_logprobs.
  float xmax = kNegInf;
  for (int64_t i = 0; i < V; ++i) xmax = std::max(xmax, clean(x[i]));
  // The sum by sample_exp (relative error < 1e-7; the logprobs are reported values only, the draw does
  // not read them).
  const float lse = xmax == kNegInf ? kNegInf : xmax + static_cast<float>(std::log(exp_sum(x, V, xmax)));
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
  if (mask)  // the allowed-token mask: -inf outside it
    for (int64_t i = 0; i < V; ++i)
      if (!sample_mask_allows(mask, i)) s.z[static_cast<size_t>(i)] = kNegInf;
  const float* z = s.z.data();
  // 3. Greedy: the lowest id holding the maximum.
  float m = kNegInf;
  int32_t id = 0;
  int64_t n_finite = 0;
  for (int64_t i = 0; i < V; ++i) {
    if (z[i] > m) m = z[i], id = static_cast<int32_t>(i);
    n_finite += z[i] != kNegInf;
  }
  // 4-5. Thresholds and one draw, over each logit's probability, weight and key computed once.
  if (p.temperature > 0.0f && m != kNegInf) {
    const float inv_t = 1.0f / p.temperature;
    s.p.resize(static_cast<size_t>(V));
    s.keys.resize(static_cast<size_t>(V));
    s.w.resize(static_cast<size_t>(V));
    probs(z, V, m, inv_t, s.p.data(), s.keys.data());
    uint32_t tk = 0, tp = 0;
    if (p.top_k > 0 && p.top_k < n_finite) {
      s.sorted.clear();
      for (int64_t i = 0; i < V; ++i)
        if (z[i] != kNegInf) s.sorted.push_back(s.keys[static_cast<size_t>(i)]);
      std::nth_element(s.sorted.begin(), s.sorted.begin() + (p.top_k - 1), s.sorted.end(), std::greater<uint32_t>());
      tk = s.sorted[static_cast<size_t>(p.top_k - 1)];
    }
    // Candidates: finite and at or above the top-k threshold, weighing their probability.
    uint64_t total = 0;
    for (int64_t i = 0; i < V; ++i) {
      const auto u = static_cast<size_t>(i);
      s.w[u] = z[i] != kNegInf && s.keys[u] >= tk ? sample_weight(s.p[u]) : 0;
      total += s.w[u];
    }
    if (p.top_p < 1.0f) tp = select_key(s.keys.data(), s.w.data(), V, sample_top_p_target(p.top_p, total), s.hist);
    const uint32_t t = std::max(tk, tp);
    uint64_t W = 0;
    for (int64_t i = 0; i < V; ++i) {
      const auto u = static_cast<size_t>(i);
      if (s.keys[u] < t || !(s.p[u] >= p.min_p)) s.w[u] = 0;
      W += s.w[u];
    }
    const uint64_t r = sample_mulhi(sample_random_bits(p), W);
    uint64_t cum = 0;
    for (int64_t i = 0; i < V; ++i) {
      cum += s.w[static_cast<size_t>(i)];
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

}  // namespace

void sample_rows(const float* logits, int64_t V, const SampleRow* rows, int64_t R, LogitEdit* edits,
                 SampleResult* out, const uint32_t* masks) {
  thread_local SampleScratch scratch;
  const int64_t words = sample_mask_words(V);
  for (int64_t r = 0; r < R; ++r) {
    if (rows[r].skip) continue;
    const uint32_t* mask = masks && rows[r].mask_index >= 0 ? masks + rows[r].mask_index * words : nullptr;
    sample_row(logits + r * V, V, rows[r], edits, mask, out[r], scratch);
  }
}

}  // namespace cpu

void CpuOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
                    const SampleRow* /*host_rows*/, const Tensor& masks) {
  cpu::check_dtype("sample", "logits", logits, DType::F32);
  cpu::check_cpu("sample", "rows", rows);
  cpu::check_cpu("sample", "out", out);
  const int64_t R = logits.rows(), V = logits.cols();
  const int64_t n_edits = op_checks::sample(logits, rows, edits, out);
  const auto* rp = static_cast<const SampleRow*>(rows.data);
  auto* ep = n_edits > 0 ? static_cast<LogitEdit*>(edits.data) : nullptr;
  auto* op = static_cast<SampleResult*>(out.data);
  op_checks::sample_edits("sample", rp, R, ep, n_edits, V);
  if (!masks.empty()) cpu::check_cpu("sample", "masks", masks);
  const int64_t M = op_checks::sample_mask_count("sample", masks, V);
  op_checks::sample_mask_rows("sample", rp, R, M);
  cpu::sample_rows(logits.ptr<float>(), V, rp, R, ep, op, M > 0 ? static_cast<const uint32_t*>(masks.data) : nullptr);
}

}  // namespace ft
