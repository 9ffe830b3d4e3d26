// DiskPageStore (--prompt-cache-dir, issue 39): pages written in the background come back equal after
// the store is reopened; the LRU bound removes the oldest files; files of another fingerprint are
// never read, and a file whose header is wrong (magic, version, fingerprint, size) is skipped with one
// warning naming the field and its offset. Read-ahead (prefetch): pages read in the background are
// served from memory without touching their files again, a corrupt file never enters the map, a get()
// racing the reader reads each file once, and the map's bound drops the oldest call's pages.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "kv/disk_page_store.h"
#include "log_capture.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

constexpr int32_t kPage = 4;
const DiskPageStore::Layout kLayout{64, 32, 0};

std::vector<int32_t> path_of(int32_t pages, int32_t salt = 0) {
  std::vector<int32_t> p(static_cast<size_t>(pages * kPage));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int32_t>(i * 7 + 3) + salt;
  return p;
}

std::shared_ptr<PageContents> contents_of(uint8_t seed, bool swa) {
  auto c = std::make_shared<PageContents>();
  c->kv.resize(64);
  for (size_t i = 0; i < c->kv.size(); ++i) c->kv[i] = static_cast<uint8_t>(seed + i);
  if (swa) c->swa.assign(32, seed);
  return c;
}

/** Writes pages 1..n of one path and waits for the writer. */
void write_chain(DiskPageStore& s, int32_t n) {
  const std::vector<int32_t> p = path_of(n);
  for (int32_t k = 1; k <= n; ++k) {
    std::span<const int32_t> path(p.data(), static_cast<size_t>(k * kPage));
    s.put(path_hash(path, kPage), path, contents_of(static_cast<uint8_t>(k), k % 2 == 0));
  }
  s.flush();
}

int count_lines(const testing::LogCapture& log, const std::string& what) {
  int n = 0;
  for (const std::string& l : log.lines()) n += l.find(what) != std::string::npos;
  return n;
}

TEST(DiskPageStore, PagesComeBackAfterReopening) {
  const std::string dir = testing::scratch_path("disk_store");
  fs::remove_all(dir);
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    write_chain(s, 3);
    EXPECT_EQ(s.stats().entries, 3);
    s.check_integrity();
  }
  DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
  EXPECT_EQ(s.stats().entries, 3);
  s.check_integrity();
  const std::vector<int32_t> p = path_of(3);
  for (int32_t k = 1; k <= 3; ++k) {
    std::span<const int32_t> path(p.data(), static_cast<size_t>(k * kPage));
    std::shared_ptr<const PageContents> c = s.get(path_hash(path, kPage), path);
    ASSERT_NE(c, nullptr) << k;
    EXPECT_EQ(c->kv, contents_of(static_cast<uint8_t>(k), false)->kv);
    EXPECT_EQ(c->swa.size(), k % 2 == 0 ? 32u : 0u);
  }
  // The first page's hash with other tokens: no hit, the hash alone never matches.
  const std::vector<int32_t> other = path_of(1, 1);
  EXPECT_EQ(s.get(path_hash(std::span<const int32_t>(p.data(), kPage), kPage), other), nullptr);
  EXPECT_EQ(s.stats().hits, 3);
  EXPECT_GT(s.stats().bytes_read, 3 * 64);
  fs::remove_all(dir);
}

TEST(DiskPageStore, LruBoundRemovesTheOldestFiles) {
  const std::string dir = testing::scratch_path("disk_store_lru");
  fs::remove_all(dir);
  // A file of one page: 56 header + 16 path + 64 kv + 8 = 144 bytes; of four pages 192 (+32 swa).
  DiskPageStore s(dir, 500, kPage, 0x1234, kLayout);
  write_chain(s, 4);
  s.check_integrity();
  EXPECT_LE(s.stats().bytes, 500);
  EXPECT_EQ(s.stats().entries, 2);  // pages 3 and 4 (192 + 32 and 208 bytes)
  EXPECT_EQ(s.stats().dropped, 2);
  const std::vector<int32_t> p = path_of(4);
  EXPECT_FALSE(s.contains(path_hash(std::span<const int32_t>(p.data(), kPage), kPage), std::span<const int32_t>(p.data(), kPage)));
  EXPECT_FALSE(fs::exists(s.file_of(path_hash(std::span<const int32_t>(p.data(), kPage), kPage))));
  EXPECT_TRUE(s.contains(path_hash(p, kPage), p));
  fs::remove_all(dir);
}

