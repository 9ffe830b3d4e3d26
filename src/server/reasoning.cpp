#include "server/reasoning.h"

namespace ft::server {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

/** Length of the longest suffix of `s` that is a proper prefix of `tag`. */
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
    if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
  return 0;
}

void trim(std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return s.clear();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  s.erase(0, first);
}

}  // namespace

ReasoningSplit ReasoningStream::push(std::string_view piece) {
  held_.append(piece);
  ReasoningSplit out;
  for (;;) {
    switch (state_) {
      case State::kStart: {  // whitespace, then <think> or anything else
        const size_t at = held_.find_first_not_of(" \t\r\n");
        if (at == std::string::npos) return out;  // only whitespace so far
        const std::string_view rest = std::string_view(held_).substr(at);
        if (rest.substr(0, kOpen.size()) == kOpen) {
          held_.erase(0, at + kOpen.size());
          state_ = State::kThinking;
          opened_ = true;
        } else if (kOpen.substr(0, rest.size()) == rest) {
          return out;  // may still become <think>
        } else {
          state_ = State::kContent;
        }
        break;
      }
      case State::kThinking: {
        const size_t at = held_.find(kClose);
        if (at == std::string::npos) {
          const size_t keep = partial_tag(held_, kClose);
          out.reasoning.append(held_, 0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return out;
        }
        out.reasoning.append(held_, 0, at);
        held_.erase(0, at + kClose.size());
        state_ = State::kContent;
        strip_ = true;
        break;
      }
      case State::kContent:
        if (strip_) {
          const size_t at = held_.find_first_not_of(" \t\r\n");
          if (at == std::string::npos) {
            held_.clear();
            return out;
          }
          held_.erase(0, at);
          strip_ = false;
        }
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningSplit ReasoningStream::finish() {
  ReasoningSplit out;
  if (state_ == State::kThinking) out.reasoning = held_;  // an unterminated block: all reasoning
  else if (!strip_) out.content = held_;                  // whitespace-only or a partial "<think"
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(std::string_view text) {
  ReasoningStream s;
  ReasoningSplit out = s.push(text);
  const ReasoningSplit rest = s.finish();
  out.thought = s.opened();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  if (!out.thought) {
    out.content = std::string(text);
    return out;
  }
  trim(out.reasoning);
  trim(out.content);
  return out;
}

}  // namespace ft::server
