// Tool-call arguments sent as JSON text (OpenAI's wire form) reach the chat template as the JSON
// value, so the prompt holds what the model was trained on: checked against the renders Python jinja2
// made of the same conversations with object arguments (shared/fixtures/chat, README.md there), and
// through /apply-template on a template that iterates the arguments (Qwen3-Coder's).
#include <gtest/gtest.h>

#include <map>
#include <memory>

#include "server/server_fixture.h"
#include "test_util.h"

namespace ft {
namespace {

using nlohmann::ordered_json;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;

std::string chat_dir() { return ft::testing::shared_dir() + "/fixtures/chat/"; }

/** `conversation` with every tool call's arguments as compact JSON text, as the OpenAI SDK sends them. */
ordered_json with_text_arguments(ordered_json conversation) {
  for (ordered_json& m : conversation["messages"])
    if (m.contains("tool_calls"))
      for (ordered_json& c : m["tool_calls"]) c["function"]["arguments"] = c["function"]["arguments"].dump();
  return conversation;
}

TEST(ToolArguments, TextArgumentsRenderAsJinja2RendersTheirObjects) {
  const std::string manifest = ft::testing::read_file(chat_dir() + "manifest.json");
  ASSERT_FALSE(manifest.empty()) << "no manifest under " << chat_dir();
  jinja::RenderOptions clock;
  clock.now = parse_clock("2026-11-30");  // the fixtures' pinned date
  std::map<std::string, std::unique_ptr<ChatTemplate>> parsed;
  int compared = 0;
  const ordered_json cases = ordered_json::parse(manifest)["cases"];
  for (const auto& c : cases) {
    const std::string conv = c["conversation"].get<std::string>();
    if (c["kind"] != "render" || (conv != "conversations/tool_call_object_args.json" &&
                                  conv != "conversations/parallel_tool_calls.json"))
      continue;
    const std::string name = c["template_stem"].get<std::string>() + " x " + conv;
    auto& t = parsed[c["template"].get<std::string>()];
    if (!t) t = std::make_unique<ChatTemplate>(ft::testing::read_file(ft::testing::shared_dir() + "/" + c["template"].get<std::string>()));
    // A template jinja2 rendered with object arguments is given objects (as `ft serve` decides it).
    ASSERT_TRUE(server::template_takes_object_arguments(*t)) << name;
    ordered_json wire = with_text_arguments(ordered_json::parse(ft::testing::read_file(chat_dir() + conv)));
    wire["messages"] = server::with_object_tool_arguments(wire["messages"]);
    try {
      EXPECT_EQ(t->render_conversation(wire, clock), ft::testing::read_file(chat_dir() + c["expected"].get<std::string>()))
          << name;
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": " << e.what();
    }
    ++compared;
  }
  EXPECT_EQ(compared, 78) << "the fixtures' object-argument renders";
}

TEST(ToolArguments, TemplatesThatIterateTheArgumentsRenderTextArguments) {
  // Qwen3-Coder's template walks arguments.items(): JSON text used to fail the render (a 400).
  TestServerConfig cfg;
  cfg.chat_template = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/Qwen3-Coder.jinja");
  ASSERT_FALSE(cfg.chat_template.empty());
  TestServer s(cfg);
  auto c = s.client();
  const std::string call = R"({"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": )";
  const std::string body = R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [)" + call + R"("{\"city\": \"Paris\", \"days\": 2}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]})";
  const Reply r = post(c, "/apply-template", body);
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::string prompt = r.body["prompt"];
  EXPECT_NE(prompt.find("<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>"),
            std::string::npos) << prompt;
  // Text that is not JSON stays text (and this template cannot iterate it: the render's 400).
  const std::string bad = R"({"messages": [{"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": null, "tool_calls": [)" + call + R"("city=Paris"}}]}]})";
  const Reply e = post(c, "/apply-template", bad);
  EXPECT_EQ(e.status, 400) << e.raw;
  EXPECT_EQ(e.body["error"]["param"], "messages") << e.raw;
}

}  // namespace
}  // namespace ft
