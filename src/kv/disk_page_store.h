#pragma once
// DiskPageStore: the persistent prompt cache (--prompt-cache-dir, --prompt-cache-gib; issue 39). Every
// page the prefix cache adds is written to DIR in the background (a writer thread; put() only queues
// it), one file a page; after a restart the files found in DIR serve hits like the host tier, so a
// prompt whose prefix is on disk loads those pages instead of recomputing them. Files are removed
// least recently used first to stay within the size bound.
//
// File DIR/<fingerprint 16 hex>-<path hash 16 hex>.ftpc, little-endian:
//   0  "FTPC"            4  u32 version (1)    8  u64 fingerprint    16 u64 path hash
//   24 u32 tokens (n)    28 u32 page size      32 u64 kv bytes       40 u64 swa bytes    48 u64 state bytes
//   56 i32 path[n]       then the kv, swa and state bytes (PageContents)
//   end - 8: u64 checksum, XXH3-64 of every byte before it.
// The fingerprint names the model (its tensors' names, types and shapes), the backend and the KV
// layout (dtype, page size, every layer's page shapes): a file of another fingerprint is never read.
// A file that is truncated, corrupt (checksum, sizes, hash), of another version or foreign (its
// header's fingerprint is not its name's) is skipped with one warning naming the field and its
// offset, and left in place; it is never loaded.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "kv/page_store.h"

namespace ft {

class DiskPageStore : public PageStore {
 public:
  /** Part sizes every file's contents must have (KvPageIo::kv_bytes ...; swa and state: 0 or this). */
  struct Layout {
    int64_t kv_bytes = 0, swa_bytes = 0, state_bytes = 0;
  };
  /** Opens (making it when missing) `dir`, indexes the files of `fingerprint` in it (headers checked;
   *  bad ones warned about and skipped) and starts the writer. Throws kInvalidArgument when `dir`
   *  cannot be made or is not a folder, or for a capacity or page size < 1. */
  DiskPageStore(std::string dir, int64_t capacity_bytes, int32_t page_size, uint64_t fingerprint, Layout layout);
  /** Writes what is queued, then stops the writer. */
  ~DiskPageStore() override;

  const char* name() const override { return "disk"; }
  /** Queues the page for writing (never waits for the disk); dropped when the queue holds more than
   *  its bound (1 GiB or the capacity: a hole would cut later pages of the path off) or the path is on disk already. */
  void put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) override;
  /** Reads and checks the file of `path` (a page still queued is returned from memory). A file that
   *  fails a check is warned about, dropped from the index and nullptr returned. */
  std::shared_ptr<const PageContents> get(uint64_t hash, std::span<const int32_t> path) override;
  bool contains(uint64_t hash, std::span<const int32_t> path) const override;
  PageStoreStats stats() const override;
  void check_integrity() const override;

  /** The most bytes of pages the write queue holds for a store of `capacity_bytes`: 1 GiB or the capacity. */
  static int64_t queue_bound(int64_t capacity_bytes) { return std::min<int64_t>(capacity_bytes, int64_t{1} << 30); }

  /** Waits until every queued page is written (tests, shutdown). */
  void flush();
  /** The file of a path hash. */
  std::string file_of(uint64_t hash) const;
  /** Files skipped (warned about) since start. */
  int64_t skipped() const;

 private:
  struct Entry {
    uint64_t hash = 0;
    std::vector<int32_t> path;
    int64_t bytes = 0;  // the file's size
  };
  struct Pending {
    uint64_t hash = 0;
    std::vector<int32_t> path;
    std::shared_ptr<const PageContents> contents;
  };
  using Lru = std::list<Entry>;  // front: most recently used

  void scan();
  void writer();
  bool write_file(const Pending& p, int64_t& bytes);
  /** The reason `bytes` (a whole file of `file_size` bytes; only the header when !whole) is not a
   *  valid file of this store (field and offset), or "" when it is; fills path/contents when given. */
  std::string check(const std::vector<uint8_t>& bytes, uint64_t file_size, bool whole, uint64_t name_hash,
                    std::vector<int32_t>* path, PageContents* contents) const;
  void erase_locked(Lru::iterator it, bool remove_file);
  void insert_locked(Entry e);

  std::string dir_;
  int32_t page_size_;
  uint64_t fingerprint_;
  Layout layout_;
  int64_t queue_limit_;

  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  Lru lru_;
  std::unordered_map<uint64_t, Lru::iterator> index_;
  std::deque<Pending> queue_;
  int64_t queued_bytes_ = 0;
  bool writing_ = false, stop_ = false;
  PageStoreStats stats_;
  int64_t skipped_ = 0;
  std::thread thread_;
};

}  // namespace ft
