#include "server/reasoning.h"

#include "server/tag_scan.h"

namespace ft::server {

namespace {

/** `s` starts with `tag`, or is a proper prefix of it (more text may complete it). */
bool starts_or_may_become(std::string_view s, std::string_view tag, bool& complete) {
  complete = s.substr(0, tag.size()) == tag;
  return complete || (s.size() < tag.size() && tag.substr(0, s.size()) == s);
}

}  // namespace

ReasoningFormat detect_reasoning_format(std::string_view src) {
  const auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has("<|channel|>")) return ReasoningFormat::kNone;
  if (has("<|channel>")) return ReasoningFormat::kGemma4;
  if (has("<think>") || has("</think>")) return ReasoningFormat::kThink;
  return ReasoningFormat::kNone;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kThink: return "deepseek_r1";
    case ReasoningFormat::kGemma4: return "gemma4";
    case ReasoningFormat::kNone: break;
  }
  return "none";
}

std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  for (ReasoningFormat f : {ReasoningFormat::kNone, ReasoningFormat::kThink, ReasoningFormat::kGemma4})
    if (name == reasoning_format_name(f)) return f;
  for (std::string_view alias : {"qwen3", "deepseek_v3", "glm45", "minimax_m2", "kimi_k2", "deepseek"})
    if (name == alias) return ReasoningFormat::kThink;
  return std::nullopt;
}

std::string reasoning_format_names() {
  return "none, deepseek_r1, qwen3, deepseek_v3, glm45, minimax_m2, kimi_k2 (these six: <think> blocks), gemma4";
}

ReasoningTags reasoning_tags(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kThink: return {"<think>", "</think>"};
    case ReasoningFormat::kGemma4: return {"<|channel>thought", "<channel|>"};
    case ReasoningFormat::kNone: break;
  }
  return {};
}

bool reasoning_tags_are_special(ReasoningFormat f) { return f == ReasoningFormat::kGemma4; }

bool prompt_opens_reasoning(std::string_view prompt, ReasoningFormat f) {
  const std::string_view open = reasoning_tags(f).open;
  if (open.empty()) return false;
  const size_t end = prompt.find_last_not_of(" \t\r\n");
  if (end == std::string_view::npos) return false;
  prompt = prompt.substr(0, end + 1);
  return prompt.size() >= open.size() && prompt.substr(prompt.size() - open.size()) == open;
}

ReasoningStream::ReasoningStream(ReasoningFormat format, bool in_reasoning) : tags_(reasoning_tags(format)) {
  if (tags_.open.empty()) state_ = State::kContent;  // kNone: everything is content
  else if (in_reasoning) state_ = State::kStartInside, opened_ = true;
}

ReasoningSplit ReasoningStream::push(std::string_view piece) {
  held_.append(piece);
  ReasoningSplit out;
  for (;;) {
    switch (state_) {
      case State::kStart:         // whitespace, then the open tag or anything else
      case State::kStartInside: {  // whitespace, then an open tag written again (dropped) or reasoning
        const size_t at = held_.find_first_not_of(" \t\r\n");
        if (at == std::string::npos) return out;  // only whitespace so far
        bool complete = false;
        if (!starts_or_may_become(std::string_view(held_).substr(at), tags_.open, complete)) {
          state_ = state_ == State::kStart ? State::kContent : State::kThinking;
          break;
        }
        if (!complete) return out;  // may still become the tag
        held_.erase(0, at + tags_.open.size());
        state_ = State::kThinking;
        opened_ = true;
        break;
      }
      case State::kThinking:
        if (!take_until_tag(held_, tags_.close, out.reasoning)) return out;
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
  if (state_ == State::kThinking || state_ == State::kStartInside) out.reasoning = held_;  // unterminated: reasoning
  else if (!strip_) out.content = held_;  // whitespace-only or a partial open tag
  held_.clear();
  return out;
}

ReasoningSplit split_reasoning(std::string_view text, ReasoningFormat format, bool in_reasoning) {
  ReasoningStream s(format, in_reasoning);
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
