#pragma once
// PrefixCache: a radix tree over page-aligned token prefixes, so a request whose prompt starts with
// tokens another request already computed reuses that KV instead of prefilling it again (the idea of
// SGLang's RadixAttention, at page granularity as in vLLM's automatic prefix caching).
//
// Each node below the root stands for one full KV page: the `page_size` tokens at positions
// [depth * page_size, (depth + 1) * page_size) of every prompt whose path from the root passes through
// it. The tree owns the pages of its nodes (taken from a PagePool by a sequence and handed over with
// insert()); a sequence using a node holds a reference on it and on every ancestor.
//
// Invariants (check_integrity() verifies all of them):
//  - every node except the root holds exactly page_size tokens and one page, and no page is held twice;
//  - a child is found through the index by (parent, hash of its tokens) and confirmed by comparing the
//    tokens, never by the hash alone; siblings never hold equal tokens;
//  - ref(parent) >= ref(child), because a reference is always taken on a whole root path;
//  - the LRU set holds exactly the nodes with ref == 0 and no children (the evictable leaves), keyed by
//    their last-use tick; the counters (pages, referenced nodes) match a full recount.
//
// Sliding-window layers (a second pool, KvPools::swa): a node may also hold the page of the same
// tokens in those layers' KV (its swa page). A sequence needs the swa pages of only the nodes inside
// its window, so those pages are referenced separately (swa_ref) and, once no sequence's window
// covers them, may be evicted alone (evict_swa) while the node stays for the full-attention layers.
// A hit is usable only where the swa pages of the window before its end are all present (the
// scheduler shortens it otherwise). More invariants: swa_ref <= ref; a node with swa_ref > 0 holds
// a swa page; the swa LRU set holds exactly the nodes with a swa page and swa_ref == 0.
//
// Recurrent layers (linear attention, a pool of state slots): a hit must restore the recurrent state
// the matched tokens left behind, which their pages do not hold. A node may hold a state snapshot (a
// slot of the state pool with the state after its last token, attach_state); only a path ending at
// such a node is a usable hit (the scheduler shortens the match). Snapshots of nodes nobody
// references can be dropped alone (evict_states) when the pool needs slots; evicting a node frees its
// snapshot. More invariants: snapshot slots are unique and recorded as their node's.
//
// Lower tiers (kv/page_store.h): every node also knows its path hash (chain_hash over the pages from
// the root), the key of its page in a host or disk tier. evict() calls the eviction hook for each
// node it removes while its pages still hold their contents, so a tier can keep a copy.
// Not thread-safe: the engine thread that runs the scheduler owns it.
#include <cstdint>
#include <functional>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/page_pool.h"
#include "kv/page_store.h"

namespace ft {

class PrefixCache {
 public:
  using NodeId = int32_t;
  static constexpr NodeId kRoot = 0;

  /** Pages freed by evict() go back to `pool`, swa pages to `swa_pool` (nullptr: the model has no
   *  sliding-window layers) and snapshot slots to `state_pool` (nullptr: no recurrent layers); all
   *  must outlive the cache. */
  explicit PrefixCache(PagePool& pool, PagePool* swa_pool = nullptr, PagePool* state_pool = nullptr);
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  int32_t page_size() const { return page_size_; }

  /** The longest cached path for a prompt: node ids and their pages, root excluded, in position order. */
  struct Match {
    std::vector<NodeId> nodes;
    std::vector<int32_t> pages;
    std::vector<int32_t> swa_pages;  // each node's swa page, -1 where it has none (no swa reference taken)
    int64_t n_tokens = 0;  // nodes.size() * page_size
  };

  /** Walks from the root along the whole pages of tokens[0, min(max_tokens, tokens.size())) that are
   *  cached and takes a reference on every node of the path (release() gives them back). */
  Match acquire(std::span<const int32_t> tokens, int64_t max_tokens);
  /** The deepest node acquire() would reach (kRoot: none) and the tokens it covers, without taking a
   *  reference or marking anything used. */
  struct Peek {
    NodeId node = kRoot;
    int64_t n_tokens = 0;
  };
  Peek peek(std::span<const int32_t> tokens, int64_t max_tokens) const;

