#pragma once
// A fake model for scheduler/service/server tests: it really uses the paged KV cache. Each token writes
// kv = mix(token, position) into its page slot; the logits of a sequence's last token are a hash of every
// KV entry of positions [0, p] read back through the block table. So a wrong page, a page shared or reused
// while still in use, or a skipped prefill changes the output, and solo_greedy() (which needs no pages)
// gives the expected tokens.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <span>
#include <string>
#include <vector>

#include "engine/model_runner.h"

namespace ft::testing {

inline uint64_t fake_mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

inline uint64_t fake_kv(int32_t token, int32_t pos) {
  return fake_mix(static_cast<uint64_t>(static_cast<uint32_t>(token)) * 1315423911ull, static_cast<uint64_t>(pos));
}

/** Logits row for a context hash: pseudo-random values in [0, 10); ties are improbable. */
inline void fake_logits(uint64_t h, int32_t vocab, float* out) {
  for (int32_t v = 0; v < vocab; ++v)
    out[v] = static_cast<float>(fake_mix(h, static_cast<uint64_t>(v)) % 100000) / 10000.0f;
}

class FakeModel : public ModelRunner {
 public:
  FakeModel(int32_t vocab, int32_t n_pages, int32_t page_size)
      : vocab_(vocab), page_size_(page_size), kv_(static_cast<size_t>(n_pages) * page_size, kUnwritten) {}

  int32_t vocab_size() const override { return vocab_; }

  std::span<const float> forward(const StepBatch& b) override {
    forward_into(b, logits_);
    return logits_;
  }

  /** The forward's logits written into `logits` (resized): one row a sequence (its last token's),
   *  whatever the items' n_logits say. */
  void forward_into(const StepBatch& b, std::vector<float>& logits) {
    const auto S = static_cast<int32_t>(b.items.size());
    logits.assign(static_cast<size_t>(S) * vocab_, 0.0f);
    ++steps;
    max_batch_tokens = std::max(max_batch_tokens, static_cast<int32_t>(b.n_tokens()));
    for (int32_t s = 0; s < S; ++s) {
      const StepItem& it = b.items[static_cast<size_t>(s)];
      if (!it.pages || !it.tokens || it.n < 1) throw std::runtime_error("fake model: an empty item");
      const std::vector<int32_t>& pages = *it.pages;
      const auto last = static_cast<int32_t>(it.start + it.n - 1);
      for (int64_t k = 0; k < it.n; ++k) {
        const auto pos = static_cast<int32_t>(it.start + k);
        const int32_t tok = it.tokens[k];
        if (tok < 0 || tok >= vocab_) throw std::runtime_error("fake model: token out of range");
        kv_.at(slot(pages, pos)) = fake_kv(tok, pos);
      }
      uint64_t h = 0;
      for (int32_t p = 0; p <= last; ++p) {
        const uint64_t v = kv_.at(slot(pages, p));
        if (v == kUnwritten) throw std::runtime_error("fake model: reads an unwritten KV slot");
        h = fake_mix(h, v);
      }
      fake_logits(h, vocab_, logits.data() + static_cast<size_t>(s) * vocab_);
    }
  }

  /** Greedy continuation of `prompt` computed without pages: the expected output of any correct run. */
  std::vector<int32_t> solo_greedy(std::vector<int32_t> tokens, int32_t n) const {
    std::vector<int32_t> out;
    std::vector<float> row(static_cast<size_t>(vocab_));
    for (int32_t i = 0; i < n; ++i) {
      uint64_t h = 0;
      for (size_t p = 0; p < tokens.size(); ++p) h = fake_mix(h, fake_kv(tokens[p], static_cast<int32_t>(p)));
      fake_logits(h, vocab_, row.data());
      int32_t best = 0;
      for (int32_t v = 1; v < vocab_; ++v)
        if (row[static_cast<size_t>(v)] > row[static_cast<size_t>(best)]) best = v;
      out.push_back(best);
      tokens.push_back(best);
    }
    return out;
  }

  /** Marks every slot of a page unwritten (tests call it for pages they know are free). */
  void wipe_page(int32_t page) {
    for (int32_t i = 0; i < page_size_; ++i) kv_.at(static_cast<size_t>(page) * page_size_ + i) = kUnwritten;
  }

  /** The KV slots of one page (a fake KV tier copies them). */
  std::span<uint64_t> page(int32_t p) {
    return std::span<uint64_t>(kv_).subspan(static_cast<size_t>(p) * page_size_, static_cast<size_t>(page_size_));
  }

  int64_t steps = 0;
  int32_t max_batch_tokens = 0;

 protected:
  std::vector<float> logits_;  // what forward() returns

 private:
  static constexpr uint64_t kUnwritten = ~0ull;
  size_t slot(const std::vector<int32_t>& pages, int32_t pos) const {
    const size_t j = static_cast<size_t>(pos / page_size_);
    if (j >= pages.size()) throw std::runtime_error("fake model: position " + std::to_string(pos) + " beyond the block table");
    return static_cast<size_t>(pages[j]) * page_size_ + static_cast<size_t>(pos % page_size_);
  }

  int32_t vocab_, page_size_;
  std::vector<uint64_t> kv_;
};

}  // namespace ft::testing
