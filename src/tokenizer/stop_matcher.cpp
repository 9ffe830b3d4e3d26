#include "tokenizer/stop_matcher.h"

#include <algorithm>

namespace ft {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (size_t i = 0; i < stops.size(); ++i) {
    if (stops[i].empty()) continue;
    stops_.push_back(std::move(stops[i]));
    index_.push_back(static_cast<int>(i));
  }
}

StopMatcher::Result StopMatcher::feed(std::string_view text) {
  Result r;
  if (stopped_) return r;
  buf_.append(text);
  // Earliest complete occurrence of any stop string.
  size_t best = std::string::npos;
  int which = -1;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const size_t pos = buf_.find(stops_[i]);
    if (pos < best) best = pos, which = static_cast<int>(i);
  }
  if (which >= 0) {
    r.text = buf_.substr(0, best);
    r.stopped = true;
    r.stop_index = index_[which];
    r.stop = stops_[static_cast<size_t>(which)];
    stopped_ = true;
    buf_.clear();
    return r;
  }
  // Hold back the longest tail of buf_ that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, buf_.size()); k > hold; --k) {
      if (buf_.compare(buf_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.text = buf_.substr(0, buf_.size() - hold);
  buf_.erase(0, buf_.size() - hold);
  return r;
}

std::string StopMatcher::pass(std::string_view text) {
  if (stopped_) return {};
  std::string out;
  out.swap(buf_);
  out.append(text);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(buf_);
  stopped_ = false;
  return out;
}

}  // namespace ft
