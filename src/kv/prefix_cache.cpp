#include "kv/prefix_cache.h"

#include <algorithm>
#include <string>

#include "util/error.h"

namespace ft {

namespace {

// 64-bit FNV-1a over the parent id and the token ids, then a final avalanche (splitmix64).
uint64_t mix(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t finish(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

PrefixCache::PrefixCache(PagePool& pool, PagePool* swa_pool, PagePool* state_pool)
    : pool_(&pool), swa_pool_(swa_pool), state_pool_(state_pool), page_size_(pool.page_size()) {
  if (swa_pool && swa_pool->page_size() != page_size_)
    fail(ErrorCode::kInternal, "prefix cache: sliding-window pages of {} tokens, pages of {}", swa_pool->page_size(),
         page_size_);
  nodes_.emplace_back();
  nodes_[0].live = true;
  nodes_[0].path_hash = kRootPathHash;
  page_owner_.assign(static_cast<size_t>(pool.n_pages()), -1);
  swa_owner_.assign(swa_pool ? static_cast<size_t>(swa_pool->n_pages()) : 0, -1);
}

uint64_t PrefixCache::key_of(NodeId parent, std::span<const int32_t> tokens) const {
  uint64_t h = mix(0xcbf29ce484222325ull, static_cast<uint64_t>(static_cast<uint32_t>(parent)));
  for (int32_t t : tokens) h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(t)));
  return finish(h);
}

PrefixCache::NodeId PrefixCache::find_child(NodeId parent, std::span<const int32_t> tokens, uint64_t key) const {
  auto [lo, hi] = index_.equal_range(key);
  for (auto it = lo; it != hi; ++it) {
    const Node& n = nodes_[static_cast<size_t>(it->second)];
    if (n.parent == parent && std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin(), tokens.end()))
      return it->second;
  }
  return -1;
}

PrefixCache::NodeId PrefixCache::new_node() {
  if (!free_ids_.empty()) {
    NodeId id = free_ids_.back();
    free_ids_.pop_back();
    return id;
  }
  nodes_.emplace_back();
  return static_cast<NodeId>(nodes_.size() - 1);
}

void PrefixCache::lru_insert_if_evictable(NodeId id) {
  const Node& n = nodes_[static_cast<size_t>(id)];
  if (id != kRoot && n.live && n.ref == 0 && n.n_children == 0) lru_.emplace(n.last_used, id);
}

void PrefixCache::lru_erase(NodeId id) { lru_.erase({nodes_[static_cast<size_t>(id)].last_used, id}); }

void PrefixCache::add_ref(NodeId id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  if (n.ref == 0) {
    lru_erase(id);
    ++n_referenced_;
  }
  ++n.ref;
  n.last_used = ++clock_;
}

PrefixCache::Match PrefixCache::acquire(std::span<const int32_t> tokens, int64_t max_tokens) {
  Match m;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  NodeId parent = kRoot;
  for (int64_t start = 0; start + page_size_ <= limit; start += page_size_) {
    auto page_tokens = tokens.subspan(static_cast<size_t>(start), static_cast<size_t>(page_size_));
    NodeId child = find_child(parent, page_tokens, key_of(parent, page_tokens));
    if (child < 0) break;
    add_ref(child);
    m.nodes.push_back(child);
    m.pages.push_back(nodes_[static_cast<size_t>(child)].page);
    m.swa_pages.push_back(nodes_[static_cast<size_t>(child)].swa_page);
    parent = child;
  }
  m.n_tokens = static_cast<int64_t>(m.nodes.size()) * page_size_;
  return m;
}

PrefixCache::Peek PrefixCache::peek(std::span<const int32_t> tokens, int64_t max_tokens) const {
  Peek p;
  const int64_t limit = std::min<int64_t>(max_tokens, static_cast<int64_t>(tokens.size()));
  for (; p.n_tokens + page_size_ <= limit; p.n_tokens += page_size_) {
    auto page_tokens = tokens.subspan(static_cast<size_t>(p.n_tokens), static_cast<size_t>(page_size_));
    const NodeId child = find_child(p.node, page_tokens, key_of(p.node, page_tokens));
    if (child < 0) break;
    p.node = child;
  }
  return p;
}

PrefixCache::Inserted PrefixCache::insert(NodeId parent, std::span<const int32_t> page_tokens, int32_t page,
                                          int32_t swa_page) {
  if (static_cast<int32_t>(page_tokens.size()) != page_size_)
    fail(ErrorCode::kInternal, "prefix cache: insert of {} tokens, pages hold {}", page_tokens.size(), page_size_);
  if (parent < 0 || parent >= static_cast<NodeId>(nodes_.size()) || !nodes_[static_cast<size_t>(parent)].live)
    fail(ErrorCode::kInternal, "prefix cache: insert under dead node {}", parent);
  if (parent != kRoot && nodes_[static_cast<size_t>(parent)].ref == 0)
    fail(ErrorCode::kInternal, "prefix cache: insert under node {} the caller does not reference", parent);
  if (page < 0 || page >= static_cast<int32_t>(page_owner_.size()))
    fail(ErrorCode::kInternal, "prefix cache: page {} out of range", page);
  if (swa_page >= 0 && (swa_page >= static_cast<int32_t>(swa_owner_.size()) || swa_owner_[static_cast<size_t>(swa_page)] >= 0))
    fail(ErrorCode::kInternal, "prefix cache: swa page {} out of range or already held", swa_page);

  const uint64_t key = key_of(parent, page_tokens);
  if (NodeId existing = find_child(parent, page_tokens, key); existing >= 0) {
    add_ref(existing);
    Inserted r{existing, nodes_[static_cast<size_t>(existing)].page, false};
    if (swa_page >= 0) {
      if (nodes_[static_cast<size_t>(existing)].swa_page < 0) {
        adopt_swa(existing, swa_page);
        r.swa_adopted = true;
      } else {
        use_swa(existing);
      }
      r.swa_page = nodes_[static_cast<size_t>(existing)].swa_page;
    }
    return r;
  }
  if (page_owner_[static_cast<size_t>(page)] >= 0)
    fail(ErrorCode::kInternal, "prefix cache: page {} is already held by node {}", page,
         page_owner_[static_cast<size_t>(page)]);

  const NodeId id = new_node();
  Node& n = nodes_[static_cast<size_t>(id)];
  n = Node{};
  n.live = true;
  n.parent = parent;
  n.page = page;
  n.hash = key;
  n.path_hash = chain_hash(nodes_[static_cast<size_t>(parent)].path_hash, page_tokens);
  n.tokens.assign(page_tokens.begin(), page_tokens.end());
  index_.emplace(key, id);
  page_owner_[static_cast<size_t>(page)] = id;
  ++n_nodes_;

  Node& p = nodes_[static_cast<size_t>(parent)];
  if (p.n_children == 0) lru_erase(parent);  // no longer a leaf
  ++p.n_children;

  add_ref(id);  // ref 0 -> 1: never entered the LRU set, erase is a no-op
  Inserted r{id, page, true};
  if (swa_page >= 0) {
    adopt_swa(id, swa_page);
    r.swa_page = swa_page;
    r.swa_adopted = true;
  }
  return r;
}

void PrefixCache::adopt_swa(NodeId id, int32_t swa_page) {
  Node& n = nodes_[static_cast<size_t>(id)];
  n.swa_page = swa_page;
  n.swa_ref = 1;
  swa_owner_[static_cast<size_t>(swa_page)] = id;
  ++n_swa_pages_;
}

const PrefixCache::Node& PrefixCache::live_node(NodeId node) const {
  if (node <= kRoot || node >= static_cast<NodeId>(nodes_.size()) || !nodes_[static_cast<size_t>(node)].live)
    fail(ErrorCode::kInternal, "prefix cache: node {} is not live", node);
  return nodes_[static_cast<size_t>(node)];
}

void PrefixCache::use_swa(NodeId node) {
  const Node& c = live_node(node);
  if (c.swa_page < 0 || c.swa_ref >= c.ref)
    fail(ErrorCode::kInternal, "prefix cache: swa reference on node {} (swa page {}, ref {}, swa_ref {})", node,
         c.swa_page, c.ref, c.swa_ref);
  Node& n = nodes_[static_cast<size_t>(node)];
  if (n.swa_ref++ == 0) swa_lru_.erase({n.swa_used, node});
}

void PrefixCache::release_swa(NodeId node, SwaRelease why) {
  const Node& c = live_node(node);
  if (c.swa_ref <= 0) fail(ErrorCode::kInternal, "prefix cache: swa release of node {} without swa references", node);
  Node& n = nodes_[static_cast<size_t>(node)];
  if (--n.swa_ref == 0) {
    n.swa_used = (why == SwaRelease::kSequenceEnded ? uint64_t{1} << 63 : 0) | ++clock_;
    swa_lru_.emplace(n.swa_used, node);
  }
}

void PrefixCache::keep_swa(NodeId node) {
  const Node& c = live_node(node);
  if (c.swa_page < 0 || c.swa_ref > 0) return;
  Node& n = nodes_[static_cast<size_t>(node)];
  swa_lru_.erase({n.swa_used, node});
  n.swa_used = (uint64_t{1} << 63) | ++clock_;
  swa_lru_.emplace(n.swa_used, node);
}

int32_t PrefixCache::evict_swa(int32_t n) {
  std::vector<int32_t> pages;
  while (static_cast<int32_t>(pages.size()) < n && !swa_lru_.empty()) {
    const NodeId id = swa_lru_.begin()->second;
    swa_lru_.erase(swa_lru_.begin());
    Node& node = nodes_[static_cast<size_t>(id)];
    pages.push_back(node.swa_page);
    swa_owner_[static_cast<size_t>(node.swa_page)] = -1;
    node.swa_page = -1;
    --n_swa_pages_;
  }
  if (!pages.empty()) swa_pool_->release(pages);
  return static_cast<int32_t>(pages.size());
}

int32_t PrefixCache::node_swa_page(NodeId node) const { return live_node(node).swa_page; }

int32_t PrefixCache::node_swa_ref(NodeId node) const { return live_node(node).swa_ref; }

void PrefixCache::release(std::span<const NodeId> nodes) {
  const uint64_t now = ++clock_;
  for (NodeId id : nodes) {
    if (id <= kRoot || id >= static_cast<NodeId>(nodes_.size()) || !nodes_[static_cast<size_t>(id)].live)
      fail(ErrorCode::kInternal, "prefix cache: release of dead node {}", id);
    Node& n = nodes_[static_cast<size_t>(id)];
    if (n.ref <= n.swa_ref)
      fail(ErrorCode::kInternal, "prefix cache: release of node {} with ref {} and {} swa references", id, n.ref,
           n.swa_ref);
    --n.ref;
    n.last_used = now;
    if (n.ref == 0) {
      --n_referenced_;
      lru_insert_if_evictable(id);
    }
  }
}

bool PrefixCache::attach_state(NodeId node, int32_t slot) {
  live_node(node);  // throws for a dead node
  Node& n = nodes_[static_cast<size_t>(node)];
  if (n.ref < 1) fail(ErrorCode::kInternal, "prefix cache: state snapshot for node {}, which nobody references", node);
  if (!state_pool_ || slot < 0 || slot >= state_pool_->n_pages())
    fail(ErrorCode::kInternal, "prefix cache: state snapshot slot {} is out of range", slot);
  if (n.state_slot >= 0) return false;
  for (const Node& o : nodes_)
    if (o.live && o.state_slot == slot) fail(ErrorCode::kInternal, "prefix cache: state slot {} is held twice", slot);
  n.state_slot = slot;
  ++n_states_;
  return true;
}

int32_t PrefixCache::node_state(NodeId node) const { return live_node(node).state_slot; }

int32_t PrefixCache::evict_states(int32_t n) {
  std::vector<std::pair<uint64_t, NodeId>> held;  // (last use, node) of unreferenced snapshot holders
  for (size_t i = 1; i < nodes_.size(); ++i)
    if (nodes_[i].live && nodes_[i].ref == 0 && nodes_[i].state_slot >= 0)
      held.emplace_back(nodes_[i].last_used, static_cast<NodeId>(i));
  std::sort(held.begin(), held.end());
  int32_t freed = 0;
  for (const auto& [used, id] : held) {
    if (freed >= n) break;
    Node& node = nodes_[static_cast<size_t>(id)];
    state_pool_->release({node.state_slot});
    node.state_slot = -1;
    --n_states_;
    ++freed;
  }
  return freed;
}

int32_t PrefixCache::evict(int32_t n) {
  int32_t freed = 0;
  std::vector<int32_t> pages, swa_pages;
  while (freed < n && !lru_.empty()) {
    const NodeId id = lru_.begin()->second;
    lru_.erase(lru_.begin());
    Node& node = nodes_[static_cast<size_t>(id)];
    if (evict_hook_) {
      const std::vector<int32_t> path = path_tokens(id);
      evict_hook_(Evicted{id, path, node.path_hash, node.page, node.swa_page, node.state_slot});
    }
    auto [lo, hi] = index_.equal_range(node.hash);
    for (auto it = lo; it != hi; ++it) {
      if (it->second == id) {
        index_.erase(it);
        break;
      }
    }
    pages.push_back(node.page);
    page_owner_[static_cast<size_t>(node.page)] = -1;
    if (node.swa_page >= 0) {  // swa_ref is 0: ref is
      swa_lru_.erase({node.swa_used, id});
      swa_pages.push_back(node.swa_page);
      swa_owner_[static_cast<size_t>(node.swa_page)] = -1;
      --n_swa_pages_;
    }
    if (node.state_slot >= 0) {
      state_pool_->release({node.state_slot});
      --n_states_;
    }
    const NodeId parent = node.parent;
    node = Node{};
    free_ids_.push_back(id);
    --n_nodes_;
    ++freed;
    Node& p = nodes_[static_cast<size_t>(parent)];
    --p.n_children;
    lru_insert_if_evictable(parent);
  }
  pool_->release(pages);
  if (!swa_pages.empty()) swa_pool_->release(swa_pages);
  return freed;
}

bool PrefixCache::holds_page(int32_t page) const {
  return page >= 0 && page < static_cast<int32_t>(page_owner_.size()) && page_owner_[static_cast<size_t>(page)] >= 0;
}

uint64_t PrefixCache::path_hash_of(NodeId node) const {
  return node == kRoot ? kRootPathHash : live_node(node).path_hash;
}

std::vector<int32_t> PrefixCache::path_tokens(NodeId node) const {
  std::vector<NodeId> chain;
  for (NodeId id = node; id != kRoot; id = live_node(id).parent) chain.push_back(id);
  std::vector<int32_t> out;
  out.reserve(chain.size() * static_cast<size_t>(page_size_));
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const std::vector<int32_t>& t = nodes_[static_cast<size_t>(*it)].tokens;
    out.insert(out.end(), t.begin(), t.end());
  }
  return out;
}

