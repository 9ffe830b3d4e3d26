#pragma once
// What the tool-call format scanners (tool_calls_*.cpp) share: JSON → ToolCall, finding where a JSON
// value ends in streamed text, and the factory of each format's scanner.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  void drop_open_call(ToolCallSplit& /*out*/) final {
    t_.pending.clear();
    t_.held.clear();
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

/** A format whose calls sit in blocks between an open and a close marker, text outside them being
 *  content: text that may start the open marker is held, a block's body is held whole until its close
 *  marker, and then parse() turns it into calls. A body that is not calls stays content as the text it
 *  was, markers included. At the end of the reply an open block's body goes to parse() with `closed`
 *  false: a format may take the calls that completed in it (a section whose end marker did not
 *  come); otherwise it is text. */
class BlockScanner : public ToolCallScanner {
 public:
  BlockScanner(std::string_view open, std::string_view close) : open_(open), close_(close) {}
  void push(std::string_view piece, ToolCallSplit& out) final;
  void finish(ToolCallSplit& out) final;
  /** An open block's calls that parse() takes with `closed` false are kept; all else held is dropped. */
  void drop_open_call(ToolCallSplit& out) final;

 protected:
  /** The calls in one block's body (the text between the markers), or nothing when it is not a
   *  well-formed block of the format. `closed`: the close marker followed it (false: the reply ended). */
  virtual std::optional<std::vector<ToolCall>> parse(std::string_view body, bool closed) = 0;

 private:
  std::string_view open_, close_;
  std::string held_;
  bool in_block_ = false;
  size_t scanned_ = 0;  // bytes of an open block's held body searched for the close marker
};

/** A value the XML-like formats (Qwen3-Coder, GLM-4.5, MiniMax-M2) wrote as text, typed by the schema
 *  of `function`'s parameter `key` in `schemas` (as vLLM's qwen3_coder parser does): "string" (or no
 *  schema for it) stays a string; "integer", "number", "boolean", "null", "object" and "array" are
 *  read as JSON of that type (Python's True / False / None too), a type list or anyOf / oneOf tries
 *  each; text that reads as none of them stays a string. */
nlohmann::ordered_json typed_argument(const ToolSchemas& schemas, std::string_view function, std::string_view key,
                                      std::string_view text);

/** `s` without one line break at its start and one at its end (the XML-like formats put the value
 *  of a parameter on lines of its own). */
std::string_view strip_one_newline(std::string_view s);

/** `s` without leading and trailing spaces, tabs and line breaks. */
std::string_view trim_view(std::string_view s);

/** A valid tool name: not empty, no whitespace, none of `<>{}"` (what a marker or a body starts with). */
bool plausible_tool_name(std::string_view name);

std::unique_ptr<ToolCallScanner> make_hermes_scanner();
std::unique_ptr<ToolCallScanner> make_llama3_scanner();
std::unique_ptr<ToolCallScanner> make_mistral_scanner();
std::unique_ptr<ToolCallScanner> make_harmony_scanner();
std::unique_ptr<ToolCallScanner> make_qwen3_coder_scanner(ToolSchemas schemas);
std::unique_ptr<ToolCallScanner> make_deepseek_scanner();
std::unique_ptr<ToolCallScanner> make_glm45_scanner(ToolSchemas schemas);
std::unique_ptr<ToolCallScanner> make_minimax_m2_scanner(ToolSchemas schemas);
std::unique_ptr<ToolCallScanner> make_deepseek_v32_scanner(ToolSchemas schemas);
std::unique_ptr<ToolCallScanner> make_kimi_k2_scanner();
std::unique_ptr<ToolCallScanner> make_gemma4_scanner();

}  // namespace ft::server
