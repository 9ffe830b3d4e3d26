#include "server/reasoning.h"

#include "server/tag_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

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
      case State::kThinking:
        if (!take_until_tag(held_, kClose, out.reasoning)) return out;
        state_ = State::kContent;
        strip_ = true;
        break;
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
  trim_space(out.reasoning);
  trim_space(out.content);
  return out;
}

}  // namespace ft::server
