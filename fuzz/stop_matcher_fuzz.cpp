// libFuzzer harness: StopMatcher over arbitrary stop strings and text fed in arbitrary chunks. Input:
// byte 0 = number of stop strings (0-3), then each stop as a length byte and its bytes, then chunks as
// a length byte and its bytes. Checks that what streams out is always a prefix of the text fed in, and
// that a stop leaves the streamed text followed by that stop string in the text. Built and run by
// `make fuzz`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/stop_matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  size_t at = 0;
  auto take = [&](size_t n) {
    n = std::min(n, size - at);
    std::string s(reinterpret_cast<const char*>(data) + at, n);
    at += n;
    return s;
  };
  if (size == 0) return 0;
  const int n_stops = data[at++] % 4;
  std::vector<std::string> stops;
  for (int i = 0; i < n_stops && at < size; ++i) stops.push_back(take(data[at++] % 16));
  ft::StopMatcher m(stops);
  std::string fed, streamed;
  while (at < size) {
    const std::string chunk = take(data[at++] % 8);
    fed += chunk;
    const ft::StopMatcher::Result r = m.feed(chunk);
    streamed += r.text;
    if (fed.compare(0, streamed.size(), streamed) != 0) __builtin_trap();  // streamed text is the text's start
    if (r.stopped) {
      if (fed.compare(streamed.size(), r.stop.size(), r.stop) != 0) __builtin_trap();  // the stop follows it
      return 0;
    }
  }
  streamed += m.flush();
  if (streamed != fed) __builtin_trap();  // no stop: everything comes out
  return 0;
}
