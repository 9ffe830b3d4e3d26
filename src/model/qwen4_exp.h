#pragma once
// Qwen4-Exp's hashed n-gram tables (transformers Qwen4ExpTextNGramEmbedding's buffers), computed from
// the config as transformers computes them, for checkpoints that do not store them.
#include <cstdint>
#include <vector>

namespace ft {

struct NgramTables {
  std::vector<int64_t> mult;     // [ngram_size]: odd multipliers of the tokens at p, p - 1, ...
  std::vector<int64_t> sizes;    // [(ngram_size - 1) heads_per_ngram]: each head's table size (a prime)
  std::vector<int64_t> offsets;  // same: each head's first row in the shared table
  int64_t rows = 0;              // sum of sizes rounded up to a multiple of divisible_by
};

/** The tables of the PLE layer with index `ple_index` (its position in ple_layer_ids): multiplier j =
 *  2 (splitmix64(seed + 10007 ple_index + 0x9E3779B97F4A7C15 (j + 1)) mod h) + 1, h = max(1, (2^63 - 1)
 *  / max(vocab, 1) / 2); head g (global index ple_index x heads + g) has the (g_global + 1)-th prime
 *  >= base rows. Throws kInvalidFile for sizes that overflow or a non-positive count. */
NgramTables qwen4_ngram_tables(int64_t vocab, int64_t ngram_size, int64_t heads_per_ngram, int64_t base,
                               int64_t divisible_by, int64_t ple_index, int64_t seed);

}  // namespace ft
