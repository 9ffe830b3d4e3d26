#pragma once
// HostPageStore: the host KV tier (--kv-host-gib, issue 39). Pages the prefix cache evicts from the
// device are kept here, in host memory, least recently used first out once the bound is reached; a
// later prompt reaching the same path gets them copied back instead of recomputed
// (engine/scheduler.h). Not thread-safe: the engine thread that runs the scheduler owns it.
#include <cstdint>
#include <list>
#include <unordered_map>

#include "kv/page_store.h"

namespace ft {

class HostPageStore : public PageStore {
 public:
  /** A tier of at most `capacity_bytes` of page contents (PageContents::bytes(), KvPageIo::page_bytes()
   *  a whole page: the bytes the log and --kv-host-gib count; an entry's path, 4 bytes a token, is the
   *  index's, as the prefix cache's tree, and not counted) for paths of whole pages of `page_size`
   *  tokens. Throws kInvalidArgument for a capacity < 1 or a page size < 1. */
  HostPageStore(int64_t capacity_bytes, int32_t page_size);

  const char* name() const override { return "host"; }
  void put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) override;
  std::shared_ptr<const PageContents> get(uint64_t hash, std::span<const int32_t> path) override;
  bool contains(uint64_t hash, std::span<const int32_t> path) const override;
  PageStoreStats stats() const override;
  void check_integrity() const override;

 private:
  struct Entry {
    uint64_t hash = 0;
    std::vector<int32_t> path;
    std::shared_ptr<const PageContents> contents;
    int64_t bytes = 0;
  };
  using Lru = std::list<Entry>;  // front: most recently used
  Lru::iterator find(uint64_t hash, std::span<const int32_t> path) const;
  void erase(Lru::iterator it);

  int32_t page_size_;
  mutable Lru lru_;
  std::unordered_multimap<uint64_t, Lru::iterator> index_;
  PageStoreStats stats_;
};

}  // namespace ft
