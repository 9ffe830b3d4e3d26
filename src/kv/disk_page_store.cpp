#include "kv/disk_page_store.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/error.h"
#include "util/log.h"

namespace ft {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[4] = {'F', 'T', 'P', 'C'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeader = 56;

template <typename T>
T read_at(const std::vector<uint8_t>& b, size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

template <typename T>
void append(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

bool read_file(const std::string& file, std::vector<uint8_t>& out, size_t max_bytes) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return false;
  out.resize(max_bytes);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(max_bytes));
  out.resize(static_cast<size_t>(in.gcount()));
  return true;
}

}  // namespace

void DiskPageStore::check_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);  // false and no error when it is there already
  if (ec || !fs::is_directory(dir, ec))
    fail(ErrorCode::kInvalidArgument, "--prompt-cache-dir {}: not a folder that can be made ({})", dir,
         ec ? ec.message() : "it is a file");
  // The writer would find out only at its first page, with a warning: a probe file now refuses a
  // read-only folder (or one of /proc, where nothing can be made) at start.
  const std::string probe = fmt::format("{}/.ftpc-probe-{}", dir, ::getpid());
  std::FILE* f = std::fopen(probe.c_str(), "wb");
  int err = f ? 0 : errno;
  if (f) {
    if (std::fputc(0, f) == EOF) err = errno ? errno : EIO;
    if (std::fclose(f) != 0 && err == 0) err = errno ? errno : EIO;
  }
  fs::remove(probe, ec);
  if (err != 0)
    fail(ErrorCode::kInvalidArgument,
         "--prompt-cache-dir {}: cannot write files in this folder ({}); give a folder this user can write", dir,
         std::strerror(err));
}

DiskPageStore::DiskPageStore(std::string dir, int64_t capacity_bytes, int32_t page_size, uint64_t fingerprint,
                             Layout layout, int64_t read_ahead_bytes)
    : dir_(std::move(dir)), page_size_(page_size), fingerprint_(fingerprint), layout_(layout) {
  if (capacity_bytes < 1)
    fail(ErrorCode::kInvalidArgument, "--prompt-cache-gib: the prompt cache's bound must be > 0 (got {} bytes)",
         capacity_bytes);
  if (page_size < 1) fail(ErrorCode::kInvalidArgument, "prompt cache: page size {} must be >= 1", page_size);
  check_folder(dir_);
  stats_.capacity_bytes = capacity_bytes;
  if (read_ahead_bytes < 0)
    fail(ErrorCode::kInvalidArgument, "prompt cache: read-ahead bound {} must be >= 0 (0: the write queue's)",
         read_ahead_bytes);
  queue_limit_ = queue_bound(capacity_bytes);
  ahead_limit_ = read_ahead_bytes > 0 ? read_ahead_bytes : queue_limit_;
  scan();
  thread_ = std::thread([this] { writer(); });
  reader_ = std::thread([this] { reader(); });
}

DiskPageStore::~DiskPageStore() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  read_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (reader_.joinable()) reader_.join();
}

std::string DiskPageStore::file_of(uint64_t hash) const {
  return fmt::format("{}/{:016x}-{:016x}.ftpc", dir_, fingerprint_, hash);
}

