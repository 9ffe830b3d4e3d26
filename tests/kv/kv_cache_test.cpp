// Page pool, block tables and the KV cache's sizing.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "kv/kv_cache.h"
#include "util/error.h"

namespace ft {
namespace {

TEST(PagePool, AllocateIsAllOrNothingAndReleaseReturnsPages) {
  PagePool pool(5, 64);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_FALSE(pool.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.n_free(), 2);
  ASSERT_TRUE(pool.allocate(2, b));
  std::set<int32_t> all(a.begin(), a.end());
  all.insert(b.begin(), b.end());
  EXPECT_EQ(all.size(), 5u);  // distinct ids
  EXPECT_EQ(*all.rbegin(), 4);
  pool.release(a);
  EXPECT_EQ(pool.n_free(), 3);
  EXPECT_THROW(pool.release(a), Error);  // double free
  EXPECT_THROW(pool.release({7}), Error);
  EXPECT_THROW(PagePool(0, 64), Error);
}

TEST(BlockTable, ReserveGrowsByWholePagesAndReleaseEmpties) {
  PagePool pool(4, 16);
  BlockTable s1, s2;
  EXPECT_TRUE(s1.reserve(pool, 1));
  EXPECT_EQ(s1.pages().size(), 1u);
  EXPECT_TRUE(s1.reserve(pool, 16));
  EXPECT_EQ(s1.pages().size(), 1u);
  EXPECT_TRUE(s1.reserve(pool, 17));
  EXPECT_EQ(s1.pages().size(), 2u);
  EXPECT_EQ(s1.capacity(pool), 32);
  EXPECT_EQ(s2.pages_needed(pool, 40), 3);
  EXPECT_FALSE(s2.reserve(pool, 40));  // only 2 free
  EXPECT_TRUE(s2.pages().empty());
  EXPECT_TRUE(s2.reserve(pool, 32));
  EXPECT_EQ(pool.n_free(), 0);
  s1.release(pool);
  EXPECT_TRUE(s1.pages().empty());
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_TRUE(s2.reserve(pool, 64));
}

TEST(KvCache, SizedFromTokenBudget) {
  CpuOps ops(1);
  KvCacheConfig c{3, 2, 16, 64, 130, DType::F32};
  KvCache kv(ops, c);
  EXPECT_EQ(kv.pool().n_pages(), 3);  // ceil(130 / 64)
  EXPECT_EQ(kv.bytes(), 2LL * 3 * 3 * 64 * 2 * 16 * 4);
  KvLayer l = kv.layer(2);
  EXPECT_TRUE(l.k.has_shape({3, 64, 2, 16}));
  EXPECT_TRUE(l.v.has_shape({3, 64, 2, 16}));
  EXPECT_NE(l.k.data, l.v.data);
  EXPECT_THROW(kv.layer(3), Error);
  c.token_budget = 0;
  EXPECT_THROW(KvCache(ops, c), Error);
}

}  // namespace
}  // namespace ft
