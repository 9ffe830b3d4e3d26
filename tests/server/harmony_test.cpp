// gpt-oss's harmony format end to end through the server with the released chat template
// ($FT_SHARED_DIR/data/chat-templates/openai-gpt-oss-120b.jinja): a scripted reply that thinks in the
// analysis channel and calls a tool in the commentary channel comes back as reasoning_content and
// tool_calls; sending that message back with the tool's result renders the turn as harmony does
// (the analysis kept before the call, the arguments as JSON, not as a quoted string); the final
// channel becomes the content of the next reply.
#include <fstream>
#include <sstream>

#include "server_fixture.h"
#include "test_util.h"

namespace ft::testing {
namespace {

std::string gpt_oss_template() {
  std::ifstream f(shared_dir() + "/data/chat-templates/openai-gpt-oss-120b.jinja");
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = demo_vocab();
  std::vector<int32_t> s = v.encode(reply, EncodeOptions{false, true});
  s.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return s;
}

TEST(Harmony, ToolCallRoundTripWithTheReleasedTemplate) {
  TestServerConfig cfg;
  cfg.chat_template = gpt_oss_template();
  ASSERT_FALSE(cfg.chat_template.empty()) << "missing the gpt-oss template under " << shared_dir();
  cfg.max_seq_len = 4096;
  cfg.n_pages = 512;
  cfg.max_prefill_tokens = 4096;
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","description":"Weather of a city",)"
      R"("parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])";
  const std::string user = R"({"role":"user","content":"Weather in Paris?"})";

  // Turn 1: analysis, then a call in the commentary channel.
  TestServer s(cfg);
  s.model().script = script_of(
      "<|channel|>analysis<|message|>Use the weather tool.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}");
  auto c = s.client();
  const Reply r1 = post(c, "/v1/chat/completions", "{\"messages\":[" + user + "],\"temperature\":0," + tools + "}");
  ASSERT_EQ(r1.status, 200) << r1.raw;
  const auto& ch = r1.body["choices"][0];
  EXPECT_EQ(ch["finish_reason"], "tool_calls");
  const auto& msg = ch["message"];
  EXPECT_EQ(msg["reasoning_content"], "Use the weather tool.");
  ASSERT_EQ(msg["tool_calls"].size(), 1u) << r1.raw;
  EXPECT_EQ(msg["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(nlohmann::json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            nlohmann::json::parse(R"({"city": "Paris"})"));

  // Turn 2 as an OpenAI client sends it: the reply's message as it came, then the tool's result.
  const std::string call_id = msg["tool_calls"][0]["id"];
  const std::string turn2 = "{\"messages\":[" + user + "," + msg.dump() +
                            R"(,{"role":"tool","tool_call_id":")" + call_id +
                            R"(","content":"20 C, sunny"}],"temperature":0,)" + tools;
  const Reply t = post(c, "/apply-template", turn2 + "}");
  ASSERT_EQ(t.status, 200) << t.raw;
  const std::string prompt = t.body["prompt"];
  const std::string expected_tail =
      "<|start|>user<|message|>Weather in Paris?<|end|>"
      "<|start|>assistant<|channel|>analysis<|message|>Use the weather tool.<|end|>"
      "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>"
      "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>\"20 C, sunny\"<|end|>"
      "<|start|>assistant";
  ASSERT_GE(prompt.size(), expected_tail.size());
  EXPECT_EQ(prompt.substr(prompt.size() - expected_tail.size()), expected_tail) << prompt;
  EXPECT_NE(prompt.find("type get_weather = (_: {\ncity?: string,\n}) => any;"), std::string::npos) << prompt;

  // The final channel is the content of the reply to that turn.
  s.model().script = script_of("<|channel|>final<|message|>It is 20 C and sunny in Paris.");
  const Reply r2 = post(c, "/v1/chat/completions", turn2 + "}");
  ASSERT_EQ(r2.status, 200) << r2.raw;
  EXPECT_EQ(r2.body["choices"][0]["message"]["content"], "It is 20 C and sunny in Paris.");
  EXPECT_EQ(r2.body["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(r2.body["choices"][0]["message"].contains("tool_calls"));
}

TEST(Harmony, ReasoningEffortReachesTheTemplate) {
  // OpenAI's top-level reasoning_effort is gpt-oss's "Reasoning: ..." line; chat_template_kwargs wins.
  TestServerConfig cfg;
  cfg.chat_template = gpt_oss_template();
  ASSERT_FALSE(cfg.chat_template.empty()) << "missing the gpt-oss template under " << shared_dir();
  cfg.max_seq_len = 4096;
  TestServer s(cfg);
  auto c = s.client();
  const std::string msgs = R"({"messages":[{"role":"user","content":"Hi"}])";  // the body without its "}"
  auto prompt_of = [&](const std::string& extra) {
    const Reply r = post(c, "/apply-template", msgs + extra + "}");
    EXPECT_EQ(r.status, 200) << r.raw;
    return r.body.value("prompt", std::string());
  };
  EXPECT_NE(prompt_of("").find("Reasoning: medium"), std::string::npos);
  EXPECT_NE(prompt_of(R"(,"reasoning_effort":"high")").find("Reasoning: high"), std::string::npos);
  EXPECT_NE(prompt_of(R"(,"reasoning_effort":"high","chat_template_kwargs":{"reasoning_effort":"low"})")
                .find("Reasoning: low"),
            std::string::npos);
  const Reply bad = post(c, "/v1/chat/completions", msgs + R"(,"reasoning_effort":"extreme"})");
  EXPECT_EQ(bad.status, 400) << bad.raw;
  EXPECT_EQ(bad.body["error"]["param"], "reasoning_effort") << bad.raw;
}

}  // namespace
}  // namespace ft::testing