std::string DiskPageStore::check(const std::vector<uint8_t>& b, uint64_t file_size, bool whole, uint64_t name_hash,
                                 std::vector<int32_t>* path, PageContents* contents) const {
  if (b.size() < kHeader)
    return fmt::format("truncated: the header needs {} bytes at offset 0, the file has {}", kHeader, b.size());
  if (std::memcmp(b.data(), kMagic, 4) != 0) return "magic at offset 0 is not \"FTPC\"";
  if (const auto v = read_at<uint32_t>(b, 4); v != kVersion)
    return fmt::format("version at offset 4 is {}, this build reads {}", v, kVersion);
  if (const auto f = read_at<uint64_t>(b, 8); f != fingerprint_)
    return fmt::format("fingerprint at offset 8 is {:016x}, not this model's and KV layout's {:016x} (a foreign file)", f,
                       fingerprint_);
  const auto hash = read_at<uint64_t>(b, 16);
  if (hash != name_hash) return fmt::format("path hash at offset 16 is {:016x}, the file name says {:016x}", hash, name_hash);
  const auto n = read_at<uint32_t>(b, 24);
  if (n == 0 || n % static_cast<uint32_t>(page_size_) != 0 || n > (1u << 26))
    return fmt::format("token count at offset 24 is {}, not whole pages of {}", n, page_size_);
  if (const auto ps = read_at<uint32_t>(b, 28); ps != static_cast<uint32_t>(page_size_))
    return fmt::format("page size at offset 28 is {}, this cache's is {}", ps, page_size_);
  const auto kv = read_at<uint64_t>(b, 32), swa = read_at<uint64_t>(b, 40), state = read_at<uint64_t>(b, 48);
  if (kv != static_cast<uint64_t>(layout_.kv_bytes))
    return fmt::format("kv bytes at offset 32 is {}, the layout's {}", kv, layout_.kv_bytes);
  if (swa != 0 && swa != static_cast<uint64_t>(layout_.swa_bytes))
    return fmt::format("swa bytes at offset 40 is {}, the layout's 0 or {}", swa, layout_.swa_bytes);
  if (state != 0 && state != static_cast<uint64_t>(layout_.state_bytes))
    return fmt::format("state bytes at offset 48 is {}, the layout's 0 or {}", state, layout_.state_bytes);
  const uint64_t tokens_end = kHeader + uint64_t{n} * 4;
  const uint64_t want = tokens_end + kv + swa + state + 8;
  if (file_size != want)
    return fmt::format("size: the header (offsets 24..56) declares {} bytes, the file has {}{}", want, file_size,
                       file_size < want ? " (truncated)" : "");
  if (b.size() < tokens_end) return fmt::format("truncated: tokens at offset {} cut short", kHeader);
  std::vector<int32_t> p(n);
  std::memcpy(p.data(), b.data() + kHeader, size_t{n} * 4);
  if (path_hash(p, page_size_) != hash)
    return fmt::format("tokens at offset {}: their path hash is not the header's {:016x}", kHeader, hash);
  if (whole) {
    if (b.size() != want) return fmt::format("truncated: read {} of {} bytes", b.size(), want);
    const uint64_t sum = read_at<uint64_t>(b, static_cast<size_t>(want - 8));
    if (XXH3_64bits(b.data(), static_cast<size_t>(want - 8)) != sum)
      return fmt::format("checksum at offset {} does not match the bytes before it (corrupt)", want - 8);
    if (contents) {
      const uint8_t* d = b.data() + tokens_end;
      contents->kv.assign(d, d + kv);
      contents->swa.assign(d + kv, d + kv + swa);
      contents->state.assign(d + kv + swa, d + kv + swa + state);
    }
  }
  if (path) *path = std::move(p);
  return "";
}

