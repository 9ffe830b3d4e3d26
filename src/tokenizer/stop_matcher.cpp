#include "tokenizer/stop_matcher.h"

#include <algorithm>

namespace ft {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    const std::string& s = stops[i];
    std::vector<int> f(s.size(), 0);  // f[j]: the longest proper border of s[0..j]
    for (size_t j = 1, k = 0; j < s.size(); ++j) {
      while (k > 0 && s[j] != s[k]) k = static_cast<size_t>(f[k - 1]);
      if (s[j] == s[k]) ++k;
      f[j] = static_cast<int>(k);
    }
    fail_.push_back(std::move(f));
    stops_.push_back(std::move(stops[i]));
    index_.push_back(static_cast<int>(i));
  }
  state_.assign(stops_.size(), 0);
}

StopMatcher::Result StopMatcher::feed(std::string_view text) {
  Result r;
  if (stopped_) return r;
  const size_t base = buf_.size();  // buf_ + text is what the states describe the end of
  // The earliest-starting complete occurrence of any stop string (the earliest in the list on a tie):
  // a stop's first completion in this feed is its earliest start.
  size_t best = std::string::npos;
  int which = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const std::vector<int>& f = fail_[i];
    size_t k = static_cast<size_t>(state_[i]);
    for (size_t p = 0; p < text.size(); ++p) {
      while (k > 0 && text[p] != s[k]) k = static_cast<size_t>(f[k - 1]);
      if (text[p] == s[k]) ++k;
      if (k == s.size()) {
        const size_t start = base + p + 1 - s.size();
        if (start < best) best = start, which = static_cast<int>(i);
        k = static_cast<size_t>(f[k - 1]);
        break;  // later occurrences start later
      }
    }
    state_[i] = static_cast<int>(k);
  }
  buf_.append(text);
  if (which >= 0) {
    r.text = buf_.substr(0, best);
    r.stopped = true;
    r.stop_index = index_[which];
    r.stop = stops_[static_cast<size_t>(which)];
    stopped_ = true;
    buf_.clear();
    return r;
  }
  // Hold back the longest tail of the text that is a proper prefix of some stop string: the largest
  // state (each state is the longest such tail for its stop).
  size_t hold = 0;
  for (int st : state_) hold = std::max(hold, static_cast<size_t>(st));
  r.text = buf_.substr(0, buf_.size() - hold);
  buf_.erase(0, buf_.size() - hold);
  return r;
}

std::string StopMatcher::pass(std::string_view text) {
  if (stopped_) return {};
  std::fill(state_.begin(), state_.end(), 0);  // the search starts again after the passed text
  std::string out;
  out.swap(buf_);
  out.append(text);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(buf_);
  std::fill(state_.begin(), state_.end(), 0);
  stopped_ = false;
  return out;
}

}  // namespace ft