TEST(DiskPageStore, BadAndForeignFilesAreSkippedWithOneWarningEach) {
  const std::string dir = testing::scratch_path("disk_store_bad");
  fs::remove_all(dir);
  std::vector<std::string> files;
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    write_chain(s, 4);
    const std::vector<int32_t> p = path_of(4);
    for (int32_t k = 1; k <= 4; ++k)
      files.push_back(s.file_of(path_hash(std::span<const int32_t>(p.data(), static_cast<size_t>(k * kPage)), kPage)));
  }
  auto patch = [](const std::string& f, std::streamoff at, uint8_t v) {
    std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(at);
    io.put(static_cast<char>(v));
  };
  patch(files[0], 0, 'X');  // magic
  patch(files[1], 4, 9);    // version
  patch(files[2], 8, 0x99);  // fingerprint in the header, not the name's
  fs::resize_file(files[3], fs::file_size(files[3]) - 1);
  {
    testing::LogCapture log(spdlog::level::warn);
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    EXPECT_EQ(s.stats().entries, 0);
    EXPECT_EQ(s.skipped(), 4);
    EXPECT_EQ(count_lines(log, "skipping " + files[0] + ": magic at offset 0"), 1);
    EXPECT_EQ(count_lines(log, "skipping " + files[1] + ": version at offset 4 is 9"), 1);
    EXPECT_EQ(count_lines(log, "skipping " + files[2] + ": fingerprint at offset 8"), 1);
    EXPECT_EQ(count_lines(log, "skipping " + files[3] + ": size: the header (offsets 24..56) declares"), 1);
    EXPECT_EQ(log.lines().size(), 4u);
  }
  {  // another model's store in the same folder reads none of them: one line for all
    testing::LogCapture log(spdlog::level::warn);
    DiskPageStore other(dir, 1 << 20, kPage, 0x5678, kLayout);
    EXPECT_EQ(other.stats().entries, 0);
    EXPECT_EQ(count_lines(log, "4 file(s) in " + dir + " belong to another model"), 1);
    EXPECT_EQ(log.lines().size(), 1u);
  }
  EXPECT_THROW(DiskPageStore(files[0], 1 << 20, kPage, 1, kLayout), Error);  // a file is not a folder
  fs::remove_all(dir);
}