void DiskPageStore::scan() {
  struct Found {
    fs::file_time_type mtime;
    Entry e;
  };
  std::vector<Found> found;
  int64_t foreign = 0;
  const std::string prefix = fmt::format("{:016x}-", fingerprint_);
  for (const fs::directory_entry& de : fs::directory_iterator(dir_)) {
    const std::string name = de.path().filename().string();
    std::error_code type_ec;  // an entry whose type cannot be read is not one of ours
    if (!de.is_regular_file(type_ec) || name.size() != 16 + 1 + 16 + 5 || name.substr(name.size() - 5) != ".ftpc") continue;
    if (name.compare(0, prefix.size(), prefix) != 0) {
      ++foreign;
      continue;
    }
    const uint64_t name_hash = std::strtoull(name.substr(17, 16).c_str(), nullptr, 16);
    std::vector<uint8_t> head;
    std::error_code ec;
    const uint64_t size = fs::file_size(de.path(), ec);
    // The header and the path: enough to index it; the checksum is checked when it is read.
    std::string why;
    Entry e;
    if (ec || !read_file(de.path().string(), head, static_cast<size_t>(std::min<uint64_t>(size, kHeader)))) {
      why = "cannot be read";
    } else {
      if (head.size() == kHeader)  // then the path, as long as the header says (checked below)
        read_file(de.path().string(), head,
                  static_cast<size_t>(std::min<uint64_t>(size, kHeader + uint64_t{read_at<uint32_t>(head, 24)} * 4)));
      why = check(head, size, false, name_hash, &e.path, nullptr);
    }
    if (!why.empty()) {
      spdlog::warn("prompt cache: skipping {}: {}", de.path().string(), why);
      ++skipped_;
      continue;
    }
    e.hash = name_hash;
    e.bytes = static_cast<int64_t>(size);
    found.push_back({de.last_write_time(ec), std::move(e)});
  }
  if (foreign > 0)
    spdlog::warn("prompt cache: {} file(s) in {} belong to another model, backend or KV layout; skipped", foreign, dir_);
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  std::lock_guard<std::mutex> lk(mu_);
  for (Found& f : found) insert_locked(std::move(f.e));  // newest ends at the front
  if (!found.empty())
    spdlog::info("prompt cache: {} page(s), {:.1f} MiB in {}", stats_.entries, static_cast<double>(stats_.bytes) / (1 << 20),
                 dir_);
}

void DiskPageStore::insert_locked(Entry e) {
  if (auto it = index_.find(e.hash); it != index_.end()) erase_locked(it->second, false);
  stats_.bytes += e.bytes;
  ++stats_.entries;
  lru_.push_front(std::move(e));
  index_[lru_.front().hash] = lru_.begin();
  while (stats_.bytes > stats_.capacity_bytes && lru_.size() > 1) {
    erase_locked(std::prev(lru_.end()), true);
    ++stats_.dropped;
  }
}

void DiskPageStore::erase_locked(Lru::iterator it, bool remove_file) {
  if (remove_file) {
    std::error_code ec;
    fs::remove(file_of(it->hash), ec);
  }
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(it->hash);
  lru_.erase(it);
}

void DiskPageStore::put(uint64_t hash, std::span<const int32_t> path, std::shared_ptr<const PageContents> contents) {
  if (!contents) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = index_.find(hash);
        it != index_.end() && std::equal(path.begin(), path.end(), it->second->path.begin(), it->second->path.end()))
      return;
    if (queued_bytes_ + contents->bytes() > queue_limit_) {
      ++stats_.dropped;
      return;
    }
    queued_bytes_ += contents->bytes();
    queue_.push_back(Pending{hash, std::vector<int32_t>(path.begin(), path.end()), std::move(contents)});
  }
  cv_.notify_one();
}

bool DiskPageStore::write_file(const Pending& p, int64_t& bytes) {
  std::vector<uint8_t> b;
  const PageContents& c = *p.contents;
  try {
    c.wait_ready();  // a page saved from the device may still be on its way to host memory
  } catch (const std::exception& e) {
    spdlog::warn("prompt cache: the page for {} never arrived from the device ({})", file_of(p.hash), e.what());
    return false;
  }
  b.reserve(kHeader + p.path.size() * 4 + static_cast<size_t>(c.bytes()) + 8);
  b.insert(b.end(), kMagic, kMagic + 4);
  append<uint32_t>(b, kVersion);
  append<uint64_t>(b, fingerprint_);
  append<uint64_t>(b, p.hash);
  append<uint32_t>(b, static_cast<uint32_t>(p.path.size()));
  append<uint32_t>(b, static_cast<uint32_t>(page_size_));
  append<uint64_t>(b, c.kv.size());
  append<uint64_t>(b, c.swa.size());
  append<uint64_t>(b, c.state.size());
  const auto* tok = reinterpret_cast<const uint8_t*>(p.path.data());
  b.insert(b.end(), tok, tok + p.path.size() * 4);
  b.insert(b.end(), c.kv.begin(), c.kv.end());
  b.insert(b.end(), c.swa.begin(), c.swa.end());
  b.insert(b.end(), c.state.begin(), c.state.end());
  append<uint64_t>(b, XXH3_64bits(b.data(), b.size()));
  const std::string file = file_of(p.hash);
  const std::string tmp = fmt::format("{}.tmp{}", file, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, file, ec);
  if (ec) {
    fs::remove(tmp, ec);
    return false;
  }
  bytes = static_cast<int64_t>(b.size());
  return true;
}

