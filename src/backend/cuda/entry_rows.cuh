#pragma once
// EntryRows: where DeepSeek-V4's compressed entries are for the CUDA ops that write them
// (compress_kv) and read them (indexer_topk, attention_compressed): a dense [S, M, dim] of the
// activation dtype, or the KV pages' entry rows (KvLayer::e [n_pages, rows, 1, width]; ops.h says
// where entry w of a sequence sits) at columns [col, col + dim). The CPU twin: backend/cpu/entry_rows.h.
#include <algorithm>
#include <cstdint>

#include "backend/cuda/checks.h"
#include "backend/ops.h"
#include "util/error.h"

namespace ft::cuda {

struct EntryRows {
  void* data = nullptr;                   // elements of the activation dtype
  const int32_t* block_tables = nullptr;  // paged: the batch's [S, max_blocks]; null: dense
  int64_t M = 0;                          // dense: rows a sequence; paged: max_kv_len / rate (a bound)
  int64_t stride = 0;                     // elements a row: dim (dense) or the rows' width (paged)
  int col = 0, rows = 0, page_size = 1, rate = 1, max_blocks = 0;

  /** Element offset of entry w of batch sequence s. */
  __device__ __forceinline__ int64_t offset(int s, int64_t w) const {
    if (!block_tables) return (static_cast<int64_t>(s) * M + w) * stride;
    const int64_t j = ((w + 1) * rate - 1) / page_size;
    const int64_t page = block_tables[static_cast<int64_t>(s) * max_blocks + j];
    return (page * rows + (w - j * page_size / rate)) * stride + col;
  }
};

/** The EntryRows of `entries`: [>= S, M, dim] (dense, col 0) or entry pages [n, >= ceil(page_size /
 *  rate), 1, >= col + dim] (paged) in `act`'s dtype. Throws kInvalidArgument naming `op` when the
 *  shapes or dtype do not fit. */
inline EntryRows entry_rows(const char* op, const BatchInfo& b, const Tensor& entries, const Tensor& act, int64_t dim,
                            int64_t col, int64_t page_size, int64_t rate) {
  check_same_dtype(op, "entries", entries, act);
  const bool paged = entries.ndim == 4;
  if (rate < 1 || dim < 1 ||
      (paged ? entries.dim(2) != 1 || col < 0 || col + dim > entries.dim(3) || page_size < 1 ||
                   entries.dim(1) < (page_size + rate - 1) / rate
             : entries.ndim != 3 || entries.dim(0) < b.n_seqs || entries.dim(2) != dim || col != 0))
    fail(ErrorCode::kInvalidArgument,
         "{}: entries {} must be [>= {}, M, {}] or entry pages [n, >= ceil({} / {}), 1, >= {} + {}] (rate {})", op,
         entries.str(), b.n_seqs, dim, page_size, rate, col, dim, rate);
  EntryRows e;
  e.data = entries.data;
  e.rate = static_cast<int>(rate);
  if (!paged) {
    e.M = entries.dim(1), e.stride = dim;
    return e;
  }
  e.block_tables = b.block_tables.ptr<int32_t>();
  e.M = std::max<int64_t>(1, b.max_kv_len / rate);
  e.stride = entries.dim(3);
  e.col = static_cast<int>(col), e.rows = static_cast<int>(entries.dim(1));
  e.page_size = static_cast<int>(page_size), e.max_blocks = b.max_blocks;
  return e;
}

}  // namespace ft::cuda
