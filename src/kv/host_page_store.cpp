#include "kv/host_page_store.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace ft {

HostPageStore::HostPageStore(int64_t capacity_bytes, int32_t page_size) : page_size_(page_size) {
  if (capacity_bytes < 1) fail(ErrorCode::kInvalidArgument, "host KV tier: capacity {} bytes must be >= 1", capacity_bytes);
  if (page_size < 1) fail(ErrorCode::kInvalidArgument, "host KV tier: page size {} must be >= 1", page_size);
  stats_.capacity_bytes = capacity_bytes;
}

HostPageStore::Lru::iterator HostPageStore::find(uint64_t hash, std::span<const int32_t> path) const {
  auto [lo, hi] = index_.equal_range(hash);
  for (auto it = lo; it != hi; ++it)
    if (std::equal(it->second->path.begin(), it->second->path.end(), path.begin(), path.end())) return it->second;
  return lru_.end();
}

void HostPageStore::erase(Lru::iterator it) {
  auto [lo, hi] = index_.equal_range(it->hash);
  for (auto i = lo; i != hi; ++i) {
    if (i->second == it) {
      index_.erase(i);
      break;
    }
  }
  stats_.bytes -= it->bytes;
  --stats_.entries;
  lru_.erase(it);
}

void HostPageStore::put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) {
  if (!contents || path.empty() || path.size() % static_cast<size_t>(page_size_) != 0)
    fail(ErrorCode::kInternal, "host KV tier: put of a path of {} tokens (pages of {})", path.size(), page_size_);
  if (auto it = find(hash, path); it != lru_.end()) erase(it);
  const int64_t bytes = contents->bytes();
  if (bytes > stats_.capacity_bytes) {
    ++stats_.dropped;
    return;
  }
  while (stats_.bytes + bytes > stats_.capacity_bytes && !lru_.empty()) {
    erase(std::prev(lru_.end()));
    ++stats_.dropped;
  }
  lru_.push_front(Entry{hash, std::vector<int32_t>(path.begin(), path.end()), std::move(contents), bytes});
  index_.emplace(hash, lru_.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  stats_.bytes_written += lru_.front().contents->bytes();
}

std::shared_ptr<const PageContents> HostPageStore::get(uint64_t hash, std::span<const int32_t> path) {
  auto it = find(hash, path);
  if (it == lru_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it);  // iterators stay valid
  ++stats_.hits;
  stats_.bytes_read += it->contents->bytes();
  return it->contents;
}

bool HostPageStore::contains(uint64_t hash, std::span<const int32_t> path) const { return find(hash, path) != lru_.end(); }

PageStoreStats HostPageStore::stats() const { return stats_; }

void HostPageStore::check_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "host KV tier integrity: {}", what); };
  int64_t bytes = 0, entries = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    ++entries;
    if (!it->contents) bad(fmt::format("entry {} has no contents", entries));
    if (it->path.empty() || it->path.size() % static_cast<size_t>(page_size_) != 0)
      bad(fmt::format("entry of {} tokens is not whole pages of {}", it->path.size(), page_size_));
    if (path_hash(it->path, page_size_) != it->hash)
      bad(fmt::format("entry of {} tokens: hash {:016x} is not its path's", it->path.size(), it->hash));
    if (it->bytes != it->contents->bytes()) bad(fmt::format("entry {:016x} counts {} bytes", it->hash, it->bytes));
    bytes += it->bytes;
    int found = 0;
    auto [lo, hi] = index_.equal_range(it->hash);
    for (auto i = lo; i != hi; ++i) {
      if (i->second == it) ++found;
      else if (i->second->path == it->path) bad(fmt::format("path of entry {:016x} is held twice", it->hash));
    }
    if (found != 1) bad(fmt::format("entry {:016x} is indexed {} times", it->hash, found));
  }
  if (index_.size() != static_cast<size_t>(entries))
    bad(fmt::format("index has {} entries for {} held", index_.size(), entries));
  if (entries != stats_.entries || bytes != stats_.bytes)
    bad(fmt::format("{} entries of {} bytes held, counters say {} and {}", entries, bytes, stats_.entries, stats_.bytes));
  if (bytes > stats_.capacity_bytes) bad(fmt::format("{} bytes held over the bound of {}", bytes, stats_.capacity_bytes));
}

}  // namespace ft
