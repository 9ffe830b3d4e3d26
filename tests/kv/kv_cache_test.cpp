// Page pool, block tables and the KV cache's sizing.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "kv/kv_cache.h"
#include "kv/kv_page_io.h"
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

TEST(KvCache, CompressedEntryRowsLiveInTheirLayersPages) {
  // DeepSeek-V4's entry rows (KvLayer::e): ceil(page_size / rate) rows a page of the layer's width in
  // the entry dtype, zeroed, counted in bytes() and bytes_per_token(), copied by KvPageIo with the page.
  CpuOps ops(1);
  KvCacheConfig c{3, 1, 16, 16, 64, DType::F32};
  c.layer_entry_rate = {0, 4, 128};
  c.layer_entry_width = {0, 24, 16};
  KvCache kv(ops, c);
  EXPECT_TRUE(kv.layer(0).e.empty());
  EXPECT_TRUE(kv.layer(1).e.has_shape({4, 4, 1, 24}));
  EXPECT_TRUE(kv.layer(2).e.has_shape({4, 1, 1, 16}));
  const auto* e = kv.layer(1).e.ptr<float>();
  EXPECT_TRUE(std::all_of(e, e + kv.layer(1).e.numel(), [](float v) { return v == 0.0f; }));
  const int64_t kv_token = 3 * 2 * 16 * 4, entry_page = (4 * 24 + 16) * 4;
  EXPECT_EQ(kv.bytes(), 4 * (16 * kv_token + entry_page));
  EXPECT_EQ(KvCache::bytes_per_token(c), kv_token + entry_page / 16);
  EXPECT_EQ(KvPageIo(ops, kv).kv_bytes(), 16 * kv_token + entry_page);
  c.layer_entry_width = {0, 24};
  EXPECT_THROW(KvCache(ops, c), Error);
  c.layer_entry_width = {0, 0, 16};
  EXPECT_THROW(KvCache(ops, c), Error);
}

TEST(BlockTable, AdvanceReleasesSlidingWindowPagesBelowTheWindow) {
  PagePool full(16, 4), swa(5, 4);
  const KvPools pools(full, &swa, 8);  // a query at p sees p - 7 .. p
  BlockTable t;
  ASSERT_TRUE(t.advance(pools, 0, 16));  // a 16-token prefill: pages 0..3 in both pools
  EXPECT_EQ(t.pages().size(), 4u);
  EXPECT_EQ(t.swa_pages().size(), 4u);
  EXPECT_EQ(swa.n_free(), 1);
  // Decoding position 16 reads 9..16: page 0 (0..3) and page 1 (4..7) are below the window.
  ASSERT_TRUE(t.advance(pools, 16, 17));
  EXPECT_EQ(t.swa_pages()[0], -1);
  EXPECT_EQ(t.swa_pages()[1], -1);
  EXPECT_GE(t.swa_pages()[2], 0);
  EXPECT_EQ(t.pages().size(), 5u);
  EXPECT_EQ(swa.n_free(), 2);  // two released, one taken
  // However long the sequence grows, it holds at most ceil((8 - 1 + 1) / 4) + 1 sliding-window pages.
  for (int64_t p = 17; p < 64; ++p) {
    ASSERT_TRUE(t.advance(pools, p, p + 1)) << p;
    EXPECT_LE(swa.n_pages() - swa.n_free(), 3) << p;
  }
  EXPECT_EQ(full.n_free(), 0);
  EXPECT_FALSE(t.advance(pools, 64, 65));  // the full pool is out of pages: nothing taken
  EXPECT_EQ(t.swa_pages().size(), 16u);
  t.release(pools);
  EXPECT_EQ(full.n_free(), 16);
  EXPECT_EQ(swa.n_free(), 5);
  EXPECT_TRUE(t.swa_pages().empty());
}

TEST(KvCache, SlidingWindowLayersHaveTheirOwnSmallerPool) {
  CpuOps ops(1);
  KvCacheConfig c{4, 2, 16, 16, 256, DType::F32};
  c.layer_window = {8, 0, 8, 0};
  c.swa_token_budget = 40;  // 3 pages of 16
  KvCache kv(ops, c);
  EXPECT_EQ(kv.pool().n_pages(), 16);
  ASSERT_NE(kv.swa_pool(), nullptr);
  EXPECT_EQ(kv.swa_pool()->n_pages(), 3);
  EXPECT_EQ(kv.pools().window, 8);
  EXPECT_TRUE(kv.in_swa_pool(0));
  EXPECT_FALSE(kv.in_swa_pool(1));
  EXPECT_TRUE(kv.layer(2).k.has_shape({3, 16, 2, 16}));
  EXPECT_TRUE(kv.layer(3).k.has_shape({16, 16, 2, 16}));
  const int64_t page_layer = 16LL * 2 * 2 * 16 * 4;  // K and V of one page of one layer
  EXPECT_EQ(kv.bytes(), 2 * 16 * page_layer + 2 * 3 * page_layer);
  // Without a budget for it, every layer stays in the one pool.
  c.swa_token_budget = 0;
  KvCache one(ops, c);
  EXPECT_EQ(one.swa_pool(), nullptr);
  EXPECT_FALSE(one.in_swa_pool(0));
  EXPECT_EQ(one.bytes(), 4 * 16 * page_layer);
  c.layer_window = {8, 0};
  c.swa_token_budget = 40;
  EXPECT_THROW(KvCache(ops, c), Error);  // windows for 2 of 4 layers
}

}  // namespace
}  // namespace ft