void DiskPageStore::writer() {
  bool warned = false;
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping with nothing left
      p = queue_.front();  // stays queued (contains, get) until written
      writing_ = true;
    }
    int64_t bytes = 0;
    const bool ok = write_file(p, bytes);
    if (!ok && !warned) {
      spdlog::warn("prompt cache: cannot write {} (disk full or not writable?); pages are kept in memory only",
                   file_of(p.hash));
      warned = true;
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      queue_.pop_front();
      queued_bytes_ -= p.contents->bytes();
      writing_ = false;
      if (ok) {
        stats_.bytes_written += bytes;
        insert_locked(Entry{p.hash, std::move(p.path), bytes});
      } else {
        ++stats_.dropped;
      }
    }
    idle_cv_.notify_all();
  }
}

void DiskPageStore::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty(); });
}

std::string DiskPageStore::read_page(uint64_t hash, std::span<const int32_t> path, PageContents& c,
                                     uint64_t& size) const {
  const std::string file = file_of(hash);
  std::vector<uint8_t> b;
  std::error_code ec;
  size = fs::file_size(file, ec);
  std::vector<int32_t> read_path;
  std::string why;
  if (ec || !read_file(file, b, static_cast<size_t>(size))) why = "cannot be read";
  else why = check(b, size, true, hash, &read_path, &c);
  if (why.empty() && (read_path.size() != path.size() || !std::equal(path.begin(), path.end(), read_path.begin())))
    why = fmt::format("tokens at offset {} are not the indexed path", kHeader);
  return why;
}

void DiskPageStore::skip_locked(uint64_t hash, const std::string& why) {
  spdlog::warn("prompt cache: skipping {}: {}", file_of(hash), why);
  ++skipped_;
  if (auto it = index_.find(hash); it != index_.end()) erase_locked(it->second, false);
}

void DiskPageStore::erase_ahead_locked(AheadList::iterator it) {
  ahead_bytes_ -= it->bytes;
  ahead_index_.erase(it->hash);
  ahead_.erase(it);
}

std::shared_ptr<const PageContents> DiskPageStore::get(uint64_t hash, std::span<const int32_t> path) {
  auto same = [&](const std::vector<int32_t>& p) { return std::equal(path.begin(), path.end(), p.begin(), p.end()); };
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (const Pending& p : queue_) {
      if (p.hash == hash && same(p.path)) {
        ++stats_.hits;
        return p.contents;
      }
    }
    for (;;) {  // read ahead: take it, wait for its read, or read it here when the reader has not begun
      auto a = ahead_index_.find(hash);
      if (a == ahead_index_.end() || !same(a->second->path)) break;
      Ahead& r = *a->second;
      if (r.state == Ahead::State::kReading) {
        ahead_cv_.wait(lk);  // then look again: the reader may have dropped it (a bad file)
        continue;
      }
      if (r.state == Ahead::State::kReady) {
        std::shared_ptr<const PageContents> c = std::move(r.contents);
        ++stats_.hits;
        ++stats_.read_ahead_hits;
        stats_.bytes_read += r.bytes;
        if (auto it = index_.find(hash); it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second);
        erase_ahead_locked(a->second);
        return c;
      }
      erase_ahead_locked(a->second);  // still queued: the reader passes its hash over
      ahead_cv_.notify_all();
      break;
    }
    auto it = index_.find(hash);
    if (it == index_.end() || !same(it->second->path)) return nullptr;
  }
  auto c = std::make_shared<PageContents>();
  uint64_t size = 0;
  const std::string why = read_page(hash, path, *c, size);
  std::lock_guard<std::mutex> lk(mu_);
  ++files_read_;
  if (!why.empty()) {
    skip_locked(hash, why);
    return nullptr;
  }
  if (auto it = index_.find(hash); it != index_.end()) lru_.splice(lru_.begin(), lru_, it->second);
  ++stats_.hits;
  stats_.bytes_read += static_cast<int64_t>(size);
  return c;
}