  /** Result of insert(): the node now caching the page's tokens and the page holding their KV. */
  struct Inserted {
    NodeId node = kRoot;
    int32_t page = -1;
    bool adopted = false;  // true: the caller's page now belongs to the cache; false: an equal node existed
    /** The node's swa page when the caller offered one (and now holds a swa reference on it), else -1. */
    int32_t swa_page = -1;
    bool swa_adopted = false;  // true: the caller's swa page now belongs to the node; false: free it
  };

  /** Offers `page` (KV of `page_tokens`, exactly page_size tokens) as the child of `parent` (kRoot for
   *  the first page; the caller must hold a reference on `parent`). When a child with equal tokens
   *  exists it is returned and the caller keeps `page` (free it and use the node's page instead);
   *  otherwise a new node adopts `page`. Either way the caller gets a reference on the returned node.
   *  Throws ft::Error(kInternal) for a wrong token count, a dead parent or a page the cache holds. */
  Inserted insert(NodeId parent, std::span<const int32_t> page_tokens, int32_t page, int32_t swa_page = -1);

  /** Takes a swa reference on a node the caller references and whose swa page it will read. Throws
   *  kInternal when the node has no swa page or the caller holds no reference. */
  void use_swa(NodeId node);
  /** Why a swa reference is dropped: the sequence's window moved past the node (a hit ending there
   *  is less likely: such pages are evicted first), or the sequence ended (the window at the end of
   *  a cached conversation, where the next turn's hit ends). */
  enum class SwaRelease : uint8_t { kWindowMoved, kSequenceEnded };
  /** Drops one swa reference. Throws kInternal for a node without swa references. */
  void release_swa(NodeId node, SwaRelease why);
  /** Moves an unreferenced swa page of `node` (if it has one) to the kSequenceEnded tier, as if
   *  released now at a sequence's end: an ending sequence keeps the window before its last cached
   *  page, which its window may have passed already. Throws kInternal for a dead node. */
  void keep_swa(NodeId node);
  /** Frees up to `n` swa pages of nodes without swa references back to the swa pool, those released
   *  as a window moved before those released at a sequence's end, least recently used first within
   *  each; the nodes stay. Returns the number freed. */
  int32_t evict_swa(int32_t n);
  /** Swa pages held by nodes, and those of them no sequence's window covers (all evictable). */
  int32_t n_swa_pages() const { return n_swa_pages_; }
  int32_t n_swa_unreferenced() const { return static_cast<int32_t>(swa_lru_.size()); }
  /** The swa page of a live node (-1: none). Throws kInternal for a dead node. */
  int32_t node_swa_page(NodeId node) const;
  int32_t node_swa_ref(NodeId node) const;

  /** Gives a node the caller references the state snapshot in `slot` (taken from the state pool: the
   *  recurrent state after the node's last token). Returns false, taking nothing, when the node has
   *  one already (the caller frees `slot`). Throws kInternal for a dead or unreferenced node, or a
   *  slot out of range or held by another node. */
  bool attach_state(NodeId node, int32_t slot);
  /** The snapshot slot of a live node (-1: none). Throws kInternal for a dead node. */
  int32_t node_state(NodeId node) const;
  /** Frees up to `n` snapshot slots of nodes nobody references back to the state pool, least recently
   *  used first; the nodes stay. Returns the number freed. */
  int32_t evict_states(int32_t n);
  /** Snapshot slots held by nodes. */
  int32_t n_states() const { return n_states_; }

  /** Drops one reference from each node (the nodes a sequence acquired or inserted) and marks them used
   *  now, for LRU order. Throws ft::Error(kInternal) for a node without references. */
  void release(std::span<const NodeId> nodes);

  /** Frees up to `n` pages back to the pool by removing unreferenced leaves, least recently used
   *  first (a parent becomes a leaf once its children are gone), with their swa pages. Returns the
   *  number of (full) pages freed. */
  int32_t evict(int32_t n);

