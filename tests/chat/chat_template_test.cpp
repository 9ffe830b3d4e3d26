// ChatTemplate: rendering messages/tools/flags, template sources (tokenizer_config.json string or
// named list, chat_template.jinja), the ChatML fallback, clock pinning.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ft {
namespace {

using nlohmann::ordered_json;

TEST(ChatTemplate, ChatMLFallbackRendersStringAndPartContent) {
  ChatTemplate t(kChatMLTemplate, "", "");
  ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi "}, {"type": "image"}, {"type": "text", "text": "there"}]},
    {"role": "assistant", "content": "Hello!"}])");
  EXPECT_EQ(t.render(messages, nullptr, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t.render(ordered_json::array(), nullptr, false), "");
}

TEST(ChatTemplate, VariablesToolsAndExtraKwargs) {
  ChatTemplate t(
      "{{ bos_token }}{% if tools is none %}no tools{% else %}{{ tools|map(attribute='function.name')|join(',') }}{% endif %}"
      "|{{ documents }}|{{ enable_thinking }}|{{ add_generation_prompt }}|{% for m in messages %}{{ m.role }}:{{ m.content }};"
      "{% for tc in m.tool_calls or [] %}{{ tc.function.arguments|tojson }}{% endfor %}{% endfor %}{{ eos_token }}",
      "<s>", "</s>");
  ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": "weather?"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
      "function": {"name": "get", "arguments": {"z": 1, "a": "é"}}}]}])");
  ordered_json tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get"}},
                                               {"type": "function", "function": {"name": "put"}}])");
  EXPECT_EQ(t.render(messages, tools, true, {{"enable_thinking", false}}),
            "<s>get,put|None|False|True|user:weather?;assistant:None;{\"z\": 1, \"a\": \"é\"}</s>");
  EXPECT_EQ(t.render(messages, nullptr, false, {{"bos_token", "[BOS]"}}),
            "[BOS]no tools|None||False|user:weather?;assistant:None;{\"z\": 1, \"a\": \"é\"}</s>");
}

TEST(ChatTemplate, MissingSpecialTokensAreUndefined) {
  // transformers passes only the special tokens a tokenizer has; Qwen models have no bos_token.
  ChatTemplate t("[{{ bos_token }}]{{ bos_token is defined }}{{ eos_token is defined }}", std::nullopt, "</s>");
  EXPECT_EQ(t.render(ordered_json::array()), "[]FalseTrue");
}

TEST(ChatTemplate, RenderConversationSplitsTopLevelKeys) {
  ChatTemplate t("{{ bos_token }}{{ messages|length }}{{ add_generation_prompt }}{{ tools is none }}{{ reasoning_effort }}", "x", "y");
  ordered_json conv = ordered_json::parse(R"({"messages": [{"role": "user", "content": "a"}], "bos_token": "<b>",
                                              "reasoning_effort": "high"})");
  EXPECT_EQ(t.render_conversation(conv), "<b>1FalseTruehigh");
  EXPECT_THROW(t.render_conversation(ordered_json::parse(R"({"msgs": []})")), ft::Error);
}

TEST(ChatTemplate, RaiseExceptionGivesTheTemplatesMessage) {
  ChatTemplate t("{% if messages[0].role != 'user' %}{{ raise_exception('First message must be from the user') }}{% endif %}ok",
                 "", "");
  EXPECT_EQ(t.render(ordered_json::parse(R"([{"role": "user", "content": ""}])")), "ok");
  try {
    t.render(ordered_json::parse(R"([{"role": "system", "content": ""}])"));
    FAIL() << "no error";
  } catch (const ft::Error& e) {
    EXPECT_EQ(std::string(e.what()), "First message must be from the user");
  }
}

TEST(ChatTemplate, BadTemplateFailsAtConstructionNamingTheLine) {
  try {
    ChatTemplate t("{% for m in messages %}\n{{ m.content }}\n{% endfor %}\n{% bogus %}", "", "");
    FAIL() << "no error";
  } catch (const ft::Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 4"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, PinnedClock) {
  ChatTemplate t("{{ strftime_now('%d %B %Y') }}", "", "");
  jinja::RenderOptions o;
  o.now = parse_clock("2026-11-30");
  EXPECT_EQ(t.render(ordered_json::array(), nullptr, false, ordered_json::object(), o), "30 November 2026");
  std::string year = ChatTemplate("{{ strftime_now('%Y') }}", "", "").render(ordered_json::array());  // live clock
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2025);
  EXPECT_THROW(parse_clock("30/11/2026"), ft::Error);
}

TEST(ChatTemplate, TemplateFromTokenizerConfig) {
  EXPECT_EQ(chat_template_from_tokenizer_config(nlohmann::json::parse(R"({"chat_template": "{{ x }}"})")), "{{ x }}");
  auto listed = nlohmann::json::parse(R"({"chat_template": [{"name": "tool_use", "template": "T"},
                                                            {"name": "default", "template": "D"}]})");
  EXPECT_EQ(chat_template_from_tokenizer_config(listed), "D");
  EXPECT_EQ(chat_template_from_tokenizer_config(listed, "tool_use"), "T");
  EXPECT_EQ(chat_template_from_tokenizer_config(listed, "rag"), "D");
  EXPECT_EQ(chat_template_from_tokenizer_config(nlohmann::json::parse(R"({"bos_token": "<s>"})")), std::nullopt);
  EXPECT_THROW(chat_template_from_tokenizer_config(nlohmann::json::parse(R"({"chat_template": 5})")), ft::Error);
  EXPECT_EQ(special_token_text(nlohmann::json::parse(R"({"content": "<s>", "lstrip": false})")), "<s>");
  EXPECT_EQ(special_token_text(nlohmann::json("</s>")), "</s>");
}

TEST(ChatTemplate, FindChatTemplatePrefersJinjaFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("ft_chat_template_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_EQ(find_chat_template(dir.string()), std::nullopt);
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "from config"})";
  EXPECT_EQ(find_chat_template(dir.string()), "from config");
  std::ofstream(dir / "chat_template.jinja") << "from jinja file";
  EXPECT_EQ(find_chat_template(dir.string()), "from jinja file");
  fs::remove_all(dir);
}

TEST(ChatTemplate, RealTemplateRendersTwiceIdentically) {
  // A parsed template is reusable: rendering is a pure function of the inputs.
  std::string src = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen3-0.6B.jinja");
  ASSERT_FALSE(src.empty());
  ChatTemplate t(src, "", "<|im_end|>");
  ordered_json messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  std::string a = t.render(messages, nullptr, true), b = t.render(messages, nullptr, true);
  EXPECT_EQ(a, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(a, b);
  EXPECT_EQ(t.render(messages, nullptr, true, {{"enable_thinking", false}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

}  // namespace
}  // namespace ft
