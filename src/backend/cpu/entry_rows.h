#pragma once
// EntryRows: where DeepSeek-V4's compressed entries are for the CPU ops that write them (compress_kv)
// and read them (indexer_topk, attention_compressed): a dense scratch [S, M, dim], or the KV pages'
// entry rows (KvLayer::e [n_pages, rows, 1, width], ops.h says where entry w of a sequence sits),
// read at columns [col, col + dim). F32 either way (the CPU's activation dtype).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft::cpu {

class EntryRows {
 public:
  /** `entries` [>= S, M, dim] (dense) or [n_pages, rows, 1, width] (paged, with the key pages'
   *  `page_size` and the compress `rate`), F32. Throws kInvalidArgument naming `op` for shapes that do
   *  not fit (rows < ceil(page_size / rate), columns past the width). */
  EntryRows(const char* op, const BatchInfo& b, const Tensor& entries, int64_t dim, int64_t col, int64_t page_size,
            int64_t rate)
      : op_(op), b_(&b), e_(&entries), dim_(dim), col_(col), ps_(page_size), rate_(rate) {
    check_dtype(op, "entries", entries, DType::F32);
    const bool paged = entries.ndim == 4;
    if (rate < 1 || dim < 1 ||
        (paged ? entries.dim(2) != 1 || col < 0 || col + dim > entries.dim(3) || page_size < 1 ||
                     entries.dim(1) < (page_size + rate - 1) / rate
               : entries.ndim != 3 || entries.dim(0) < b.n_seqs || entries.dim(2) != dim || col != 0))
      fail(ErrorCode::kInvalidArgument,
           "{}: entries {} must be [>= {}, M, {}] or entry pages [n, >= ceil({} / {}), 1, >= {} + {}] (rate {})", op,
           entries.str(), b.n_seqs, dim, page_size, rate, col, dim, rate);
    paged_ = paged;
  }
  bool paged() const { return paged_; }
  /** The most entries a sequence may have here (M dense; unbounded paged). */
  int64_t limit() const { return paged_ ? std::numeric_limits<int32_t>::max() : e_->dim(1); }
  /** Entry w of batch sequence s (dim floats). Throws kInvalidArgument (paged) when the sequence's
   *  block table lacks the page of the entry's last position. Call outside parallel regions. */
  float* at(int32_t s, int64_t w) const {
    float* base = e_->ptr<float>();
    if (!paged_) return base + (int64_t{s} * e_->dim(1) + w) * dim_;
    const int64_t last = (w + 1) * rate_ - 1, j = last / ps_;
    const PageSlot at = page_slot(op_, *b_, e_->dim(0), ps_, s, static_cast<int32_t>(last));
    const int64_t row = w - j * ps_ / rate_;
    return base + (at.page * e_->dim(1) + row) * e_->dim(3) + col_;
  }

 private:
  const char* op_;
  const BatchInfo* b_;
  const Tensor* e_;
  int64_t dim_, col_, ps_, rate_;
  bool paged_ = false;
};

}  // namespace ft::cpu
