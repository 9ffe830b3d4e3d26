// Reasoning formats (server/reasoning.h): the reply that starts inside a block the prompt opened
// (prompt_opens_reasoning, decided from the real templates' generation prompts), Gemma 4's thought
// channel, every split of the stream equal to the whole, and a chat route end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reply_split_testing.h"
#include "server/reasoning.h"
#include "server_fixture.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ft::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string generation_prompt(const std::string& file, const ojson& kwargs = ojson::object()) {
  std::ifstream in(std::filesystem::path(ft::testing::shared_dir()) / "data" / "chat-templates" / file);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << "missing " << file;
  return ChatTemplate(ss.str(), "<s>", "</s>")
      .render(ojson::parse(R"([{"role": "user", "content": "Hi"}])"), nullptr, true, kwargs);
}

TEST(ReasoningFormats, PromptsThatOpenTheBlock) {
  const ojson on = {{"enable_thinking", true}}, off = {{"enable_thinking", false}};
  struct Case {
    const char* file;
    ojson kwargs;
    bool opens;
  };
  const Case cases[] = {
      {"Qwen3.5-4B.jinja", ojson::object(), true},                 // ends "<think>\n"
      {"Qwen3.5-4B.jinja", off, false},                            // "<think>\n\n</think>\n\n"
      {"Qwen-Qwen3-0.6B.jinja", ojson::object(), false},           // the model writes <think> itself
      {"deepseek-ai-DeepSeek-V3.1.jinja", on, true},               // "<think>"
      {"deepseek-ai-DeepSeek-V3.1.jinja", ojson::object(), false}, // "<think></think>"
      {"llama-cpp-deepseek-r1.jinja", ojson::object(), true},
      {"GLM-4.7-Flash.jinja", ojson::object(), true},
      {"GLM-4.7-Flash.jinja", off, false},                         // "</think>"
      {"GLM-4.6.jinja", ojson::object(), false},
      {"MiniMax-M2.jinja", ojson::object(), true},
      {"Kimi-K2-Thinking.jinja", ojson::object(), false},
  };
  for (const Case& c : cases) {
    const std::string prompt = generation_prompt(c.file, c.kwargs);
    EXPECT_EQ(prompt_opens_reasoning(prompt, ReasoningFormat::kThink), c.opens) << c.file << " " << c.kwargs.dump()
                                                                                << ":\n" << prompt;
  }
  // Gemma 4 opens its thought channel in the reply (thinking on) or closes an empty one in the prompt.
  for (const ojson& kw : {on, off})
    EXPECT_FALSE(prompt_opens_reasoning(generation_prompt("google-gemma-4-31B-it.jinja", kw), ReasoningFormat::kGemma4));
  EXPECT_TRUE(prompt_opens_reasoning("<|turn>model\n<|channel>thought\n", ReasoningFormat::kGemma4));
  EXPECT_FALSE(prompt_opens_reasoning("x<think>", ReasoningFormat::kNone));
  EXPECT_FALSE(prompt_opens_reasoning("", ReasoningFormat::kThink));
}

TEST(ReasoningFormats, ReplyStartingInsideTheBlock) {
  ReasoningSplit s = split_reasoning("Step 1.\n</think>\n\nThe answer.", ReasoningFormat::kThink, true);
  EXPECT_TRUE(s.thought);
  EXPECT_EQ(s.reasoning, "Step 1.");
  EXPECT_EQ(s.content, "The answer.");
  s = split_reasoning("\n<think>\nAgain.</think>Yes", ReasoningFormat::kThink, true);  // a repeated open tag: dropped
  EXPECT_EQ(s.reasoning, "Again.");
  EXPECT_EQ(s.content, "Yes");
  s = split_reasoning("cut off by max_tokens <thi", ReasoningFormat::kThink, true);  // unterminated: all reasoning
  EXPECT_EQ(s.reasoning, "cut off by max_tokens <thi");
  EXPECT_EQ(s.content, "");
  s = split_reasoning("", ReasoningFormat::kThink, true);
  EXPECT_TRUE(s.thought);
  EXPECT_EQ(s.reasoning, "");
  s = split_reasoning("No block here.", ReasoningFormat::kThink, false);  // outside: all content, as written
  EXPECT_FALSE(s.thought);
  EXPECT_EQ(s.content, "No block here.");
  // Gemma 4's thought channel.
  s = split_reasoning("<|channel>thought\nPlan.\n<channel|>Done.", ReasoningFormat::kGemma4);
  EXPECT_TRUE(s.thought);
  EXPECT_EQ(s.reasoning, "Plan.");
  EXPECT_EQ(s.content, "Done.");
  s = split_reasoning("<think>x</think>y", ReasoningFormat::kGemma4);  // another format's tags are text
  EXPECT_FALSE(s.thought);
  EXPECT_EQ(s.content, "<think>x</think>y");
}

