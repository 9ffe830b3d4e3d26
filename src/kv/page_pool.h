#pragma once
// PagePool: the free list of KV pages (ids 0..n_pages-1), and BlockTable: the pages one sequence
// holds, in position order (page j holds positions [j * page_size, (j + 1) * page_size)).
// Plain bookkeeping with no device memory, so schedulers and tests can use it alone.
//
// A model with sliding-window layers keeps their KV in a second pool (KvPools::swa): a query at
// position p of such a layer sees only positions > p - window, so a sequence's sliding-window page j
// is released once (j + 1) * page_size <= first_swa_position(p) for its next query p, and its
// sliding-window KV stops growing at about window + one step's tokens (vLLM's hybrid KV cache
// manager and llama.cpp's SWA cache do the same). Its block table for those layers keeps the logical
// indexing (entry j for positions of page j); a released entry reads -1.
//
// A model with recurrent layers (linear attention) keeps, besides pages, one fixed-size state per
// running sequence (KvPools::states, a pool of state slots of one "token" each): a sequence takes a
// slot when it first advances and returns it with its pages.
#include <cstdint>
#include <vector>

namespace ft {

class PagePool {
 public:
  /** A pool of `n_pages` free pages of `page_size` tokens. Throws kInvalidArgument for sizes < 1. */
  PagePool(int32_t n_pages, int32_t page_size);

  int32_t n_pages() const { return n_pages_; }
  int32_t page_size() const { return page_size_; }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }

  /** Takes `n` pages (lowest ids first), appending them to `out`. All or nothing: returns false and
   *  takes none when fewer than `n` are free. */
  bool allocate(int32_t n, std::vector<int32_t>& out);
  /** Returns pages to the pool. Throws ft::Error(kInternal) for an id out of range or already free. */
  void release(const std::vector<int32_t>& pages);

 private:
  int32_t n_pages_, page_size_;
  std::vector<int32_t> free_;    // a stack; back() is handed out next
  std::vector<uint8_t> in_use_;  // [n_pages]
};

/** The page pools a sequence draws from: `full` for every layer that attends to all positions (and
 *  the page bookkeeping of the context), `swa` (or nullptr) for the sliding-window layers, whose
 *  widest window is `window` tokens. Implicit from one pool: no sliding-window group. */
struct KvPools {
  KvPools() = default;
  KvPools(PagePool& pool) : full(&pool) {}  // NOLINT(google-explicit-constructor)
  KvPools(PagePool& pool, PagePool* swa_pool, int32_t swa_window) : full(&pool), swa(swa_pool), window(swa_window) {}
  PagePool* full = nullptr;
  PagePool* swa = nullptr;
  int32_t window = 0;
  /** Recurrent-state slots (kv/kv_cache.h StateLayer), or nullptr: the model has no recurrent layers. */
  PagePool* states = nullptr;

  /** First position a query at position `next` sees in a sliding-window layer: max(0, next - window + 1). */
  int64_t first_swa_position(int64_t next) const { return next - window + 1 > 0 ? next - window + 1 : 0; }
  /** Sliding-window pages below this index are no longer read by a query at `next` or later. */
  int64_t first_swa_page(int64_t next) const { return first_swa_position(next) / full->page_size(); }
};

/** One copy of a recurrent state between slots of KvPools::states (a snapshot saved or restored). */
struct StateCopy {
  int32_t from = -1;
  int32_t to = -1;
};

/** Pages of one sequence. Not copyable, so a page is never owned twice. */
class BlockTable {
 public:
  BlockTable() = default;
  BlockTable(const BlockTable&) = delete;
  BlockTable& operator=(const BlockTable&) = delete;
  BlockTable(BlockTable&&) = default;
  BlockTable& operator=(BlockTable&&) = default;

  /** Makes room for positions [0, n_tokens): allocates the missing pages from `pool`. Returns false
   *  (and allocates nothing) when the pool is short. */
  bool reserve(PagePool& pool, int64_t n_tokens);
  /** Pages needed beyond the current ones to hold `n_tokens` positions. */
  int32_t pages_needed(const PagePool& pool, int64_t n_tokens) const;
  /** Returns every page to `pool` and empties the table. */
  void release(PagePool& pool);

  /** For computing positions [start, end) next: releases the sliding-window pages below
   *  pools.first_swa_page(start), then makes room for positions [0, end) in both pools, and takes a
   *  state slot from pools.states when there is one and the table holds none. Returns false (and
   *  allocates nothing) when a pool is short. Without pools.swa, the pages as reserve(*pools.full, end). */
  bool advance(const KvPools& pools, int64_t start, int64_t end);
  /** Returns every page of both pools (and the state slot) and empties the table. */
  void release(const KvPools& pools);
  /** The recurrent-state slot taken by advance (-1: none). */
  int32_t state_slot() const { return state_slot_; }

  const std::vector<int32_t>& pages() const { return pages_; }
  /** Sliding-window pages, logically indexed like pages() (-1: released); empty without pools.swa. */
  const std::vector<int32_t>& swa_pages() const { return swa_pages_; }
  /** Positions the current pages can hold. */
  int64_t capacity(const PagePool& pool) const { return static_cast<int64_t>(pages_.size()) * pool.page_size(); }

 private:
  std::vector<int32_t> pages_;
  std::vector<int32_t> swa_pages_;
  int64_t swa_released_ = 0;  // swa_pages_[0, swa_released_) are released
  int32_t state_slot_ = -1;
};

}  // namespace ft