/** check_folder's message for `dir`, or "" when it passes. */
std::string folder_refusal(const std::string& dir) {
  try {
    DiskPageStore::check_folder(dir);
    return "";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
}

TEST(DiskPageStore, AFolderThatTakesNoFileIsRefusedNamingTheFlag) {
  // /proc/1 is a folder where nothing can be written, even by root: the store ended in "internal error:
  // filesystem error" (its scan), and a read-only folder was taken until the first write warned.
  EXPECT_EQ(folder_refusal("/proc/1").rfind("--prompt-cache-dir /proc/1: cannot write files in this folder (", 0), 0u)
      << folder_refusal("/proc/1");
  EXPECT_THROW(DiskPageStore("/proc/1", 1 << 20, kPage, 1, kLayout), Error);
  EXPECT_EQ(folder_refusal("/proc/1/ft-cache").rfind("--prompt-cache-dir /proc/1/ft-cache: not a folder that can be made (",
                                                     0),
            0u)
      << folder_refusal("/proc/1/ft-cache");
  const std::string file = testing::scratch_path("disk_store_plain_file");
  std::ofstream(file) << "x";
  EXPECT_EQ(folder_refusal(file).rfind("--prompt-cache-dir " + file + ": not a folder that can be made (", 0), 0u)
      << folder_refusal(file);
  fs::remove(file);
  // A folder made for it passes and keeps no probe file behind.
  const std::string dir = testing::scratch_path("disk_store_new_folder") + "/a/b";
  EXPECT_EQ(folder_refusal(dir), "");
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
  if (::geteuid() != 0) {  // root writes through a folder's mode bits: /proc/1 above stands for it there
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    EXPECT_NE(folder_refusal(dir).find("cannot write files in this folder (Permission denied)"), std::string::npos);
    fs::permissions(dir, fs::perms::owner_all);
  }
  fs::remove_all(testing::scratch_path("disk_store_new_folder"));
}

/** The path of page `k` (1-based) of path_of(n, salt) and its hash. */
struct Page {
  std::vector<int32_t> path;
  uint64_t hash = 0;
  PageRef ref() const { return {hash, path}; }
};
Page page_of(int32_t k, int32_t salt = 0) {
  Page p;
  p.path = path_of(k, salt);
  p.hash = path_hash(p.path, kPage);
  return p;
}

TEST(DiskPageStore, ReadAheadServesPagesFromMemoryWithoutTheirFiles) {
  const std::string dir = testing::scratch_path("disk_store_ahead");
  fs::remove_all(dir);
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    write_chain(s, 3);
  }
  DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
  const std::vector<Page> pages{page_of(1), page_of(2), page_of(3)};
  const std::vector<PageRef> refs{pages[0].ref(), pages[1].ref(), pages[2].ref()};
  s.prefetch(refs);
  s.flush_read_ahead();
  EXPECT_EQ(s.read_ahead_pages(), 3);
  EXPECT_EQ(s.files_read(), 3);
  s.check_integrity();
  // The files go away or are cut short after the reads: get() does not look at them again.
  fs::remove(s.file_of(pages[0].hash));
  fs::resize_file(s.file_of(pages[1].hash), 10);
  for (int32_t k = 1; k <= 3; ++k) {
    std::shared_ptr<const PageContents> c = s.get(pages[k - 1].hash, pages[k - 1].path);
    ASSERT_NE(c, nullptr) << k;
    EXPECT_EQ(c->kv, contents_of(static_cast<uint8_t>(k), false)->kv) << k;
    EXPECT_EQ(c->swa.size(), k % 2 == 0 ? 32u : 0u) << k;
  }
  EXPECT_EQ(s.files_read(), 3);
  EXPECT_EQ(s.stats().hits, 3);
  EXPECT_EQ(s.stats().read_ahead_hits, 3);
  EXPECT_EQ(s.read_ahead_pages(), 0);  // a page taken leaves the map
  EXPECT_EQ(s.read_ahead_bytes(), 0);
  s.check_integrity();
  // Taken: a second get() reads the file again (the truncated one fails its check now).
  testing::LogCapture log(spdlog::level::warn);
  EXPECT_EQ(s.get(pages[1].hash, pages[1].path), nullptr);
  EXPECT_EQ(count_lines(log, "skipping " + s.file_of(pages[1].hash) + ": truncated"), 1);
  EXPECT_NE(s.get(pages[2].hash, pages[2].path), nullptr);
  EXPECT_EQ(s.files_read(), 5);
  EXPECT_EQ(s.stats().read_ahead_hits, 3);
  fs::remove_all(dir);
}

TEST(DiskPageStore, ACorruptFileIsNeverReadAhead) {
  const std::string dir = testing::scratch_path("disk_store_ahead_bad");
  fs::remove_all(dir);
  const std::vector<Page> pages{page_of(1), page_of(2)};
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    write_chain(s, 2);
    std::fstream io(s.file_of(pages[1].hash), std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(100);  // in the KV bytes: only the checksum, read with the whole file, finds it
    io.put('\x77');
  }
  testing::LogCapture log(spdlog::level::warn);
  DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
  EXPECT_EQ(s.stats().entries, 2);
  const std::vector<PageRef> refs{pages[0].ref(), pages[1].ref()};
  s.prefetch(refs);
  s.flush_read_ahead();
  EXPECT_EQ(s.read_ahead_pages(), 1);
  EXPECT_EQ(count_lines(log, "skipping " + s.file_of(pages[1].hash) + ": checksum at offset"), 1);
  EXPECT_EQ(s.skipped(), 1);
  EXPECT_FALSE(s.contains(pages[1].hash, pages[1].path));  // dropped from the index
  EXPECT_EQ(s.get(pages[1].hash, pages[1].path), nullptr);
  EXPECT_NE(s.get(pages[0].hash, pages[0].path), nullptr);
  EXPECT_EQ(s.files_read(), 2);  // the bad file once, by the reader
  EXPECT_EQ(log.lines().size(), 1u);
  EXPECT_EQ(s.stats().read_ahead_hits, 1);
  s.check_integrity();
  fs::remove_all(dir);
}

