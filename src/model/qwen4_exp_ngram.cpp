// Qwen4-Exp's hashed n-gram tables (model/qwen4_exp.h), as transformers' Qwen4ExpTextNGramEmbedding
// builds its buffers: splitmix64 multipliers and consecutive primes from ngram_vocab_size_base.
#include <algorithm>
#include <cstdint>

#include "model/qwen4_exp.h"
#include "util/error.h"

namespace ft {

NgramTables qwen4_ngram_tables(int64_t vocab, int64_t ngram_size, int64_t heads_per_ngram, int64_t base,
                               int64_t divisible_by, int64_t ple_index, int64_t seed) {
  if (ngram_size < 2 || heads_per_ngram < 1 || base < 2 || divisible_by < 1 || ple_index < 0 || ple_index > 1000000)
    fail(ErrorCode::kInvalidFile, "qwen4_exp: n-gram tables of ngram_size {}, heads_per_ngram {}, "
         "ngram_vocab_size_base {}, make_ngram_vocab_size_divisible_by {} (PLE layer {})", ngram_size,
         heads_per_ngram, base, divisible_by, ple_index);
  auto splitmix = [](uint64_t v) {
    v += 0x9E3779B97F4A7C15ull;
    v = (v ^ (v >> 30)) * 0xBF58476D1CE4E5B9ull;
    v = (v ^ (v >> 27)) * 0x94D049BB133111EBull;
    return v ^ (v >> 31);
  };
  NgramTables t;
  const uint64_t half = std::max<uint64_t>(1, static_cast<uint64_t>(INT64_MAX / std::max<int64_t>(vocab, 1)) / 2);
  const uint64_t base_seed = static_cast<uint64_t>(seed) + 10007ull * static_cast<uint64_t>(ple_index);
  for (int64_t j = 0; j < ngram_size; ++j)
    t.mult.push_back(static_cast<int64_t>(
        2 * (splitmix(base_seed + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(j + 1)) % half) + 1));
  auto is_prime = [](int64_t v) {
    if (v < 2) return false;
    if (v % 2 == 0) return v == 2;
    for (int64_t d = 3; d * d <= v; d += 2)
      if (v % d == 0) return false;
    return true;
  };
  const int64_t heads = (ngram_size - 1) * heads_per_ngram;
  int64_t prime = base - 1;  // the first ple_index x heads primes belong to the earlier PLE layers
  for (int64_t g = 0; g < (ple_index + 1) * heads; ++g) {
    do ++prime;
    while (!is_prime(prime));
    if (g < ple_index * heads) continue;
    t.offsets.push_back(t.rows);
    t.sizes.push_back(prime);
    t.rows += prime;
    if (t.rows > (int64_t{1} << 40)) fail(ErrorCode::kInvalidFile, "qwen4_exp: n-gram tables over 2^40 rows");
  }
  t.rows = (t.rows + divisible_by - 1) / divisible_by * divisible_by;
  return t;
}

}  // namespace ft