  /** A node evict() is about to remove: its whole token path (root to its last token), path hash and
   *  the pages it holds (swa page and snapshot slot -1 where it has none). */
  struct Evicted {
    NodeId node = kRoot;
    std::span<const int32_t> path;
    uint64_t path_hash = 0;
    int32_t page = -1, swa_page = -1, state_slot = -1;
  };
  /** Called by evict() for each node before its pages go back to the pools (nullptr: none). The hook
   *  must not call back into the cache. */
  void set_evict_hook(std::function<void(const Evicted&)> hook) { evict_hook_ = std::move(hook); }
  /** The path hash of a node (kRootPathHash for kRoot). Throws kInternal for a dead node. */
  uint64_t path_hash_of(NodeId node) const;
  /** Every token from the root through a live node's page (empty for kRoot). */
  std::vector<int32_t> path_tokens(NodeId node) const;

  /** Pages held by the tree. */
  int32_t n_pages() const { return n_nodes_; }
  /** Pages held by nodes nobody references (all of them can be evicted, leaves first). */
  int32_t n_unreferenced() const { return n_nodes_ - n_referenced_; }
  /** True when `page` is held by a node of the tree. */
  bool holds_page(int32_t page) const;
  /** The page of a live node (for callers checking their own bookkeeping). Throws kInternal otherwise. */
  int32_t node_page(NodeId node) const;
  /** References held on a live node. Throws kInternal otherwise. */
  int32_t node_ref(NodeId node) const;

  /** Verifies every invariant in the header comment; throws ft::Error(kInternal) describing the first
   *  violation. O(nodes * page_size). */
  void check_integrity() const;

 private:
  struct Node {
    bool live = false;
    NodeId parent = -1;
    int32_t page = -1;
    int32_t ref = 0;
    int32_t n_children = 0;
    uint64_t last_used = 0;
    uint64_t hash = 0;  // of (parent, tokens)
    uint64_t path_hash = 0;  // chain_hash(parent's path_hash, tokens): the key in a lower tier
    int32_t swa_page = -1;
    int32_t swa_ref = 0;
    uint64_t swa_used = 0;  // key of the swa LRU entry: (1 << 63 for kSequenceEnded) | release tick
    int32_t state_slot = -1;  // recurrent-state snapshot after the node's last token (-1: none)
    std::vector<int32_t> tokens;  // [page_size]
  };

  uint64_t key_of(NodeId parent, std::span<const int32_t> tokens) const;
  NodeId find_child(NodeId parent, std::span<const int32_t> tokens, uint64_t key) const;
  NodeId new_node();
  void add_ref(NodeId id);
  void lru_insert_if_evictable(NodeId id);
  void lru_erase(NodeId id);
  const Node& live_node(NodeId node) const;
  void adopt_swa(NodeId id, int32_t swa_page);

  std::function<void(const Evicted&)> evict_hook_;
  PagePool* pool_;
  PagePool* swa_pool_;
  PagePool* state_pool_;
  int32_t n_states_ = 0;
  int32_t page_size_;
  std::vector<Node> nodes_;          // nodes_[0] is the root
  std::vector<NodeId> free_ids_;     // dead node slots for reuse
  std::unordered_multimap<uint64_t, NodeId> index_;  // key_of(parent, tokens) -> node
  std::set<std::pair<uint64_t, NodeId>> lru_;         // evictable leaves by (last_used, id)
  std::vector<NodeId> page_owner_;   // [pool pages] node holding each page, -1 if none
  std::set<std::pair<uint64_t, NodeId>> swa_lru_;     // nodes with a swa page and swa_ref 0
  std::vector<NodeId> swa_owner_;    // [swa pool pages] node holding each swa page, -1 if none
  int32_t n_swa_pages_ = 0;
  uint64_t clock_ = 0;
  int32_t n_nodes_ = 0;        // live nodes below the root
  int32_t n_referenced_ = 0;   // live nodes with ref > 0
};

}  // namespace ft
