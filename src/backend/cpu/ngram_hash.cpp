// ngram_hash on the CPU: Qwen4-Exp's hashed n-gram ids (transformers Qwen4ExpTextNGramEmbedding:
// tokens shifted right within EOS-separated segments, mixed by xor of products with per-layer odd
// multipliers, reduced modulo each head's prime table size). Semantics in ops.h. Sequential over
// each sequence's rows (a few integer operations per id).
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens, const Tensor& mult,
                        const Tensor& sizes, const Tensor& offsets, Tensor history, Tensor ids) {
  const char* op = "ngram_hash";
  cpu::check_batch(op, batch);
  cpu::check_dtype(op, "tokens", tokens, DType::I32);
  cpu::check_dtype(op, "mult", mult, DType::I64);
  cpu::check_dtype(op, "sizes", sizes, DType::I64);
  cpu::check_dtype(op, "offsets", offsets, DType::I64);
  cpu::check_dtype(op, "history", history, DType::I32);
  cpu::check_dtype(op, "ids", ids, DType::I32);
  const int64_t T = batch.n_tokens, n = p.n, ctx = n - 1, nh = ctx * p.heads;
  if (n < 2 || p.heads < 1 || tokens.numel() != T || !mult.has_shape({n}) || !sizes.has_shape({nh}) ||
      !offsets.has_shape({nh}) || history.ndim != 2 || history.dim(1) != ctx || !ids.has_shape({T, nh}))
    fail(ErrorCode::kInvalidArgument, "{}: tokens {}, mult {}, sizes {}, offsets {}, history {}, ids {} do not fit "
         "n-grams of up to {} tokens with {} heads each", op, tokens.str(), mult.str(), sizes.str(), offsets.str(),
         history.str(), ids.str(), n, p.heads);
  cpu::check_state_slots(op, batch, history.dim(0));
  const int64_t* m = mult.ptr<int64_t>();
  const int64_t* sz = sizes.ptr<int64_t>();
  const int64_t* off = offsets.ptr<int64_t>();
  for (int64_t h = 0; h < nh; ++h)
    if (sz[h] < 1) fail(ErrorCode::kInvalidArgument, "{}: head {} has table size {}", op, h, sz[h]);
  const int32_t* tok = tokens.ptr<int32_t>();
  const int32_t* start = batch.seq_start.ptr<int32_t>();
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* slots = batch.state_slots.ptr<int32_t>();
  int32_t* out = ids.ptr<int32_t>();
  std::vector<int64_t> seq;     // the history then this step's tokens
  std::vector<int64_t> shifted(static_cast<size_t>(n));
  for (int32_t s = 0; s < batch.n_seqs; ++s) {
    const int64_t t0 = start[s], t1 = start[s + 1];
    if (t1 <= t0) continue;
    int32_t* hist = history.ptr<int32_t>() + int64_t{slots[s]} * ctx;
    seq.assign(static_cast<size_t>(ctx), p.eos);
    if (pos[t0] > 0)
      for (int64_t j = 0; j < ctx; ++j) seq[static_cast<size_t>(j)] = hist[j];
    for (int64_t t = t0; t < t1; ++t) seq.push_back(tok[t]);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i = ctx + (t - t0);  // this token in seq
      bool broken = false;
      shifted[0] = seq[static_cast<size_t>(i)];
      for (int64_t j = 1; j < n; ++j) {
        const int64_t v = seq[static_cast<size_t>(i - j)];
        broken = broken || v == p.eos;
        shifted[static_cast<size_t>(j)] = broken ? p.eos : v;
      }
      int64_t mixed = shifted[0] * m[0];
      for (int64_t g = 2; g <= n; ++g) {
        mixed ^= shifted[static_cast<size_t>(g - 1)] * m[g - 1];
        for (int64_t k = 0; k < p.heads; ++k) {
          const int64_t h = (g - 2) * p.heads + k;
          out[t * nh + h] = static_cast<int32_t>(mixed % sz[h] + off[h]);
        }
      }
    }
    for (int64_t j = 0; j < ctx; ++j) hist[j] = static_cast<int32_t>(seq[seq.size() - static_cast<size_t>(ctx - j)]);
  }
}

}  // namespace ft