TEST(ReasoningFormats, StreamingAtEverySplitEqualsWhole) {
  struct Case {
    std::string text;
    ReasoningFormat format;
    bool open;
    std::vector<std::string> hidden;  // never in the streamed content
  };
  const Case cases[] = {
      {"Step 1. </thi nk> Step 2.\n</think>\n\nDone </think> here.\n", ReasoningFormat::kThink, true, {"Step"}},
      {"  <think>\nHm.\n</think>\n\nAnswer.", ReasoningFormat::kThink, false, {"<think", "</think", "Hm"}},
      {"<think>\nAgain</think>x", ReasoningFormat::kThink, true, {"<think", "</think", "Again"}},
      {"open and never closed <", ReasoningFormat::kThink, true, {"open"}},
      {"Plain <think> reply. ", ReasoningFormat::kThink, false, {}},
      {"<|channel>thought\nPlan <channel| >.\n<channel|>\nDone.", ReasoningFormat::kGemma4, false, {"<|channel", "<channel|", "Plan"}},
  };
  for (const Case& c : cases) {
    ReplyFormat f;
    f.reasoning = c.format;
    f.reasoning_open = c.open;
    const ChatReply whole = testing::expect_streams_like_whole(c.text, f, c.hidden, 3);
    const ReasoningSplit direct = split_reasoning(c.text, c.format, c.open);
    EXPECT_EQ(whole.thought, direct.thought) << c.text;
    EXPECT_EQ(whole.reasoning, direct.reasoning) << c.text;
    std::string content = direct.content;
    trim_space(content);  // a split reply's content is trimmed
    EXPECT_EQ(whole.content, content) << c.text;
  }
}

TEST(ReasoningFormats, ChatRouteStartsInTheBlockThePromptOpened) {
  // A template whose generation prompt ends inside <think> (as Qwen3.5's): the reply's text up to
  // </think> is reasoning_content, whole and streamed alike.
  const Vocab& v = ft::testing::demo_vocab();
  const std::string reply = "Plan it.\n</think>\n\nThe answer.";
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  ASSERT_EQ(v.decode(script), reply);
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  ft::testing::TestServerConfig cfg;
  cfg.chat_template =
      "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{%- endfor %}"
      "{%- if add_generation_prompt %}<|im_start|>assistant\n<think>\n{%- endif %}";
  cfg.split_reasoning = true;
  const std::string body = R"({"messages":[{"role":"user","content":"Q?"}],"temperature":0,"max_tokens":60)";
  const auto r = ft::testing::scripted_post(cfg, script, "/v1/chat/completions", body + "}");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["reasoning_content"], "Plan it.") << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "The answer.") << r.raw;
  const auto st = ft::testing::scripted_post(cfg, script, "/v1/chat/completions", body + R"(,"stream":true})");
  std::string reasoning, content;
  for (const std::string& data : ft::testing::sse_events(st.raw)) {
    if (data == "[DONE]") break;
    const nlohmann::json j = nlohmann::json::parse(data);
    const nlohmann::json& d = j["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(reasoning, "Plan it.") << st.raw;
  EXPECT_EQ(content, "The answer.") << st.raw;
  // Without splitting, the reply is the text as written.
  cfg.split_reasoning = false;
  const auto plain = ft::testing::scripted_post(cfg, script, "/v1/chat/completions", body + "}");
  EXPECT_EQ(plain.body["choices"][0]["message"]["content"], reply);
}

}  // namespace
}  // namespace ft::server
