#pragma once
// Token sampling as the backends run it (Ops::sample): one logit row -> one token id, its logprob and
// the top alternatives. One definition, two implementations that agree on it: backend/cpu/sample.cpp
// (also the host sampler's, engine/sampler.h) and backend/cuda/sample.cu (one thread block a row).
//
// The definition, over a row of V float logits x (NaN counts as -inf):
// 1. Raw log-softmax: lse = log(sum exp(x)); the sampled id's logprob is x[id] - lse and the
//    top_logprobs are the N best raw logits (ties to the lower id), as vLLM reports them (before any
//    penalty). A row without a finite logit gives logprob -inf and no alternatives.
// 2. Edits (the row's LogitEdit range, one entry an id): z = x + bias (OpenAI logit_bias, applied first
//    as vLLM does), then the Hugging Face processor chain: repetition penalty on seen ids (z / p when
//    z > 0, else z * p), z -= presence + frequency * count for generated ids, -inf for EOS ids while
//    mask_eos. Other ids keep z = x. Then, when the row names an allowed-token mask (mask_index >= 0:
//    row mask_index of the step's masks, bit id % 32 of word id / 32), z = -inf for every id whose bit
//    is clear (constrained decoding, engine/token_constraint.h).
// 3. m = max z, a = the lowest id holding it. Greedy (temperature <= 0) or m = -inf: a.
// 4. Otherwise thresholds on z, every tie kept or dropped together:
//    - top-k: t_k = the k-th largest z (with multiplicity) when 0 < k < the count of finite z;
//      candidates C = {z >= t_k, finite};
//    - weights w = floor(exp((z - m) / T) * 2^40) as integers (exact sums, equal on both backends);
//    - top-p: t_p = the largest z such that the weight of {i in C : z_i >= t_p} is at least
//      ceil(top_p * weight of C);
//    - min-p: exp((z - m) / T) >= min_p (the best token's is 1);
//    - S = the candidates passing all three (m always does).
// 5. One draw: u = 64 bits of Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2,
//    3", SC'11; Random123) keyed by the request's seed, counter = the tokens it generated before, so a
//    request's draws do not depend on its batch; r = floor(u * W / 2^64) for W the weight of S; the
//    token is the first id of S, in id order, whose running weight exceeds r.
// exp() in step 4 is sample_exp below, written in fmaf steps that both compilers keep as written, so
// the backends compute the same weights bit for bit and draw the same token; the rest is integer
// arithmetic and comparisons. Only the reported logprobs (step 1) use each library's exp and log.
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FT_HOST_DEVICE __host__ __device__
#else
#define FT_HOST_DEVICE
#endif

