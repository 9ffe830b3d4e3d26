#pragma once
// PageStore: a lower tier of the prefix cache (issue 39). It keeps the contents of cached KV pages
// that are no longer (or not only) on the device: the host tier (kv/host_page_store.h, --kv-host-gib)
// and the prompt cache on disk (kv/disk_page_store.h, --prompt-cache-dir).
//
// An entry stands for one prefix-cache node: the `page_size` tokens ending the token path `path`
// (every token from the root through this page, so path.size() is a multiple of the page size). It
// is keyed by path_hash(path) (chain_hash over the pages) and confirmed by comparing the whole path,
// never by the hash alone. Its contents (PageContents) are what the node held on the device: every
// paged layer's K and V page (their scales for quantized KV), the page of the sliding-window layers
// when the node had one, and the recurrent-state snapshot when it had one.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/stream_copy.h"
#include "kv/page_bytes.h"

namespace ft {

/** The bytes of one prefix-cache node's pages (kv/kv_page_io.h lays them out). Bytes from KvPageIo::save
 *  may still be arriving from the device: read them on the host only after wait_ready() (the prompt
 *  cache's writer does); the device's own later copies of them are ordered after by its stream. */
struct PageContents {
  PageBytes kv;     // the full-attention pool's page of every paged layer: K, V (+ scales)
  PageBytes swa;    // the sliding-window pool's page of those layers; empty: the node had none
  PageBytes state;  // the recurrent-state snapshot of every recurrent layer; empty: none
  std::shared_ptr<const CopyFence> ready;  // passed once the bytes are all there (null: they are)
  int64_t bytes() const { return static_cast<int64_t>(kv.size() + swa.size() + state.size()); }
  /** Blocks until the bytes are there. Throws what CopyFence::wait throws. */
  void wait_ready() const {
    if (ready) ready->wait();
  }
};

/** Hash of the path of the root (no tokens). */
constexpr uint64_t kRootPathHash = 0x9e3779b97f4a7c15ull;

/** The path hash of a node: XXH3-64 of its page's tokens (little-endian int32) seeded with its
 *  parent's path hash (kRootPathHash for the first page). Stable across runs and machines. */
uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> page_tokens);

/** chain_hash over every page of `path` (path.size() a multiple of page_size >= 1). */
uint64_t path_hash(std::span<const int32_t> path, int32_t page_size);

/** Counters of one tier, for /v1/stats and /metrics. */
struct PageStoreStats {
  int64_t entries = 0;        // pages held
  int64_t bytes = 0;          // bytes held (host: page contents, PageContents::bytes(); disk: its files)
  int64_t capacity_bytes = 0; // the bound
  int64_t bytes_written = 0;  // into the tier since start
  int64_t bytes_read = 0;     // out of it (hits) since start
  int64_t hits = 0;           // pages found by get()
  int64_t dropped = 0;        // pages refused or evicted by the bound (or a full write queue)
  int64_t read_ahead_hits = 0; // of `hits`, pages get() found read ahead in memory (prefetch(); disk tier)
};

/** A page a caller expects to get() soon: its path hash and whole token path (see PageStore). */
struct PageRef {
  uint64_t hash = 0;
  std::span<const int32_t> path;
};

class PageStore {
 public:
  virtual ~PageStore() = default;
  /** "host" or "disk". */
  virtual const char* name() const = 0;
  /** Keeps `contents` as the entry of `path` (replacing an equal path's entry), evicting least
   *  recently used entries to stay within the bound; an entry larger than the bound is dropped. */
  virtual void put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) = 0;
  /** The entry of exactly `path` (hash: path_hash(path)), marked used now, or nullptr. */
  virtual std::shared_ptr<const PageContents> get(uint64_t hash, std::span<const int32_t> path) = 0;
  /** Whether an entry of exactly `path` is held (or being written). */
  virtual bool contains(uint64_t hash, std::span<const int32_t> path) const = 0;
  /** A hint that `pages` (the first needed first) will be asked for with get() soon: a tier whose
   *  get() is slow starts reading them in the background (the paths are copied; never waits). The
   *  default does nothing (the host tier is memory already). */
  virtual void prefetch(std::span<const PageRef> pages) { (void)pages; }
  virtual PageStoreStats stats() const = 0;
  /** Verifies the tier's bookkeeping (index, LRU order, byte counts, each entry's hash recomputed
   *  from its path, the bound). Throws ft::Error(kInternal) naming the first violation. */
  virtual void check_integrity() const = 0;
};

/** Copies a node's pages between the device KV cache and host bytes (kv/kv_page_io.h; tests use
 *  fakes). Page ids are those of KvPools::full / ::swa and slots of ::states; -1: none. */
class PageIo {
 public:
  virtual ~PageIo() = default;
  /** The contents of `page` (+ `swa_page`, + state `slot`), copied out now. */
  virtual std::shared_ptr<PageContents> save(int32_t page, int32_t swa_page, int32_t slot) = 0;
  /** Writes `c` into `page` (its swa part into `swa_page`, its state into `slot`; each only where >= 0). Throws
   *  ft::Error(kInternal) when a part's size does not match the layout. */
  virtual void load(const PageContents& c, int32_t page, int32_t swa_page, int32_t slot) = 0;
};

/** What the scheduler uses below the device: the copier and the tiers (any may be null). The host
 *  tier receives pages the prefix cache evicts; the disk tier every page it caches (written through
 *  in the background). Lookups try the host tier first. */
struct LowerTiers {
  PageIo* io = nullptr;
  PageStore* host = nullptr;
  PageStore* disk = nullptr;
  bool enabled() const { return io != nullptr && (host != nullptr || disk != nullptr); }
};

}  // namespace ft
