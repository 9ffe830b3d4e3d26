#pragma once
// What the tool-call format scanners (tool_calls_*.cpp) share: JSON → ToolCall, finding where a JSON
// value ends in streamed text, and the factory of each format's scanner.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "server/tool_calls.h"

namespace ft::server {

/** The call in a parsed JSON object: a non-empty string "name" and "arguments" (or Llama's
 *  "parameters"): an object or array is dumped, a string must hold an object or array as JSON text
 *  (kept as written), none is "{}". Nothing when `j` is not such an object. */
std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& j);

/** `s` starts with `{` or `[`: the length of that JSON value (brackets counted outside strings), or
 *  npos when it has not closed yet. */
size_t json_value_end(std::string_view s);

/** json_value_end over a text that only grows between calls (a value streaming in): each call scans
 *  only what was added since the last one, so a value of L bytes costs O(L), not O(L^2). reset()
 *  before scanning a value that starts elsewhere. */
class JsonValueScan {
 public:
  /** json_value_end(s), where s extends the text of the previous call since reset(). */
  size_t end(std::string_view s);
  void reset() { *this = JsonValueScan{}; }

 private:
  size_t pos_ = 0;  // bytes of s scanned so far
  int depth_ = 0;
  bool in_string_ = false, escaped_ = false;
};

/** Drops leading spaces, tabs and line breaks from `s`; returns how many. */
size_t skip_space(std::string& s);

/** Whether `s` is a proper prefix of `tag` (more text may complete it). */
inline bool may_become(std::string_view s, std::string_view tag) {
  return s.size() < tag.size() && tag.substr(0, s.size()) == s;
}

/** The text a scanner holds while it reads: `held`, received and not yet consumed, and `pending`,
 *  consumed as part of what may still turn out not to be a call. */
struct HeldText {
  std::string held, pending;
  /** Moves the first n held characters to pending. */
  void take(size_t n) {
    pending.append(held, 0, n);
    held.erase(0, n);
  }
  /** What was read as a call is not one: pending is content. */
  void give_up(ToolCallSplit& out) {
    out.content += pending;
    pending.clear();
  }
  /** The reply ended: everything held is content. */
  void flush(ToolCallSplit& out) {
    give_up(out);
    out.content += held;
    held.clear();
  }
};

/** A scanner reading through HeldText that falls back to text when what it reads is not a call.
 *  State is its enum of states, with a kText state (plain text). A format writes step(), one move of
 *  its state machine; push() runs it until it waits for more text. */
template <class State>
class HeldTextScanner : public ToolCallScanner {
 public:
  explicit HeldTextScanner(State start) : state_(start) {}
  void push(std::string_view piece, ToolCallSplit& out) final {
    t_.held.append(piece);
    for (;;) {
      std::string_view rest;
      const size_t at = skip_held_space(rest);  // before step() reads rest
      if (!step(at, rest, out)) return;
    }
  }
  void finish(ToolCallSplit& out) override {
    t_.flush(out);
    json_.reset();
    state_ = State::kText;
  }

 protected:
  /** One move on the held text (`rest`: from its first non-space character, at offset `at`): false
   *  when the move needs more text, true when the state machine may move again at once. */
  virtual bool step(size_t at, std::string_view rest, ToolCallSplit& out) = 0;
  /** Where the held text's first non-space character is, and the held text from there. */
  size_t skip_held_space(std::string_view& rest) const {
    const size_t at = std::min(t_.held.size(), t_.held.find_first_not_of(" \t\r\n"));
    rest = std::string_view(t_.held).substr(at);
    return at;
  }
  /** What was read as a call is not one: it is content, as is all that follows. */
  void give_up(ToolCallSplit& out) {
    t_.give_up(out);
    json_.reset();
    state_ = State::kText;
  }
  /** The JSON value starting at rest[0] (rest = the held text from `at`, rest[0] `{` or `[`), parsed
   *  (a discarded value when it is not valid JSON) and taken from the held text once it has closed;
   *  nothing while it is still streaming in. Each call scans only what arrived since the last one;
   *  the scan starts afresh after a value ends (or give_up). */
  std::optional<nlohmann::ordered_json> take_value(size_t at, std::string_view rest) {
    const size_t end = json_.end(rest);
    if (end == std::string_view::npos) return std::nullopt;
    json_.reset();
    auto j = nlohmann::ordered_json::parse(rest.substr(0, end), nullptr, /*allow_exceptions=*/false);
    t_.take(at + end);  // after the parse: rest views the held text
    return j;
  }
  /** take_value for a JSON object the format requires at rest: `ready` false while it is still
   *  streaming in (step() then returns false); ready without an object after give_up() when the
   *  text there is not a JSON object (step() then returns true). */
  struct TakenObject {
    bool ready = false;
    std::optional<nlohmann::ordered_json> object;
  };
  TakenObject take_object(size_t at, std::string_view rest, ToolCallSplit& out) {
    if (rest.empty()) return {};
    if (rest[0] == '{') {
      std::optional<nlohmann::ordered_json> j = take_value(at, rest);
      if (!j) return {};
      if (j->is_object()) return {true, std::move(j)};
    }
    give_up(out);
    return {true, std::nullopt};
  }
  State state_;
  HeldText t_;
  JsonValueScan json_;
};

std::unique_ptr<ToolCallScanner> make_hermes_scanner();
std::unique_ptr<ToolCallScanner> make_llama3_scanner();
std::unique_ptr<ToolCallScanner> make_mistral_scanner();
std::unique_ptr<ToolCallScanner> make_harmony_scanner();

}  // namespace ft::server
