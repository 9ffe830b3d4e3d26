// gpt-oss tool calls in OpenAI's harmony response format (openai/harmony docs, "Function calling"; the
// openai/gpt-oss templates; vLLM's "openai" tool parser, llama.cpp's GPT-OSS chat format). The reply
// is a sequence of messages
//   <|start|>assistant<|channel|>CHANNEL[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY<|end|>
// (the first one's `<|start|>assistant` is in the prompt; the recipient may also follow the role,
// `<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>`). A message to
// `functions.NAME` is a call whose body is the JSON arguments, ended by <|call|> (or by the end of the
// reply, which usually stops at that token); `analysis` is reasoning; `final` (and any other message
// without a recipient) is content. A call whose body is not a JSON object, and a message to another
// recipient (a built-in tool), stay content as the text they were; so does text outside messages.
#include <array>

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kStart = "<|start|>", kChannel = "<|channel|>", kMessage = "<|message|>";
constexpr std::array<std::string_view, 2> kOpens = {kStart, kChannel};
constexpr std::array<std::string_view, 4> kEnds = {"<|end|>", "<|call|>", "<|return|>", kStart};

/** take_until_tag for the earliest of several tags: the index of the tag found (text before it to
 *  `out`, the tag dropped from `held`), or -1 (all but a suffix that may start a tag to `out`). */
template <size_t N>
int take_until_first(std::string& held, const std::array<std::string_view, N>& tags, std::string& out) {
  size_t best = std::string::npos;
  int which = -1;
  for (size_t t = 0; t < N; ++t) {
    const size_t at = held.find(tags[t]);
    if (at < best) best = at, which = static_cast<int>(t);
  }
  if (which >= 0) {
    out.append(held, 0, best);
    held.erase(0, best + tags[which].size());
    return which;
  }
  size_t keep = 0;
  for (std::string_view tag : tags) {
    for (size_t k = std::min(held.size(), tag.size() - 1); k > keep; --k) {
      if (std::string_view(held).substr(held.size() - k) == tag.substr(0, k)) {
        keep = k;
        break;
      }
    }
  }
  out.append(held, 0, held.size() - keep);
  held.erase(0, held.size() - keep);
  return -1;
}

/** The word after `key` in `header` (up to a space, `<` or the end), or "" without `key`. */
std::string word_after(const std::string& header, std::string_view key) {
  const size_t at = header.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return header.substr(from, header.find_first_of(" <\t\n", from) - from);
}

class HarmonyScanner : public ToolCallScanner {
 public:
  void push(std::string_view piece, ToolCallSplit& out) override {
    held_.append(piece);
    while (step(out)) {
    }
  }
  void finish(ToolCallSplit& out) override {
    if (state_ == State::kBody) {
      body_target(out) += held_;
      held_.clear();
      end_message("", out);
    }
    out.content += raw_ + held_;
    raw_.clear();
    held_.clear();
    state_ = State::kOutside;
  }
  /** A call's body that is already a whole JSON object is a call; a message's header being read, any
   *  other call body, and a marker's start held are dropped; reasoning and content bodies went out as
   *  they streamed. */
  void drop_open_call(ToolCallSplit& out) override {
    if (state_ == State::kBody && body_kind_ == Body::kCall) {
      const auto j = nlohmann::ordered_json::parse(body_, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) out.calls.push_back(ToolCall{name_, j.dump()});
    }
    raw_.clear();
    held_.clear();
    body_.clear();
    state_ = State::kOutside;
  }

 private:
  enum class State { kOutside, kHeader, kBody };
  enum class Body { kReasoning, kContent, kCall, kOther };

  /** One move of the state machine; false when it needs more text. */
  bool step(ToolCallSplit& out) {
    switch (state_) {
      case State::kOutside: {
        const int t = take_until_first(held_, kOpens, out.content);
        if (t < 0) return false;
        raw_ = std::string(kOpens[t]);
        header_ = t == 1 ? std::string(kChannel) : "";
        state_ = State::kHeader;
        return true;
      }
      case State::kHeader: {
        const size_t at = held_.find(kMessage);
        if (at == std::string::npos) return false;
        header_.append(held_, 0, at);
        raw_.append(held_, 0, at + kMessage.size());
        held_.erase(0, at + kMessage.size());
        const std::string recipient = word_after(header_, "to=");
        name_.clear();
        if (recipient.rfind("functions.", 0) == 0 && recipient.size() > 10) {
          body_kind_ = Body::kCall;
          name_ = recipient.substr(10);
        } else if (!recipient.empty()) {
          body_kind_ = Body::kOther;
        } else {
          body_kind_ = word_after(header_, kChannel) == "analysis" ? Body::kReasoning : Body::kContent;
          raw_.clear();  // its text goes out as it streams
        }
        body_.clear();
        state_ = State::kBody;
        return true;
      }
      case State::kBody: {
        const int t = take_until_first(held_, kEnds, body_target(out));
        if (t < 0) return false;
        if (kEnds[t] == kStart) held_.insert(0, kStart);  // the next message, with no end token before it
        end_message(kEnds[t] == kStart ? "" : kEnds[t], out);
        return true;
      }
    }
    return false;
  }

  /** Where the open message's body goes: reasoning and content as they stream, a call's body held. */
  std::string& body_target(ToolCallSplit& out) {
    return body_kind_ == Body::kReasoning ? out.reasoning : body_kind_ == Body::kContent ? out.content : body_;
  }

  /** A message's body is complete (ended by `end`, "" at the end of the reply or a new message). */
  void end_message(std::string_view end, ToolCallSplit& out) {
    if (body_kind_ == Body::kCall) {
      const auto j = nlohmann::ordered_json::parse(body_, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) {
        out.calls.push_back(ToolCall{name_, j.dump()});
        raw_.clear();
      }
    }
    if (!raw_.empty()) out.content += raw_ + body_ + std::string(end);  // not a call: as it was
    raw_.clear();
    body_.clear();
    state_ = State::kOutside;
  }

  State state_ = State::kOutside;
  Body body_kind_ = Body::kContent;
  std::string held_, raw_, header_, body_, name_;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_harmony_scanner() { return std::make_unique<HarmonyScanner>(); }

}  // namespace ft::server