void DiskPageStore::prefetch(std::span<const PageRef> pages) {
  if (pages.empty()) return;
  bool queued = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t call = ++prefetch_calls_;
    for (const PageRef& pg : pages) {
      auto same = [&](const std::vector<int32_t>& p) {
        return std::equal(pg.path.begin(), pg.path.end(), p.begin(), p.end());
      };
      if (auto a = ahead_index_.find(pg.hash); a != ahead_index_.end()) {
        if (same(a->second->path)) {  // asked for again: now this call's, the newest
          a->second->call = call;
          ahead_.splice(ahead_.end(), ahead_, a->second);
        }
        continue;
      }
      auto ix = index_.find(pg.hash);
      if (ix == index_.end() || !same(ix->second->path)) continue;  // not on disk (or being written)
      const int64_t bytes = ix->second->bytes;
      // Room: drop earlier calls' entries, oldest first, never one being read; this call's sit at the back.
      for (auto it = ahead_.begin(); ahead_bytes_ + bytes > ahead_limit_ && it != ahead_.end() && it->call != call;) {
        if (it->state == Ahead::State::kReading) {
          ++it;
          continue;
        }
        erase_ahead_locked(it++);
      }
      if (ahead_bytes_ + bytes > ahead_limit_) break;  // the rest of this call's pages do not fit
      ahead_.push_back(Ahead{pg.hash, std::vector<int32_t>(pg.path.begin(), pg.path.end()), bytes, call,
                             Ahead::State::kQueued, nullptr});
      ahead_index_[pg.hash] = std::prev(ahead_.end());
      ahead_bytes_ += bytes;
      read_queue_.push_back(pg.hash);
      queued = true;
    }
  }
  if (queued) read_cv_.notify_one();
  ahead_cv_.notify_all();  // entries dropped for room: flush_read_ahead() may be done
}

void DiskPageStore::reader() {
  for (;;) {
    uint64_t hash = 0;
    std::vector<int32_t> path;
    {
      std::unique_lock<std::mutex> lk(mu_);
      read_cv_.wait(lk, [&] { return stop_ || !read_queue_.empty(); });
      if (stop_) return;
      hash = read_queue_.front();
      read_queue_.pop_front();
      auto a = ahead_index_.find(hash);
      if (a == ahead_index_.end() || a->second->state != Ahead::State::kQueued) continue;
      a->second->state = Ahead::State::kReading;
      path = a->second->path;
    }
    auto c = std::make_shared<PageContents>();
    uint64_t size = 0;
    const std::string why = read_page(hash, path, *c, size);
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++files_read_;
      auto a = ahead_index_.find(hash);  // a kReading entry is never dropped but here
      FT_CHECK(a != ahead_index_.end() && a->second->state == Ahead::State::kReading);
      if (why.empty()) {
        a->second->state = Ahead::State::kReady;
        a->second->contents = std::move(c);
      } else {
        erase_ahead_locked(a->second);
        skip_locked(hash, why);
      }
    }
    ahead_cv_.notify_all();
  }
}

void DiskPageStore::flush_read_ahead() {
  std::unique_lock<std::mutex> lk(mu_);
  ahead_cv_.wait(lk, [&] {
    return std::all_of(ahead_.begin(), ahead_.end(), [](const Ahead& a) { return a.state == Ahead::State::kReady; });
  });
}

int64_t DiskPageStore::read_ahead_pages() const {
  std::lock_guard<std::mutex> lk(mu_);
  return static_cast<int64_t>(ahead_.size());
}

int64_t DiskPageStore::read_ahead_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ahead_bytes_;
}

