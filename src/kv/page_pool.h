#pragma once
// PagePool: the free list of KV pages (ids 0..n_pages-1), and BlockTable: the pages one sequence
// holds, in position order (page j holds positions [j * page_size, (j + 1) * page_size)).
// Plain bookkeeping with no device memory, so schedulers and tests can use it alone.
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

  const std::vector<int32_t>& pages() const { return pages_; }
  /** Positions the current pages can hold. */
  int64_t capacity(const PagePool& pool) const { return static_cast<int64_t>(pages_.size()) * pool.page_size(); }

 private:
  std::vector<int32_t> pages_;
};

}  // namespace ft
