// StepScratch: see step_scratch.h.
#include "model/step_scratch.h"

#include <algorithm>

namespace ft {

void StepScratch::regrow(int64_t tokens, int64_t entries) {
  auto grown = [](int64_t want, int64_t had) { return std::max<int64_t>({want, want > had ? 2 * had : had, 1}); };
  tokens_ = grown(tokens, tokens_);
  entries_ = grown(entries, entries_);
}

Tensor StepScratch::make(Ops& ops, DType dt, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dt, shape, ops.device());
  storage_.push_back(ops.alloc(t.bytes()));
  t.data = storage_.back().data();
  return t;
}

Tensor StepScratch::repeat_index(Ops& ops, int64_t rows, int64_t n) {
  Tensor t = make(ops, DType::I32, {rows * n});
  std::vector<int32_t> rep(static_cast<size_t>(rows * n));
  for (int64_t i = 0; i < rows * n; ++i) rep[static_cast<size_t>(i)] = static_cast<int32_t>(i / n);
  ops.copy(Tensor(rep.data(), DType::I32, {rows * n}), t);
  ops.synchronize();  // rep is a local the copy may still read
  return t;
}

}  // namespace ft