TEST(DiskPageStore, GetRacingTheReaderReadsEachFileOnce) {
  const std::string dir = testing::scratch_path("disk_store_ahead_race");
  fs::remove_all(dir);
  constexpr int32_t kPages = 12;
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    write_chain(s, kPages);
  }
  std::vector<Page> pages;
  std::vector<PageRef> refs;
  for (int32_t k = 1; k <= kPages; ++k) pages.push_back(page_of(k));
  for (const Page& p : pages) refs.push_back(p.ref());
  for (int round = 0; round < 20; ++round) {
    // get() right after prefetch(): each page is taken ready, waited for while being read, or read by
    // get() itself before the reader begins it; whichever happens, it is read once and is the right one.
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    s.prefetch(refs);
    for (int32_t k = 1; k <= kPages; ++k) {
      std::shared_ptr<const PageContents> c = s.get(pages[k - 1].hash, pages[k - 1].path);
      ASSERT_NE(c, nullptr) << k;
      ASSERT_EQ(c->kv, contents_of(static_cast<uint8_t>(k), false)->kv) << k;
    }
    s.flush_read_ahead();
    EXPECT_EQ(s.files_read(), kPages);
    EXPECT_EQ(s.read_ahead_pages(), 0);
    EXPECT_EQ(s.stats().hits, kPages);
    s.check_integrity();
  }
  fs::remove_all(dir);
}

TEST(DiskPageStore, ReadAheadBoundDropsTheOldestCallsPages) {
  const std::string dir = testing::scratch_path("disk_store_ahead_bound");
  fs::remove_all(dir);
  // Four one-page paths of 144-byte files; the map holds two.
  std::vector<Page> pages;
  for (int32_t salt = 0; salt < 4; ++salt) pages.push_back(page_of(1, 1000 * salt));
  {
    DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout);
    for (const Page& p : pages) s.put(p.hash, p.path, contents_of(static_cast<uint8_t>(p.path[0]), false));
    s.flush();
  }
  DiskPageStore s(dir, 1 << 20, kPage, 0x1234, kLayout, 300);
  auto ask = [&](std::vector<int> which) {
    std::vector<PageRef> refs;
    for (int i : which) refs.push_back(pages[static_cast<size_t>(i)].ref());
    s.prefetch(refs);
    s.flush_read_ahead();
    s.check_integrity();
  };
  ask({0});
  ask({1});
  ask({2});  // drops page 0's entry, the oldest
  EXPECT_EQ(s.read_ahead_pages(), 2);
  EXPECT_EQ(s.read_ahead_bytes(), 288);
  ask({1, 2, 3});  // one call never drops its own pages: 1 and 2 stay, 3 does not fit
  EXPECT_EQ(s.read_ahead_pages(), 2);
  EXPECT_EQ(s.files_read(), 3);
  for (const Page& p : pages) {
    std::shared_ptr<const PageContents> c = s.get(p.hash, p.path);
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->kv, contents_of(static_cast<uint8_t>(p.path[0]), false)->kv);
  }
  EXPECT_EQ(s.stats().read_ahead_hits, 2);  // pages 1 and 2; 0 and 3 were read by get()
  EXPECT_EQ(s.files_read(), 5);
  // Pages not on disk are not read ahead.
  const Page absent1 = page_of(1, 7777), absent2 = page_of(2, 7777);
  const std::vector<PageRef> refs{absent1.ref(), absent2.ref()};
  s.prefetch(refs);
  s.flush_read_ahead();
  EXPECT_EQ(s.read_ahead_pages(), 0);
  s.check_integrity();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft
