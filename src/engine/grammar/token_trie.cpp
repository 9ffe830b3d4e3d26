#include "engine/grammar/token_trie.h"

#include <algorithm>
#include <numeric>

#include "util/error.h"

namespace ft::grammar {

TokenTrie::TokenTrie(std::span<const std::string> pieces, std::span<const uint8_t> usable)
    : pieces_(pieces.begin(), pieces.end()), usable_(usable.begin(), usable.end()) {
  if (pieces.size() != usable.size())
    fail(ErrorCode::kInvalidArgument, "token trie: {} pieces but {} usable flags", pieces.size(), usable.size());
  std::vector<int32_t> order;
  for (size_t id = 0; id < pieces_.size(); ++id) {
    if (pieces_[id].empty()) usable_[id] = 0;
    if (!usable_[id]) continue;
    if (pieces_[id].size() > 65535) fail(ErrorCode::kInvalidArgument, "token {} is {} bytes long", id, pieces_[id].size());
    order.push_back(static_cast<int32_t>(id));
  }
  // std::string orders bytes as unsigned char, so equal prefixes are adjacent and a prefix comes
  // before its extensions: the trie is built in preorder in one pass.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return pieces_[a] < pieces_[b]; });
  std::vector<uint32_t> path;  // node index per depth - 1 along the current piece
  std::string_view prev;
  for (int32_t id : order) {
    std::string_view p = pieces_[id];
    size_t common = 0;
    while (common < std::min(p.size(), prev.size()) && common < path.size() && p[common] == prev[common]) ++common;
    while (path.size() > common) {
      nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
      path.pop_back();
    }
    for (size_t d = common; d < p.size(); ++d) {
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      uint32_t t = static_cast<uint32_t>(tokens_.size());
      nodes_.push_back({0, t, t, static_cast<uint16_t>(d + 1), static_cast<uint8_t>(p[d])});
    }
    Node& last = nodes_[path.back()];
    FT_CHECK(last.tok_end == tokens_.size());  // tokens of a node arrive together
    tokens_.push_back(id);
    last.tok_end = static_cast<uint32_t>(tokens_.size());
    max_depth_ = std::max(max_depth_, p.size());
    prev = p;
  }
  while (!path.empty()) {
    nodes_[path.back()].end = static_cast<uint32_t>(nodes_.size());
    path.pop_back();
  }
  bool single[256] = {};
  for (const Node& n : nodes_)
    if (n.depth == 1 && n.tok_end > n.tok_begin) single[n.byte] = true;
  all_single_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    bool in_utf8 = !(b == 0xC0 || b == 0xC1 || b >= 0xF5);
    if (in_utf8 && !single[b]) all_single_bytes_ = false;
  }
}

}  // namespace ft::grammar