bool DiskPageStore::contains(uint64_t hash, std::span<const int32_t> path) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const Pending& p : queue_)
    if (p.hash == hash && std::equal(path.begin(), path.end(), p.path.begin(), p.path.end())) return true;
  auto it = index_.find(hash);
  return it != index_.end() && std::equal(path.begin(), path.end(), it->second->path.begin(), it->second->path.end());
}

PageStoreStats DiskPageStore::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

int64_t DiskPageStore::skipped() const {
  std::lock_guard<std::mutex> lk(mu_);
  return skipped_;
}

int64_t DiskPageStore::files_read() const {
  std::lock_guard<std::mutex> lk(mu_);
  return files_read_;
}

void DiskPageStore::check_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "prompt cache integrity: {}", what); };
  std::lock_guard<std::mutex> lk(mu_);
  int64_t bytes = 0, entries = 0;
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    ++entries;
    bytes += it->bytes;
    auto ix = index_.find(it->hash);
    if (ix == index_.end() || ix->second != it) bad(fmt::format("entry {:016x} is not indexed as itself", it->hash));
    if (path_hash(it->path, page_size_) != it->hash)
      bad(fmt::format("entry of {} tokens: hash {:016x} is not its path's", it->path.size(), it->hash));
    if (it->bytes < static_cast<int64_t>(kHeader + it->path.size() * 4 + 8) + layout_.kv_bytes)
      bad(fmt::format("entry {:016x} counts {} bytes, less than its header and KV", it->hash, it->bytes));
  }
  if (index_.size() != static_cast<size_t>(entries)) bad(fmt::format("index has {} entries for {}", index_.size(), entries));
  if (entries != stats_.entries || bytes != stats_.bytes)
    bad(fmt::format("{} files of {} bytes indexed, counters say {} and {}", entries, bytes, stats_.entries, stats_.bytes));
  if (bytes > stats_.capacity_bytes && entries > 1)
    bad(fmt::format("{} bytes held over the bound of {}", bytes, stats_.capacity_bytes));
  int64_t q = 0;
  for (const Pending& p : queue_) q += p.contents->bytes();
  if (q != queued_bytes_) bad(fmt::format("{} bytes queued, counter says {}", q, queued_bytes_));
  int64_t ahead = 0, reading = 0;
  for (auto it = ahead_.begin(); it != ahead_.end(); ++it) {
    ahead += it->bytes;
    auto ix = ahead_index_.find(it->hash);
    if (ix == ahead_index_.end() || ix->second != it)
      bad(fmt::format("read-ahead entry {:016x} is not indexed as itself", it->hash));
    if (path_hash(it->path, page_size_) != it->hash)
      bad(fmt::format("read-ahead entry of {} tokens: hash {:016x} is not its path's", it->path.size(), it->hash));
    if ((it->state == Ahead::State::kReady) != (it->contents != nullptr))
      bad(fmt::format("read-ahead entry {:016x}: contents {} in state {}", it->hash, it->contents ? "held" : "missing",
                      static_cast<int>(it->state)));
    if (it->state == Ahead::State::kReady && it->contents->bytes() > it->bytes)
      bad(fmt::format("read-ahead entry {:016x} holds {} bytes, counted {}", it->hash, it->contents->bytes(), it->bytes));
    reading += it->state == Ahead::State::kReading;
    if (it->state == Ahead::State::kQueued && std::find(read_queue_.begin(), read_queue_.end(), it->hash) == read_queue_.end())
      bad(fmt::format("read-ahead entry {:016x} is queued for a reader that will not read it", it->hash));
  }
  if (ahead_index_.size() != ahead_.size())
    bad(fmt::format("read-ahead index has {} entries for {}", ahead_index_.size(), ahead_.size()));
  if (ahead != ahead_bytes_) bad(fmt::format("{} bytes read ahead, counter says {}", ahead, ahead_bytes_));
  if (ahead_bytes_ > ahead_limit_) bad(fmt::format("{} bytes read ahead over the bound of {}", ahead_bytes_, ahead_limit_));
  if (reading > 1) bad(fmt::format("{} pages being read ahead by one reader", reading));
}

}  // namespace ft
