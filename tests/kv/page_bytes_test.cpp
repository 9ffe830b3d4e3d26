// PageBlockPool and PageBytes (kv/page_bytes.h): the host memory the KV tiers' saved pages live in
// (pinned on CUDA). Blocks come from chunks grown on demand up to the cap and are reused once given
// back; past the cap PageBytes fall back to the heap; a copy of pool bytes never takes pool memory
// (only the device writes pool blocks).
#include <gtest/gtest.h>

#include <cstring>

#include "kv/page_bytes.h"

namespace ft {
namespace {

std::shared_ptr<PageBlockPool> pool_of(int64_t cap, int64_t chunk) {
  return std::make_shared<PageBlockPool>(make_host_allocator(), cap, chunk);
}

TEST(PageBlockPool, BlocksComeFromChunksUpToTheCapAndAreReused) {
  auto pool = pool_of(4096, 2048);
  EXPECT_STREQ(pool->kind(), "host");
  void* a = pool->take(1000);  // stride 1024: a chunk of two blocks
  void* b = pool->take(1000);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
  EXPECT_EQ(pool->reserved_bytes(), 2048);
  EXPECT_EQ(pool->used_bytes(), 2048);
  void* c = pool->take(3000);  // another size: its own chunk (3072 of the 2048 left: no room)
  EXPECT_EQ(c, nullptr);
  void* d = pool->take(2000);  // stride 2048: exactly the room left
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(pool->reserved_bytes(), 4096);
  EXPECT_EQ(pool->take(1000), nullptr);  // at the cap, no free block of this size
  EXPECT_TRUE(pool->owns(a) && pool->owns(static_cast<char*>(d) + 2047));
  int stack = 0;
  EXPECT_FALSE(pool->owns(&stack));
  EXPECT_FALSE(pool->give(&stack, 4));
  EXPECT_TRUE(pool->give(a, 1000));
  EXPECT_EQ(pool->take(1000), a);  // reused
  EXPECT_TRUE(pool->give(b, 1000));
  EXPECT_TRUE(pool->give(d, 2000));
  EXPECT_EQ(pool->used_bytes(), 1024);
}

TEST(PageBytes, PoolBytesFallBackToTheHeapAndCopiesTakeTheHeap) {
  auto pool = pool_of(1024, 1024);
  PageBytes x{PageAllocator<uint8_t>(pool)};
  x.resize(1024);
  EXPECT_TRUE(x.get_allocator().pooled(x.data()));
  PageBytes y{PageAllocator<uint8_t>(pool)};
  y.resize(100);  // the pool is full: heap bytes
  EXPECT_FALSE(y.get_allocator().pooled(y.data()));
  std::memset(x.data(), 7, x.size());
  const PageBytes copy = x;  // a copy is written by the host: never pool memory
  EXPECT_FALSE(copy.get_allocator().pooled(copy.data()));
  EXPECT_EQ(copy, x);
  PageBytes moved = std::move(x);  // a move keeps the block
  EXPECT_TRUE(moved.get_allocator().pooled(moved.data()));
  EXPECT_EQ(pool->used_bytes(), 1024);
  moved = PageBytes();
  EXPECT_EQ(pool->used_bytes(), 0);  // given back when the bytes go
  PageBytes plain;
  plain.assign(16, 3);  // no pool: the heap
  EXPECT_FALSE(plain.get_allocator().pooled(plain.data()));
}

}  // namespace
}  // namespace ft
