// DiskPageStore (--prompt-cache-dir, issue 39): pages written in the background come back equal after
// the store is reopened; the LRU bound removes the oldest files; files of another fingerprint are
// never read, and a file whose header is wrong (magic, version, fingerprint, size) is skipped with one
// warning naming the field and its offset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

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

}  // namespace
}  // namespace ft
