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
//
// Read-ahead (prefetch()): the scheduler names the disk pages a queued request will load as soon as it
// is queued; a reader thread reads and checks their files into a read-ahead map in memory (bounded in
// bytes, by each file's size; a new request's pages push out the oldest request's, never a page being
// read), so that admission finds them there instead of reading on the serving loop. get() takes a page
// from the map (it leaves it), waits for one the reader is reading (never reads it twice), reads one
// still queued for the reader itself, and reads any other as before. A file that fails a check on the
// reader is warned about and dropped from the index as get() does; it never enters the map.
//
// Threads and locking: one mutex (mu_) guards the index, the LRU, the write queue, the read-ahead map
// and its queue, and the counters; every public function takes it briefly and may be called from any
// thread. Files are read and written only with it released: the writer thread writes the write
// queue's front (which stays queued, so get() and contains() see it, until the file is renamed in),
// the reader thread reads the read queue's front (its map entry marked as being read, which nothing
// evicts), and get() reads a file it found indexed. cv_ wakes the writer, idle_cv_ signals a write
// done (flush()), read_cv_ wakes the reader and ahead_cv_ signals a read done or an entry dropped
// (get() waiting for a read, flush_read_ahead()). check_integrity() verifies all of it under mu_.
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
   *  bad ones warned about and skipped) and starts the writer and the reader. `read_ahead_bytes` bounds
   *  the read-ahead map (bytes of files; 0: queue_bound(capacity_bytes), as the write queue). Throws
   *  kInvalidArgument when `dir` fails check_folder, for a capacity or page size < 1 or a negative
   *  read-ahead bound. */
  DiskPageStore(std::string dir, int64_t capacity_bytes, int32_t page_size, uint64_t fingerprint, Layout layout,
                int64_t read_ahead_bytes = 0);
  /** Writes what is queued, then stops the writer and the reader (reads not started are dropped). */
  ~DiskPageStore() override;

  const char* name() const override { return "disk"; }
  /** Queues the page for writing (never waits for the disk); dropped when the queue holds more than
   *  its bound (1 GiB or the capacity: a hole would cut later pages of the path off) or the path is on disk already. */
  void put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) override;
  /** The page of `path`: one still queued for writing or read ahead is returned from memory (a read
   *  ahead one leaves the map; one being read ahead is waited for), else its file is read and checked
   *  now. A file that fails a check is warned about, dropped from the index and nullptr returned. */
  std::shared_ptr<const PageContents> get(uint64_t hash, std::span<const int32_t> path) override;
  bool contains(uint64_t hash, std::span<const int32_t> path) const override;
  /** Queues the files of `pages` for the reader, in order (pages not indexed, queued for writing or
   *  already read ahead are passed over; one read ahead already is kept as this call's). Room is made
   *  by dropping the entries of earlier calls, oldest first; the pages that still do not fit are not
   *  queued. Never waits for the disk. */
  void prefetch(std::span<const PageRef> pages) override;
  PageStoreStats stats() const override;
  void check_integrity() const override;

  /** Makes `dir` when missing and checks that this process can write files in it (a probe file made
   *  and removed). Throws kInvalidArgument naming --prompt-cache-dir, `dir` and why: it cannot be made,
   *  is a file, or takes no file (read-only, or a folder such as /proc's). The constructor calls it;
   *  the engine too, before the weights load. */
  static void check_folder(const std::string& dir);

  /** The most bytes of pages the write queue holds for a store of `capacity_bytes`: 1 GiB or the capacity. */
  static int64_t queue_bound(int64_t capacity_bytes) { return std::min<int64_t>(capacity_bytes, int64_t{1} << 30); }

  /** Waits until every queued page is written (tests, shutdown). */
  void flush();
  /** Waits until every page queued for reading ahead is read (or dropped) (tests). */
  void flush_read_ahead();
  /** Pages in the read-ahead map (read, being read or queued) and the bytes they count against its bound. */
  int64_t read_ahead_pages() const;
  int64_t read_ahead_bytes() const;
  /** The file of a path hash. */
  std::string file_of(uint64_t hash) const;
  /** Files skipped (warned about) since start. */
  int64_t skipped() const;
  /** Whole files read since start (by get() and the reader; the start-up scan's headers not counted). */
  int64_t files_read() const;

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
  /** A page of the read-ahead map. */
  struct Ahead {
    enum class State : uint8_t { kQueued, kReading, kReady };
    uint64_t hash = 0;
    std::vector<int32_t> path;
    int64_t bytes = 0;      // its file's size when queued: what it counts against the bound
    uint64_t call = 0;      // the prefetch() call that asked for it last
    State state = State::kQueued;
    std::shared_ptr<const PageContents> contents;  // kReady only
  };
  using AheadList = std::list<Ahead>;  // front: asked for longest ago

  void scan();
  void writer();
  void reader();
  /** Reads and checks the whole file of `hash` (expected to hold `path`) into `c` without the lock;
   *  returns why it is not valid ("" when it is) and its size. */
  std::string read_page(uint64_t hash, std::span<const int32_t> path, PageContents& c, uint64_t& size) const;
  /** A file that failed a check: warns (naming `why`) and drops it from the index (not the disk). */
  void skip_locked(uint64_t hash, const std::string& why);
  void erase_ahead_locked(AheadList::iterator it);
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
  int64_t skipped_ = 0, files_read_ = 0;
  // Read-ahead (prefetch): the map, its index by hash and the reader's queue (hashes; one whose entry
  // is gone or not kQueued any more is passed over).
  std::condition_variable read_cv_, ahead_cv_;
  AheadList ahead_;
  std::unordered_map<uint64_t, AheadList::iterator> ahead_index_;
  std::deque<uint64_t> read_queue_;
  int64_t ahead_bytes_ = 0, ahead_limit_ = 0;
  uint64_t prefetch_calls_ = 0;
  std::thread thread_, reader_;
};

}  // namespace ft
