#include "tokenizer/spm.h"

#include <algorithm>
#include <queue>

#include "tokenizer/utf8.h"

namespace ft {
namespace {

struct Sym {
  size_t off, n;
  int32_t prev, next;
};

struct Bigram {
  int32_t left, right;
  float score;
  size_t size;
};

// Highest score first; on equal scores the leftmost pair.
struct BigramLess {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

constexpr std::string_view kMark = "\xE2\x96\x81";  // U+2581

void encode_segment(const TokenTable& table, std::string_view text, int32_t unk, std::vector<int32_t>& out);

}  // namespace

int32_t spm_byte_token(const TokenTable& table, uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  const char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
  int32_t id = table.find(std::string_view(buf, 6));
  if (id >= 0) return id;
  const char c = static_cast<char>(b);
  return table.find(std::string_view(&c, 1));
}

bool spm_can_split_words(const TokenTable& table) {
  for (const TokenData& t : table.tokens) {
    for (size_t pos = t.text.find(kMark, 1); pos != std::string::npos; pos = t.text.find(kMark, pos + 1)) {
      if (pos < kMark.size() || t.text.compare(pos - kMark.size(), kMark.size(), kMark) != 0) return false;
    }
  }
  return true;
}

void spm_encode(const TokenTable& table, std::string_view text, int32_t unk, bool split_words,
                std::vector<int32_t>& out) {
  if (!split_words) {
    encode_segment(table, text, unk, out);
    return;
  }
  size_t start = 0;
  for (size_t pos = text.find(kMark, 1); pos != std::string_view::npos; pos = text.find(kMark, pos + 1)) {
    if (pos >= kMark.size() && text.compare(pos - kMark.size(), kMark.size(), kMark) == 0) continue;  // a run
    encode_segment(table, text.substr(start, pos - start), unk, out);
    start = pos;
  }
  encode_segment(table, text.substr(start), unk, out);
}

namespace {

void encode_segment(const TokenTable& table, std::string_view text, int32_t unk, std::vector<int32_t>& out) {
  std::vector<Sym> syms;
  syms.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const auto idx = static_cast<int32_t>(syms.size());
    syms.push_back({off, n, idx - 1, off + n == text.size() ? -1 : idx + 1});
    off += n;
  }
  std::priority_queue<Bigram, std::vector<Bigram>, BigramLess> queue;
  auto try_add = [&](int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const std::string_view s = text.substr(syms[l].off, syms[l].n + syms[r].n);
    const int32_t id = table.find(s);
    if (id < 0) return;
    queue.push({l, r, table.tokens[id].score, s.size()});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(syms.size()); ++i) try_add(i - 1, i);
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Sym& L = syms[b.left];
    Sym& R = syms[b.right];
    if (L.n == 0 || R.n == 0 || L.n + R.n != b.size) continue;  // one side already merged
    L.n += R.n;
    R.n = 0;
    L.next = R.next;
    if (R.next >= 0) syms[R.next].prev = b.left;
    try_add(L.prev, b.left);
    try_add(b.left, L.next);
  }
  for (int32_t i = syms.empty() ? -1 : 0; i >= 0; i = syms[i].next) {
    const std::string_view s = text.substr(syms[i].off, syms[i].n);
    const int32_t id = table.find(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : s) {  // a character without a token: byte fallback
      const int32_t bid = spm_byte_token(table, static_cast<uint8_t>(c));
      if (bid >= 0) out.push_back(bid);
      else if (unk >= 0) out.push_back(unk);
    }
  }
}

}  // namespace

}  // namespace ft