namespace ft {

/** Most top_logprobs a row reports (OpenAI's limit). */
constexpr int kMaxTopLogprobs = 20;
/** Scale of the integer weights: w = floor(p * 2^40) for p = exp((z - m) / T) in [0, 1]. */
constexpr float kSampleWeightScale = 1099511627776.0f;

/** One logit row's sampling parameters (engine/sampler.h's SamplingParams, resolved for one step). */
struct SampleRow {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t top_logprobs = 0;  // 0..kMaxTopLogprobs
  uint32_t seed_lo = 0, seed_hi = 0;        // Philox key
  uint32_t counter_lo = 0, counter_hi = 0;  // Philox counter (tokens generated before this one)
  int32_t edit_begin = 0, edit_end = 0;     // this row's range of the step's LogitEdit array
  int32_t mask_eos = 0;                     // 1: edits flagged kEditEos get -inf
  int32_t skip = 0;                         // 1: no token is drawn from this row (its result is left as is)
  int32_t mask_index = -1;                  // >= 0: the row of the step's allowed-token masks it obeys
};

/** Words of one allowed-token mask over a vocabulary of V ids (one bit an id). */
FT_HOST_DEVICE inline int64_t sample_mask_words(int64_t V) { return (V + 31) / 32; }

/** Whether `mask` (one row of sample_mask_words(V) words) allows `id`. */
FT_HOST_DEVICE inline bool sample_mask_allows(const uint32_t* mask, int64_t id) {
  return (mask[id >> 5] >> (id & 31)) & 1u;
}

enum LogitEditFlags : uint32_t {
  kEditSeen = 1,  // the id is in the prompt or was generated (repetition penalty)
  kEditEos = 2,   // an EOS id (masked while SampleRow::mask_eos)
};

/** One id's edit in a row (ids unique within a row). `raw` is written by Ops::sample: the id's logit
 *  before the edit. */
struct LogitEdit {
  int32_t id = 0;
  float bias = 0.0f;    // logit_bias
  int32_t count = 0;    // times generated (presence and frequency penalties)
  uint32_t flags = 0;   // LogitEditFlags
  float raw = 0.0f;
};

/** What Ops::sample returns for a row. */
struct SampleResult {
  int32_t id = 0;
  float logprob = 0.0f;
  int32_t n_top = 0;  // entries of top_ids / top_logprobs, best first
  int32_t reserved = 0;
  int32_t top_ids[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};
};

/** Philox4x32-10 (Random123's philox4x32 with 10 rounds): out = the block for `ctr` under `key`. */
FT_HOST_DEVICE inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0, p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/** The row's 64 random bits for its draw (step 5 above). */
FT_HOST_DEVICE inline uint64_t sample_random_bits(const SampleRow& p) {
  const uint32_t ctr[4] = {p.counter_lo, p.counter_hi, 0u, 0u}, key[2] = {p.seed_lo, p.seed_hi};
  uint32_t x[4];
  philox4x32_10(ctr, key, x);
  return (static_cast<uint64_t>(x[0]) << 32) | x[1];
}

/** floor(a * b / 2^64): the draw's point r = sample_mulhi(u, W) in [0, W). */
FT_HOST_DEVICE inline uint64_t sample_mulhi(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}

/** Order-preserving key of a float: a < b (as floats, -inf included) iff key(a) < key(b). */
FT_HOST_DEVICE inline uint32_t sample_order_key(uint32_t bits) {
  return bits ^ ((bits & 0x80000000u) ? 0xFFFFFFFFu : 0x80000000u);
}

/** z after step 2 for one edited id (x already NaN-cleaned to -inf; a NaN result is -inf too). */
FT_HOST_DEVICE inline float sample_edit_logit(float x, const LogitEdit& e, const SampleRow& p, float neg_inf) {
  float z = x + e.bias;
  if ((e.flags & kEditSeen) && p.repetition_penalty != 1.0f)
    z = z > 0.0f ? z / p.repetition_penalty : z * p.repetition_penalty;
  // fmaf, written out: nvcc would contract presence + frequency * count into one itself, gcc not.
  if (e.count > 0) z -= fmaf(p.frequency_penalty, static_cast<float>(e.count), p.presence_penalty);
  if ((e.flags & kEditEos) && p.mask_eos) z = neg_inf;
  return z != z ? neg_inf : z;  // NaN (+inf biased by -inf) counts as -inf, as a NaN logit does
}

/** e^x for x <= 0 (step 4's probabilities), identical on host and device: x = n ln 2 + r with n =
 *  rint(x log2 e) and ln 2 split in two (Cody-Waite), e^r by its Taylor series to r^7 (|r| <= 0.35:
 *  relative error < 1e-7) in fmaf steps, then times 2^n (a normal float: one rounding, vectorisable).
 *  Returns 0 at or below -87 (e^-87 ~ 1.6e-38 weighs 0 anyway) and for -inf and NaN. */
FT_HOST_DEVICE inline float sample_exp(float x) {
  if (!(x > -87.0f)) return 0.0f;
  const float n = rintf(x * 1.44269504f);  // in [-126, 0]
  float r = fmaf(n, -0.693145751953125f, x);
  r = fmaf(n, -1.428606765330187e-06f, r);
  float e = 1.0f / 5040.0f;
  e = fmaf(e, r, 1.0f / 720.0f);
  e = fmaf(e, r, 1.0f / 120.0f);
  e = fmaf(e, r, 1.0f / 24.0f);
  e = fmaf(e, r, 1.0f / 6.0f);
  e = fmaf(e, r, 0.5f);
  e = fmaf(e, r, 1.0f);
  e = fmaf(e, r, 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
#if defined(__CUDA_ARCH__)
  const float scale = __int_as_float(bits);
#else
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
#endif
  return e * scale;
}

/** A candidate's integer weight (step 4) from p = exp((z - m) / T) in [0, 1]. */
FT_HOST_DEVICE inline uint64_t sample_weight(float p) { return static_cast<uint64_t>(p * kSampleWeightScale); }

/** The top-p target weight: ceil(top_p * total) (>= 1). */
FT_HOST_DEVICE inline uint64_t sample_top_p_target(float top_p, uint64_t total) {
  const double t = static_cast<double>(top_p) * static_cast<double>(total);
  uint64_t target = static_cast<uint64_t>(t);
  if (static_cast<double>(target) < t) ++target;
  return target < 1 ? 1 : target;
}

}  // namespace ft
