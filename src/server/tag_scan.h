#pragma once
// Text scanning shared by the reply splitters (tool_calls.h, reasoning.h), which see replies piece by
// piece as they stream and must not show any part of a tag as text.
#include <algorithm>
#include <string>
#include <string_view>

namespace ft::server {

/** When `held` contains `tag`: appends the text before it to `out`, drops it and the tag from `held`,
 *  and returns true. Otherwise appends all of `held` but a suffix that may be the start of `tag` (kept
 *  for the next piece) and returns false. */
inline bool take_until_tag(std::string& held, std::string_view tag, std::string& out) {
  const size_t at = held.find(tag);
  if (at != std::string::npos) {
    out.append(held, 0, at);
    held.erase(0, at + tag.size());
    return true;
  }
  size_t keep = std::min(held.size(), tag.size() - 1);  // the longest suffix that is a prefix of tag
  while (keep > 0 && std::string_view(held).substr(held.size() - keep) != tag.substr(0, keep)) --keep;
  out.append(held, 0, held.size() - keep);
  held.erase(0, held.size() - keep);
  return false;
}

/** Whether `s` is only spaces, tabs and line breaks (what trim_space removes), or empty. */
inline bool all_space(std::string_view s) { return s.find_first_not_of(" \t\r\n") == std::string_view::npos; }

/** Drops leading and trailing spaces, tabs and line breaks. */
inline void trim_space(std::string& s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return s.clear();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  s.erase(0, first);
}

/** trim_space for text that streams in: push() returns what can be shown now (leading whitespace
 *  dropped, a run of whitespace held until text follows it), and whatever is still held at the end is
 *  trailing whitespace, dropped. The pieces add up to the whole text, trimmed. */
class TrimmedText {
 public:
  std::string push(std::string_view piece) {
    const size_t last = piece.find_last_not_of(" \t\r\n");
    if (last == std::string_view::npos) {  // only whitespace: held (or dropped before any text)
      if (started_) held_.append(piece);
      return {};
    }
    const size_t first = started_ ? 0 : piece.find_first_not_of(" \t\r\n");
    std::string out = std::move(held_);
    out.append(piece.substr(first, last + 1 - first));
    held_.assign(piece.substr(last + 1));
    started_ = true;
    return out;
  }

 private:
  std::string held_;
  bool started_ = false;
};

}  // namespace ft::server
