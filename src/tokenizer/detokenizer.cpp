#include "tokenizer/detokenizer.h"

#include "tokenizer/utf8.h"

namespace ft {

bool prompt_has_text(const Vocab& vocab, std::span<const int32_t> prompt) {
  for (int32_t id : prompt) {
    if (id < 0 || id >= vocab.n_tokens()) continue;
    if (vocab.token(id).attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused)) continue;
    if (!vocab.piece(id).empty()) return true;
  }
  return false;
}

std::string Detokenizer::feed(int32_t id) {
  const TokenData& t = vocab_->token(id);  // range check before any state change
  std::string out;
  if (skip_special_ && (t.attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused))) return out;
  const std::string& p = vocab_->piece(id);
  if (first_ && vocab_->strips_leading_space() && !p.empty() && p[0] == ' ') pending_.append(p, 1, std::string::npos);
  else pending_ += p;
  if (!p.empty()) first_ = false;
  const size_t used = utf8_repair(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string Detokenizer::flush() {
  std::string out;
  utf8_repair(pending_, out, /*final=*/true);
  pending_.clear();
  first_ = starts_text_;
  return out;
}

}  // namespace ft
