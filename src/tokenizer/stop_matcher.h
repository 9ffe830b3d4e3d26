#pragma once
// StopMatcher: stop strings over streamed text. Text is fed as it is decoded; the matcher returns
// the part that is safe to send. A stop string may span several feeds (tokens); a tail that could
// still grow into a stop string is held back until it is disambiguated, so no prefix of a stop
// string is ever streamed. On a match the text before the stop string is returned and the stream
// ends (the stop string itself is not returned). Each stop string has a Knuth-Morris-Pratt automaton
// (Knuth, Morris, Pratt 1977) whose state is the longest suffix of the text so far that begins the
// stop string, so a feed costs O(its bytes x the number of stops) and the held-back tail is the
// largest state, whatever the stop strings' length (rescanning the tail cost O(length^2) a feed).
#include <string>
#include <string_view>
#include <vector>

namespace ft {

class StopMatcher {
 public:
  struct Result {
    std::string text;      // safe to stream now
    bool stopped = false;  // a stop string was found; `text` ends right before it
    int stop_index = -1;   // which stop string (index into the constructor's list)
    std::string stop;      // that stop string, when `stopped`
  };

  /** `stops`: stop strings (UTF-8); empty strings are ignored. */
  explicit StopMatcher(std::vector<std::string> stops);

  /** Feeds newly decoded text. After a stop, returns empty results. When several stop strings
   *  occur, the one that starts first wins (the earliest in the list on a tie). */
  Result feed(std::string_view text);

  /** Text that is not searched for stop strings (vLLM's: the text of the first min_tokens tokens):
   *  returned at once, after whatever was held back; later feeds search only from here on. */
  std::string pass(std::string_view text);

  /** End of generation without a stop: returns the held-back text and resets. */
  std::string flush();

  bool stopped() const { return stopped_; }
  /** Bytes currently held back. */
  size_t held_bytes() const { return buf_.size(); }

 private:
  std::vector<std::string> stops_;
  std::vector<int> index_;               // original index of each non-empty stop
  std::vector<std::vector<int>> fail_;   // KMP failure function of each stop
  std::vector<int> state_;               // KMP state of each stop after the text so far
  std::string buf_;                      // held back: the text since the longest live state began
  bool stopped_ = false;
};

}  // namespace ft
