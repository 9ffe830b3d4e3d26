// PrefixCache: matching whole pages by tokens, references, LRU eviction of unreferenced leaves, and
// check_integrity() after every operation of a randomised run.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "kv/prefix_cache.h"
#include "util/error.h"

namespace ft {
namespace {

std::vector<int32_t> seq(int32_t start, int32_t n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

// Inserts every whole page of `tokens` the way a sequence would (allocating a page per new node) and
// returns the nodes (referenced once).
std::vector<PrefixCache::NodeId> insert_all(PrefixCache& c, PagePool& pool, const std::vector<int32_t>& tokens) {
  std::vector<PrefixCache::NodeId> nodes;
  const int32_t ps = c.page_size();
  for (size_t j = 0; (j + 1) * ps <= tokens.size(); ++j) {
    std::vector<int32_t> page;
    EXPECT_TRUE(pool.allocate(1, page));
    auto r = c.insert(nodes.empty() ? PrefixCache::kRoot : nodes.back(),
                      std::span<const int32_t>(tokens).subspan(j * ps, static_cast<size_t>(ps)), page[0]);
    if (!r.adopted) pool.release(page);
    nodes.push_back(r.node);
  }
  return nodes;
}

TEST(PrefixCache, MatchesWholePagesOnlyAndUpToMaxTokens) {
  PagePool pool(16, 4);
  PrefixCache c(pool);
  auto a = seq(100, 10);  // pages [100..103] [104..107], 2 tokens left over
  auto nodes = insert_all(c, pool, a);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(c.n_pages(), 2);
  EXPECT_EQ(pool.n_free(), 14);
  c.check_integrity();

  auto m = c.acquire(a, 100);
  EXPECT_EQ(m.n_tokens, 8);
  EXPECT_EQ(m.nodes, nodes);
  c.release(m.nodes);
  m = c.acquire(a, 7);  // only one whole page below 7 tokens
  EXPECT_EQ(m.n_tokens, 4);
  c.release(m.nodes);

  auto b = a;
  b[5] = 999;  // differs in the second page
  m = c.acquire(b, 100);
  EXPECT_EQ(m.n_tokens, 4);
  EXPECT_EQ(m.pages[0], c.node_page(nodes[0]));
  c.release(m.nodes);

  auto d = seq(100, 3);  // shorter than one page
  EXPECT_EQ(c.acquire(d, 100).n_tokens, 0);
  c.release(nodes);
  c.check_integrity();
}

TEST(PrefixCache, DuplicateInsertReturnsExistingNodeAndCallerKeepsPage) {
  PagePool pool(8, 2);
  PrefixCache c(pool);
  auto a = insert_all(c, pool, {1, 2, 3, 4});
  std::vector<int32_t> p;
  ASSERT_TRUE(pool.allocate(1, p));
  auto r = c.insert(PrefixCache::kRoot, std::vector<int32_t>{1, 2}, p[0]);
  EXPECT_FALSE(r.adopted);
  EXPECT_EQ(r.node, a[0]);
  EXPECT_NE(r.page, p[0]);
  EXPECT_EQ(c.node_ref(a[0]), 2);
  EXPECT_FALSE(c.holds_page(p[0]));
  EXPECT_EQ(c.n_pages(), 2);
  pool.release(p);
  c.release(std::vector<PrefixCache::NodeId>{r.node});
  c.release(a);
  c.check_integrity();
  EXPECT_THROW(c.release(a), Error);  // no references left
  EXPECT_THROW(c.insert(PrefixCache::kRoot, std::vector<int32_t>{1}, 7), Error);  // not a whole page
}

TEST(PrefixCache, EvictsUnreferencedLeavesLeastRecentlyUsedFirst) {
  PagePool pool(6, 2);
  PrefixCache c(pool);
  auto x = insert_all(c, pool, {1, 1, 2, 2, 3, 3});  // chain of 3
  auto y = insert_all(c, pool, {1, 1, 5, 5});        // shares the first page: 1 new node
  EXPECT_EQ(c.n_pages(), 4);
  EXPECT_EQ(pool.n_free(), 2);
  EXPECT_EQ(c.evict(10), 0);  // everything referenced
  c.release(y);               // y's leaf [5,5] becomes evictable; [1,1] still held by x
  c.release(x);               // now all unreferenced; x's leaf was used last
  EXPECT_EQ(c.n_unreferenced(), 4);
  c.check_integrity();
  const int32_t y_leaf_page = c.node_page(y[1]);
  EXPECT_EQ(c.evict(1), 1);  // y's leaf: released first
  EXPECT_TRUE(!c.holds_page(y_leaf_page));
  c.check_integrity();
  // x's chain [1,1]->[2,2]->[3,3] is now evicted leaf first; the root page goes last.
  EXPECT_EQ(c.evict(2), 2);
  auto m = c.acquire(std::vector<int32_t>{1, 1, 2, 2, 3, 3}, 6);
  EXPECT_EQ(m.n_tokens, 2);
  c.release(m.nodes);
  EXPECT_EQ(c.evict(5), 1);
  EXPECT_EQ(c.n_pages(), 0);
  EXPECT_EQ(pool.n_free(), 6);
  c.check_integrity();
}

TEST(PrefixCache, StateSnapshotsAreHeldDroppedAndFreedWithTheirNodes) {
  PagePool pool(8, 2), states(3, 1);
  PrefixCache c(pool, nullptr, &states);
  const auto nodes = insert_all(c, pool, seq(0, 6));  // 3 nodes, referenced
  std::vector<int32_t> s;
  ASSERT_TRUE(states.allocate(2, s));
  EXPECT_TRUE(c.attach_state(nodes[1], s[0]));
  EXPECT_FALSE(c.attach_state(nodes[1], s[1]));  // has one: the caller keeps its slot
  EXPECT_TRUE(c.attach_state(nodes[2], s[1]));
  EXPECT_THROW(c.attach_state(nodes[0], s[1]), Error);  // a slot another node holds
  EXPECT_EQ(c.node_state(nodes[1]), s[0]);
  EXPECT_EQ(c.n_states(), 2);
  c.check_integrity();
  EXPECT_EQ(c.evict_states(2), 0);  // referenced: kept
  c.release(nodes);
  EXPECT_THROW(c.attach_state(nodes[0], 2), Error);  // nobody references it
  EXPECT_EQ(c.evict_states(1), 1);  // the least recently used snapshot holder first; the node stays
  EXPECT_EQ(c.n_states(), 1);
  EXPECT_EQ(c.n_pages(), 3);
  EXPECT_EQ(states.n_free(), 2);
  c.check_integrity();
  EXPECT_EQ(c.evict(3), 3);  // evicting the nodes frees the other snapshot
  EXPECT_EQ(c.n_states(), 0);
  EXPECT_EQ(states.n_free(), 3);
  c.check_integrity();
}

TEST(PrefixCache, RandomisedOperationsKeepInvariants) {
  std::mt19937 rng(1234);
  PagePool pool(40, 3);
  PrefixCache c(pool);
  std::vector<std::vector<int32_t>> bases;
  for (int i = 0; i < 4; ++i) {
    std::vector<int32_t> b(30);
    for (auto& t : b) t = static_cast<int32_t>(rng() % 5);  // small alphabet: many shared prefixes
    bases.push_back(b);
  }
  std::vector<std::vector<PrefixCache::NodeId>> held;  // reference sets of live "sequences"
  std::map<int32_t, std::vector<int32_t>> content;     // page -> tokens it caches (must never change)
  for (int it = 0; it < 3000; ++it) {
    const int op = static_cast<int>(rng() % 4);
    if (op == 0 && !held.empty()) {
      size_t i = rng() % held.size();
      c.release(held[i]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
    } else if (op == 1) {
      c.evict(static_cast<int32_t>(rng() % 4));
    } else {
      auto tokens = bases[rng() % bases.size()];
      tokens.resize(rng() % tokens.size());
      for (size_t k = tokens.size() / 2; k < tokens.size(); ++k)
        if (rng() % 8 == 0) tokens[k] = static_cast<int32_t>(rng() % 5);
      auto m = c.acquire(tokens, static_cast<int64_t>(tokens.size()));
      for (size_t j = 0; j < m.nodes.size(); ++j) {  // a hit returns pages holding exactly these tokens
        std::vector<int32_t> want(tokens.begin() + static_cast<std::ptrdiff_t>(j * 3),
                                  tokens.begin() + static_cast<std::ptrdiff_t>(j * 3 + 3));
        ASSERT_EQ(content.at(m.pages[j]), want);
      }
      std::vector<PrefixCache::NodeId> nodes = m.nodes;
      for (size_t j = nodes.size(); (j + 1) * 3 <= tokens.size(); ++j) {
        std::vector<int32_t> page;
        if (pool.n_free() == 0) c.evict(1);
        if (!pool.allocate(1, page)) break;
        std::vector<int32_t> pt(tokens.begin() + static_cast<std::ptrdiff_t>(j * 3),
                                tokens.begin() + static_cast<std::ptrdiff_t>(j * 3 + 3));
        auto r = c.insert(nodes.empty() ? PrefixCache::kRoot : nodes.back(), pt, page[0]);
        if (r.adopted) {
          content[page[0]] = pt;
        } else {
          pool.release(page);
        }
        nodes.push_back(r.node);
      }
      held.push_back(nodes);
    }
    c.check_integrity();
    for (auto it2 = content.begin(); it2 != content.end();)  // forget pages the cache gave back
      it2 = c.holds_page(it2->first) ? std::next(it2) : content.erase(it2);
    ASSERT_EQ(c.n_pages() + pool.n_free(), pool.n_pages());
  }
  for (auto& h : held) c.release(h);
  EXPECT_EQ(c.n_unreferenced(), c.n_pages());
  c.evict(1000);
  EXPECT_EQ(pool.n_free(), pool.n_pages());
  c.check_integrity();
}

TEST(PrefixCache, SlidingWindowPagesAreReferencedAndEvictedApartFromTheirNodes) {
  PagePool pool(8, 4), swa(4, 4);
  PrefixCache c(pool, &swa);
  std::vector<int32_t> p, q;
  ASSERT_TRUE(pool.allocate(2, p));
  ASSERT_TRUE(swa.allocate(2, q));
  const auto a = seq(0, 8);
  auto r0 = c.insert(PrefixCache::kRoot, std::span<const int32_t>(a).first(4), p[0], q[0]);
  ASSERT_TRUE(r0.adopted && r0.swa_adopted);
  EXPECT_EQ(r0.swa_page, q[0]);
  auto r1 = c.insert(r0.node, std::span<const int32_t>(a).subspan(4, 4), p[1], -1);  // its window moved on
  EXPECT_EQ(r1.swa_page, -1);
  EXPECT_EQ(c.n_swa_pages(), 1);
  EXPECT_EQ(c.node_swa_ref(r0.node), 1);
  c.check_integrity();
  // A second sequence offers the same second page with its swa page: the node adopts it.
  std::vector<int32_t> p2;
  ASSERT_TRUE(pool.allocate(1, p2));
  auto m = c.acquire(a, 4);
  ASSERT_EQ(m.swa_pages, std::vector<int32_t>{q[0]});
  auto r1b = c.insert(r0.node, std::span<const int32_t>(a).subspan(4, 4), p2[0], q[1]);
  EXPECT_FALSE(r1b.adopted);
  EXPECT_TRUE(r1b.swa_adopted);
  pool.release(p2);
  EXPECT_EQ(c.node_swa_page(r1.node), q[1]);
  c.check_integrity();
  // Referenced swa pages are not evicted; released ones are, and their nodes stay.
  EXPECT_EQ(c.evict_swa(4), 0);
  c.release_swa(r0.node, PrefixCache::SwaRelease::kWindowMoved);
  EXPECT_THROW(c.release_swa(r0.node, PrefixCache::SwaRelease::kWindowMoved), Error);
  EXPECT_EQ(c.n_swa_unreferenced(), 1);
  EXPECT_EQ(c.evict_swa(4), 1);
  EXPECT_EQ(c.node_swa_page(r0.node), -1);
  EXPECT_EQ(c.n_pages(), 2);
  EXPECT_EQ(swa.n_free(), 3);
  c.check_integrity();
  // A node cannot drop its last references while a swa reference remains on it.
  c.release(std::vector<PrefixCache::NodeId>{r1.node});
  EXPECT_THROW(c.release(std::vector<PrefixCache::NodeId>{r1b.node}), Error);
  c.release_swa(r1.node, PrefixCache::SwaRelease::kSequenceEnded);
  c.release(std::vector<PrefixCache::NodeId>{r1b.node});
  c.release(std::vector<PrefixCache::NodeId>{r0.node, m.nodes[0]});
  c.check_integrity();
  // Evicting the nodes frees their swa pages too.
  EXPECT_EQ(c.evict(8), 2);
  EXPECT_EQ(pool.n_free(), 8);
  EXPECT_EQ(swa.n_free(), 4);
  c.check_integrity();
}

}  // namespace
}  // namespace ft
