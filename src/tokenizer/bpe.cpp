#include "tokenizer/bpe.h"

#include <algorithm>

namespace ft {
namespace {

inline uint64_t pair_key(int32_t l, int32_t r) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(l)) << 32) | static_cast<uint32_t>(r);
}

inline size_t hash_key(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ull;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}

// Min-heap order on (rank, left position).
struct CandGreater {
  bool operator()(const BpeScratch::Cand& a, const BpeScratch::Cand& b) const {
    return a.rank != b.rank ? a.rank > b.rank : a.left > b.left;
  }
};

}  // namespace

const BpeMerges::Entry* BpeMerges::find(int32_t left, int32_t right) const {
  if (table_.empty() || left < 0 || right < 0) return nullptr;
  const uint64_t key = pair_key(left, right);
  const size_t mask = table_.size() - 1;
  for (size_t i = hash_key(key) & mask;; i = (i + 1) & mask) {
    const Entry& e = table_[i];
    if (e.key == key) return &e;
    if (e.key == kEmpty) return nullptr;
  }
}

void BpeMerges::grow() {
  std::vector<Entry> old;
  old.swap(table_);
  table_.assign(std::max<size_t>(64, old.size() * 2), Entry{kEmpty, 0, 0});
  count_ = 0;
  for (const Entry& e : old)
    if (e.key != kEmpty) add(static_cast<int32_t>(e.key >> 32), static_cast<int32_t>(e.key & 0xffffffffu), e.merged, e.rank);
}

void BpeMerges::add(int32_t left, int32_t right, int32_t merged, int32_t rank) {
  if ((count_ + 1) * 2 > table_.size()) grow();
  const uint64_t key = pair_key(left, right);
  const size_t mask = table_.size() - 1;
  for (size_t i = hash_key(key) & mask;; i = (i + 1) & mask) {
    Entry& e = table_[i];
    if (e.key == key) return;
    if (e.key == kEmpty) {
      e = Entry{key, rank, merged};
      ++count_;
      return;
    }
  }
}

void BpeMerges::merge(std::vector<int32_t>& ids, std::vector<uint32_t>& lens, BpeScratch& s) const {
  const int32_t n = static_cast<int32_t>(ids.size());
  if (n < 2) return;
  s.syms.resize(n);
  s.heap.clear();
  for (int32_t i = 0; i < n; ++i) s.syms[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, lens[i]};
  auto push = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const Entry* e = find(s.syms[l].id, s.syms[r].id);
    if (!e) return;
    s.heap.push_back({e->rank, l, s.syms[l].id, s.syms[r].id});
    std::push_heap(s.heap.begin(), s.heap.end(), CandGreater{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i, i + 1);
  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), CandGreater{});
    const BpeScratch::Cand c = s.heap.back();
    s.heap.pop_back();
    BpeScratch::Sym& L = s.syms[c.left];
    if (L.id != c.left_id || L.next < 0 || s.syms[L.next].id != c.right_id) continue;  // stale
    BpeScratch::Sym& R = s.syms[L.next];
    L.id = find(c.left_id, c.right_id)->merged;
    L.len += R.len;
    R.id = -2;
    L.next = R.next;
    if (R.next >= 0) s.syms[R.next].prev = c.left;
    push(L.prev, c.left);
    push(c.left, L.next);
  }
  ids.clear();
  lens.clear();
  for (int32_t i = 0; i >= 0; i = s.syms[i].next) {
    ids.push_back(s.syms[i].id);
    lens.push_back(s.syms[i].len);
  }
}

}  // namespace ft
