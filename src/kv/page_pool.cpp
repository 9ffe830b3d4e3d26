#include "kv/page_pool.h"

#include <algorithm>

#include "util/error.h"

namespace ft {

PagePool::PagePool(int32_t n_pages, int32_t page_size) : n_pages_(n_pages), page_size_(page_size) {
  if (n_pages < 1 || page_size < 1)
    fail(ErrorCode::kInvalidArgument, "KV page pool: {} pages of {} tokens (both must be >= 1)", n_pages, page_size);
  free_.reserve(static_cast<size_t>(n_pages));
  for (int32_t p = n_pages - 1; p >= 0; --p) free_.push_back(p);
  in_use_.assign(static_cast<size_t>(n_pages), 0);
}

bool PagePool::allocate(int32_t n, std::vector<int32_t>& out) {
  if (n < 0 || n > n_free()) return false;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t p = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(p)] = 1;
    out.push_back(p);
  }
  return true;
}

void PagePool::release(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    if (p < 0 || p >= n_pages_ || !in_use_[static_cast<size_t>(p)])
      fail(ErrorCode::kInternal, "KV page pool: releasing page {} that is not in use (pool of {})", p, n_pages_);
    in_use_[static_cast<size_t>(p)] = 0;
    free_.push_back(p);
  }
}

int32_t BlockTable::pages_needed(const PagePool& pool, int64_t n_tokens) const {
  const int64_t want = (n_tokens + pool.page_size() - 1) / pool.page_size();
  return static_cast<int32_t>(std::max<int64_t>(0, want - static_cast<int64_t>(pages_.size())));
}

bool BlockTable::reserve(PagePool& pool, int64_t n_tokens) { return pool.allocate(pages_needed(pool, n_tokens), pages_); }

void BlockTable::release(PagePool& pool) {
  pool.release(pages_);
  pages_.clear();
}

bool BlockTable::advance(const KvPools& pools, int64_t start, int64_t end) {
  if (pools.states && state_slot_ < 0) {
    std::vector<int32_t> slot;
    if (!pools.states->allocate(1, slot)) return false;
    const bool ok = pools.swa ? advance(KvPools(*pools.full, pools.swa, pools.window), start, end)
                              : reserve(*pools.full, end);
    if (!ok) {
      pools.states->release(slot);
      return false;
    }
    state_slot_ = slot[0];
    return true;
  }
  if (!pools.swa) return reserve(*pools.full, end);
  const int64_t first = std::min<int64_t>(pools.first_swa_page(start), static_cast<int64_t>(swa_pages_.size()));
  std::vector<int32_t> drop;
  for (; swa_released_ < first; ++swa_released_) {
    int32_t& p = swa_pages_[static_cast<size_t>(swa_released_)];
    if (p >= 0) drop.push_back(p);
    p = -1;
  }
  pools.swa->release(drop);
  const int32_t n_full = pages_needed(*pools.full, end);
  const int64_t want = (end + pools.full->page_size() - 1) / pools.full->page_size();
  const auto n_swa = static_cast<int32_t>(std::max<int64_t>(0, want - static_cast<int64_t>(swa_pages_.size())));
  if (pools.full->n_free() < n_full || pools.swa->n_free() < n_swa) return false;
  return pools.full->allocate(n_full, pages_) && pools.swa->allocate(n_swa, swa_pages_);
}

void BlockTable::release(const KvPools& pools) {
  if (pools.states && state_slot_ >= 0) pools.states->release({state_slot_});
  state_slot_ = -1;
  if (pools.swa) {
    std::vector<int32_t> held;
    for (int32_t p : swa_pages_)
      if (p >= 0) held.push_back(p);
    pools.swa->release(held);
  }
  swa_pages_.clear();
  swa_released_ = 0;
  release(*pools.full);
}

}  // namespace ft