int32_t PrefixCache::node_page(NodeId node) const { return live_node(node).page; }

int32_t PrefixCache::node_ref(NodeId node) const { return live_node(node).ref; }

void PrefixCache::check_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "prefix cache integrity: {}", what); };
  std::vector<int32_t> children(nodes_.size(), 0);
  int32_t live = 0, referenced = 0, swa_held = 0;
  size_t evictable = 0;
  for (size_t i = 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.live) continue;
    const NodeId id = static_cast<NodeId>(i);
    ++live;
    if (n.ref < 0) bad(fmt::format("node {} has ref {}", id, n.ref));
    if (n.ref > 0) ++referenced;
    if (static_cast<int32_t>(n.tokens.size()) != page_size_) bad(fmt::format("node {} holds {} tokens", id, n.tokens.size()));
    if (n.parent < 0 || n.parent >= static_cast<NodeId>(nodes_.size()) || !nodes_[static_cast<size_t>(n.parent)].live)
      bad(fmt::format("node {} has dead parent {}", id, n.parent));
    ++children[static_cast<size_t>(n.parent)];
    const Node& p = nodes_[static_cast<size_t>(n.parent)];
    if (n.parent != kRoot && p.ref < n.ref) bad(fmt::format("node {} ref {} > parent {} ref {}", id, n.ref, n.parent, p.ref));
    if (n.page < 0 || n.page >= static_cast<int32_t>(page_owner_.size()) || page_owner_[static_cast<size_t>(n.page)] != id)
      bad(fmt::format("node {} page {} is not recorded as its own", id, n.page));
    if (n.hash != key_of(n.parent, n.tokens)) bad(fmt::format("node {} hash does not match its tokens", id));
    if (n.path_hash != chain_hash(p.path_hash, n.tokens)) bad(fmt::format("node {} path hash does not match its path", id));
    if (find_child(n.parent, n.tokens, n.hash) != id) bad(fmt::format("node {} not found by its tokens (or a sibling is equal)", id));
    if (n.swa_ref < 0 || n.swa_ref > n.ref || (n.swa_ref > 0 && n.swa_page < 0))
      bad(fmt::format("node {} has swa_ref {} (ref {}, swa page {})", id, n.swa_ref, n.ref, n.swa_page));
    if (n.swa_page >= 0) {
      ++swa_held;
      if (n.swa_page >= static_cast<int32_t>(swa_owner_.size()) || swa_owner_[static_cast<size_t>(n.swa_page)] != id)
        bad(fmt::format("node {} swa page {} is not recorded as its own", id, n.swa_page));
      if ((n.swa_ref == 0) != (swa_lru_.count({n.swa_used, id}) > 0))
        bad(fmt::format("node {} (swa_ref {}) is {} the swa LRU set", id, n.swa_ref, n.swa_ref == 0 ? "missing from" : "in"));
    }
    const bool in_lru = lru_.count({n.last_used, id}) > 0;
    if (n.ref == 0 && n.n_children == 0) {
      ++evictable;
      if (!in_lru) bad(fmt::format("evictable leaf {} missing from the LRU set", id));
    } else if (in_lru) {
      bad(fmt::format("node {} (ref {}, {} children) is in the LRU set", id, n.ref, n.n_children));
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].live && nodes_[i].n_children != children[i])
      bad(fmt::format("node {} counts {} children, has {}", i, nodes_[i].n_children, children[i]));
  if (evictable != lru_.size()) bad(fmt::format("LRU set has {} entries, {} evictable leaves", lru_.size(), evictable));
  if (live != n_nodes_) bad(fmt::format("{} live nodes, counter says {}", live, n_nodes_));
  if (referenced != n_referenced_) bad(fmt::format("{} referenced nodes, counter says {}", referenced, n_referenced_));
  if (index_.size() != static_cast<size_t>(live)) bad(fmt::format("index has {} entries for {} nodes", index_.size(), live));
  int32_t owned = 0;
  for (size_t p = 0; p < page_owner_.size(); ++p) {
    const NodeId o = page_owner_[p];
    if (o < 0) continue;
    ++owned;
    if (o >= static_cast<NodeId>(nodes_.size()) || !nodes_[static_cast<size_t>(o)].live ||
        nodes_[static_cast<size_t>(o)].page != static_cast<int32_t>(p))
      bad(fmt::format("page {} recorded for node {} which does not hold it", p, o));
  }
  if (owned != live) bad(fmt::format("{} pages recorded for {} nodes", owned, live));
  std::set<int32_t> slots;
  for (const Node& n : nodes_)
    if (n.live && n.state_slot >= 0 &&
        (!state_pool_ || n.state_slot >= state_pool_->n_pages() || !slots.insert(n.state_slot).second))
      bad(fmt::format("state snapshot slot {} is out of range or held twice", n.state_slot));
  if (static_cast<int32_t>(slots.size()) != n_states_)
    bad(fmt::format("{} state snapshots held, counter says {}", slots.size(), n_states_));
  int32_t swa_owned = 0;
  for (NodeId o : swa_owner_) swa_owned += o >= 0;
  for (const auto& [used, id] : swa_lru_) {
    const Node& n = nodes_[static_cast<size_t>(id)];
    if (!n.live || n.swa_page < 0 || n.swa_ref != 0 || n.swa_used != used) bad(fmt::format("swa LRU entry {} is stale", id));
  }
  if (swa_owned != swa_held || swa_held != n_swa_pages_)
    bad(fmt::format("{} swa pages recorded, {} held by nodes, counter says {}", swa_owned, swa_held, n_swa_pages_));
}

}  // namespace ft
