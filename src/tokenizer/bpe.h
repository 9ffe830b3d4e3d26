#pragma once
// BPE merge rules and the merge loop. A word starts as one symbol per character (per byte for
// byte-level vocabularies); the adjacent pair with the lowest merge rank is merged, leftmost first
// on ties, until no pair has a rule (Sennrich et al. 2016; Hugging Face tokenizers
// models/bpe/word.rs merge_all; llama.cpp llm_tokenizer_bpe_session). Pairs are keyed by token id.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ft {

/** Reusable buffers for BpeMerges::merge (one per encoding call). */
struct BpeScratch {
  struct Sym {
    int32_t id, prev, next;
    uint32_t len;
  };
  struct Cand {
    int32_t rank, left, left_id, right_id;
  };
  std::vector<Sym> syms;
  std::vector<Cand> heap;
};

class BpeMerges {
 public:
  /** Adds the rule (left, right) -> merged with priority `rank` (lower merges first). A pair that is
   *  already present keeps its first rule (the lower rank when added in file order). */
  void add(int32_t left, int32_t right, int32_t merged, int32_t rank);
  /** Number of rules. */
  size_t size() const { return count_; }

  /** Rewrites `ids`/`lens` (token id and byte length of each initial symbol; id -1 = no token, never
   *  merges) into the final symbols after all merges. */
  void merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens, BpeScratch& scratch) const;

 private:
  struct Entry {
    uint64_t key;
    int32_t rank, merged;
  };
  static constexpr uint64_t kEmpty = ~0ull;
  const Entry* find(int32_t left, int32_t right) const;
  void grow();

  std::vector<Entry> table_;  // open addressing, power-of-two capacity, load <= 1/2
  size_t count_ = 0;
};

}  // namespace ft
