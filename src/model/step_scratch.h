#pragma once
// StepScratch: the device regions a model's step uses beyond ForwardState (hyper-connection streams,
// indexer entries, ...), sized for a number of tokens and of entries and grown on demand. Shared by the
// models that keep such tensors (deepseek_v4, qwen4_exp).
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "backend/ops.h"

namespace ft {

class StepScratch {
 public:
  /** True when the regions were made for at least `tokens` tokens and `entries` entries. */
  bool covers(int64_t tokens, int64_t entries) const { return tokens <= tokens_ && entries <= entries_; }

  /** Starts a new, larger set of regions: each size becomes the larger of the request and twice the
   *  old one where it grows (decode's entries grow with the context), at least 1. The old regions stay
   *  allocated, since a recorded CUDA graph may still address them; make() the tensors again after. */
  void regrow(int64_t tokens, int64_t entries);

  int64_t tokens() const { return tokens_; }
  int64_t entries() const { return entries_; }

  /** A new device tensor of `dt` and `shape` on `ops`' device, owned by this scratch. Throws what
   *  Ops::alloc throws (kOutOfMemory). */
  Tensor make(Ops& ops, DType dt, std::initializer_list<int64_t> shape);

  /** A new I32 tensor [rows * n] with entry i = i / n (a gather's index that repeats each row n times). */
  Tensor repeat_index(Ops& ops, int64_t rows, int64_t n);

 private:
  int64_t tokens_ = 0, entries_ = 0;
  std::vector<Buffer> storage_;
};

}  // namespace ft
