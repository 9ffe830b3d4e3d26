// Thinking across the APIs (issue 38): Anthropic thinking blocks carry an opaque signature (base64 of
// the SHA-256 of their text), streamed as a signature_delta before the block stops; thinking blocks of
// the request's history reach the template as the assistant's reasoning_content, as the OpenAI form's
// do; chat_template_kwargs.enable_thinking, reasoning_effort, Anthropic's thinking and the server's
// --reasoning on|off default reach the template (Qwen3's and gpt-oss's real templates).
#include <gtest/gtest.h>

#include "server/request_parse.h"
#include "server/server_fixture.h"
#include "server/sha256.h"
#include "test_util.h"

namespace ft {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) out += {d[c >> 4], d[c & 15]};
  return out;
}

TEST(Thinking, Sha256AndBase64MatchTheirStandardVectors) {
  // FIPS 180-4 examples (one block, two blocks) and the empty message; RFC 4648 section 10.
  EXPECT_EQ(hex(server::sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(hex(server::sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hex(server::sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(hex(server::sha256(std::string(1000000, 'a'))),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  const std::pair<const char*, const char*> b64[] = {{"", ""},          {"f", "Zg=="},         {"fo", "Zm8="},
                                                     {"foo", "Zm9v"},   {"foob", "Zm9vYg=="},  {"fooba", "Zm9vYmE="},
                                                     {"foobar", "Zm9vYmFy"}};
  for (const auto& [in, out] : b64) EXPECT_EQ(server::base64(in), out) << in;
}

std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

std::string messages_body(bool stream) {
  return json{{"model", "test-model"}, {"max_tokens", 100}, {"temperature", 0}, {"stream", stream},
              {"messages", {{{"role", "user"}, {"content", "Go"}}}}}
      .dump();
}

TEST(Thinking, AnthropicThinkingBlocksAreSignedWholeAndStreamed) {
  TestServerConfig cfg;
  cfg.split_reasoning = true;
  const std::string reply = "<think>\nPlan the answer.\n</think>\n\nDone.";
  const std::string signature = server::base64(server::sha256("Plan the answer."));
  const Reply whole = testing::scripted_post(cfg, script_of(reply), "/v1/messages", messages_body(false));
  ASSERT_EQ(whole.status, 200) << whole.raw;
  EXPECT_EQ(whole.body["content"][0], json({{"type", "thinking"}, {"thinking", "Plan the answer."}, {"signature", signature}}));
  const Reply streamed = testing::scripted_post(cfg, script_of(reply), "/v1/messages", messages_body(true));
  ASSERT_EQ(streamed.status, 200) << streamed.raw;
  // Block 0's events: start, thinking deltas, one signature_delta, stop; then the text block.
  std::vector<std::string> kinds;
  std::string thinking, streamed_signature;
  for (const auto& [event, data] : testing::sse_named_events(streamed.raw)) {
    const json j = json::parse(data);
    if (!j.contains("index") || j["index"] != 0) continue;
    if (event == "content_block_start") {
      EXPECT_EQ(j["content_block"]["type"], "thinking");
      kinds.push_back("start");
    } else if (event == "content_block_delta") {
      kinds.push_back(j["delta"]["type"]);
      if (j["delta"]["type"] == "thinking_delta") thinking += j["delta"]["thinking"].get<std::string>();
      if (j["delta"]["type"] == "signature_delta") streamed_signature = j["delta"]["signature"];
    } else if (event == "content_block_stop") {
      kinds.push_back("stop");
    }
  }
  ASSERT_GE(kinds.size(), 4u) << streamed.raw;
  EXPECT_EQ(kinds.front(), "start");
  EXPECT_EQ(kinds[kinds.size() - 2], "signature_delta") << streamed.raw;
  EXPECT_EQ(kinds.back(), "stop");
  EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "signature_delta"), 1) << streamed.raw;
  EXPECT_EQ(thinking, "Plan the answer.");
  EXPECT_EQ(streamed_signature, signature);
}

const char* const kHistory = R"({"model": "m", "max_tokens": 10, "messages": [
  {"role": "user", "content": "Weather in Paris?"},
  {"role": "assistant", "content": [
    {"type": "thinking", "thinking": "I should call the tool.", "signature": "c2ln"},
    {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
    {"type": "text", "text": "Let me check."},
    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]})";

TEST(Thinking, AnthropicHistoryThinkingReachesTheTemplateAsReasoningContent) {
  const server::ChatRequest a = server::parse_anthropic_request(ojson::parse(kHistory), false);
  // The OpenAI form of the same conversation, as a client of /v1/chat/completions sends it.
  const server::ChatRequest o = server::parse_chat_request(ojson::parse(R"({"messages": [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me check.", "reasoning_content": "I should call the tool.",
     "tool_calls": [{"id": "toolu_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"}]})"));
  EXPECT_EQ(a.messages, o.messages);
  EXPECT_EQ(a.messages[1]["reasoning_content"], "I should call the tool.");
  // Qwen3's template renders the reasoning of a turn after the last user query: the prompt holds it.
  TestServerConfig cfg;
  cfg.chat_template = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen3-0.6B.jinja");
  ASSERT_FALSE(cfg.chat_template.empty());
  TestServer s(cfg);
  auto c = s.client();
  json body = json::parse(kHistory);
  body["model"] = "test-model";
  const Reply with = post(c, "/v1/messages/count_tokens", body.dump());
  ASSERT_EQ(with.status, 200) << with.raw;
  body["messages"][1]["content"].erase(0);  // the thinking block
  const Reply without = post(c, "/v1/messages/count_tokens", body.dump());
  ASSERT_EQ(without.status, 200) << without.raw;
  // One token a byte; the template wraps the reasoning in <think>\n...\n</think>\n\n.
  const int thought = static_cast<int>(std::string("<think>\nI should call the tool.\n</think>\n\n").size());
  EXPECT_EQ(with.body["input_tokens"].get<int>(), without.body["input_tokens"].get<int>() + thought) << with.raw;
  // A thinking block without its text is refused, naming it.
  json bad = json::parse(kHistory);
  bad["messages"][1]["content"][0].erase("thinking");
  EXPECT_THROW(server::parse_anthropic_request(ojson::parse(bad.dump()), false), server::ApiException);
}

/** The prompt /apply-template renders for `extra` fields of a one-turn chat body. */
std::string prompt_of(httplib::Client& c, const json& extra) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  b.update(extra);
  const Reply r = post(c, "/apply-template", b.dump());
  EXPECT_EQ(r.status, 200) << r.raw;
  return r.body.value("prompt", "");
}

const std::string kNoThink = "<|im_start|>assistant\n<think>\n\n</think>\n\n";  // Qwen3's enable_thinking false

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

TEST(Thinking, EnableThinkingReachesTheTemplateFromEachSource) {
  TestServerConfig cfg;
  cfg.chat_template = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen3-0.6B.jinja");
  cfg.max_seq_len = 4096, cfg.n_pages = 256;
  for (std::optional<bool> server_default : {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    cfg.enable_thinking = server_default;  // --reasoning auto | on | off
    TestServer s(cfg);
    auto c = s.client();
    const bool default_off = server_default == false;
    EXPECT_EQ(ends_with(prompt_of(c, json::object()), kNoThink), default_off);
    // The request's own value wins over the server's default.
    EXPECT_TRUE(ends_with(prompt_of(c, {{"chat_template_kwargs", {{"enable_thinking", false}}}}), kNoThink));
    EXPECT_FALSE(ends_with(prompt_of(c, {{"chat_template_kwargs", {{"enable_thinking", true}}}}), kNoThink));
    // Anthropic's thinking: disabled -> enable_thinking false, enabled -> true; absent -> the default.
    auto count = [&](const json& thinking) {
      json b = {{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
      if (!thinking.is_null()) b["thinking"] = thinking;
      const Reply r = post(c, "/v1/messages/count_tokens", b.dump());
      EXPECT_EQ(r.status, 200) << r.raw;
      return r.body.value("input_tokens", 0);
    };
    const int on = count({{"type", "enabled"}, {"budget_tokens", 1024}});
    const int off = count({{"type", "disabled"}});
    EXPECT_EQ(off, on + static_cast<int>(std::string("<think>\n\n</think>\n\n").size()));
    EXPECT_EQ(count(nullptr), default_off ? off : on);
  }
}

TEST(Thinking, ReasoningEffortReachesTheTemplate) {
  TestServerConfig cfg;
  cfg.chat_template = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/openai-gpt-oss-120b.jinja");
  cfg.max_seq_len = 4096, cfg.n_pages = 256;
  TestServer s(cfg);
  auto c = s.client();
  EXPECT_NE(prompt_of(c, json::object()).find("Reasoning: medium"), std::string::npos);  // the template's default
  EXPECT_NE(prompt_of(c, {{"reasoning_effort", "high"}}).find("Reasoning: high"), std::string::npos);
  EXPECT_NE(prompt_of(c, {{"reasoning_effort", "low"}, {"chat_template_kwargs", {{"reasoning_effort", "high"}}}})
                .find("Reasoning: high"),
            std::string::npos)
      << "chat_template_kwargs wins";
}

}  // namespace
}  // namespace ft
