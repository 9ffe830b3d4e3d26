// Every (template, conversation) case of shared/fixtures/chat/manifest.json, rendered by Python jinja2
// 3.1.2 in Hugging Face's environment (see that folder's README.md): renders must match byte for byte,
// errors must fail (with the template's own message when it called raise_exception).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/error.h"

namespace ft {
namespace {

using nlohmann::ordered_json;

std::string chat_dir() { return ft::testing::shared_dir() + "/fixtures/chat/"; }

// The clock the fixtures were rendered with: datetime(2026, 11, 30).
jinja::RenderOptions pinned_clock() {
  jinja::RenderOptions o;
  o.now = parse_clock("2026-11-30");
  return o;
}

// `.error` files escape backslash, newline and carriage return.
std::string unescape_error_line(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char c = s[++i];
      out += c == 'n' ? '\n' : c == 'r' ? '\r' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct Case {
  std::string name, template_path, conversation_path, expected_path, kind;
  bool raised_by_template = false;
  std::string error_message;
};

std::vector<Case> load_cases() {
  std::string text = ft::testing::read_file(chat_dir() + "manifest.json");
  if (text.empty()) return {};
  ordered_json m = ordered_json::parse(text);
  std::vector<Case> cases;
  for (const auto& c : m["cases"]) {
    Case k;
    k.template_path = ft::testing::shared_dir() + "/" + c["template"].get<std::string>();
    k.conversation_path = chat_dir() + c["conversation"].get<std::string>();
    k.expected_path = chat_dir() + c["expected"].get<std::string>();
    k.kind = c["kind"].get<std::string>();
    k.name = c["template_stem"].get<std::string>() + " x " + c["conversation"].get<std::string>();
    if (k.kind == "error") {
      k.raised_by_template = c["raised_by_template"].get<bool>();
      k.error_message = c["error_message"].get<std::string>();
    }
    cases.push_back(std::move(k));
  }
  return cases;
}

TEST(ChatFixtures, ManifestIsComplete) {
  std::vector<Case> cases = load_cases();
  ASSERT_FALSE(cases.empty()) << "no manifest at " << chat_dir();
  ordered_json m = ordered_json::parse(ft::testing::read_file(chat_dir() + "manifest.json"));
  EXPECT_EQ(cases.size(), m["counts"]["cases"].get<size_t>());
  EXPECT_EQ(cases.size(), 928u);
}

TEST(ChatFixtures, EveryCaseRendersLikeJinja2) {
  std::vector<Case> cases = load_cases();
  ASSERT_FALSE(cases.empty());
  std::map<std::string, std::unique_ptr<ChatTemplate>> parsed;  // each template parsed once
  size_t renders = 0, errors = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ordered_json conv = ordered_json::parse(ft::testing::read_file(c.conversation_path));
    auto& tmpl = parsed[c.template_path];
    if (!tmpl) {
      std::string src = ft::testing::read_file(c.template_path);
      ASSERT_FALSE(src.empty()) << c.template_path;
      ASSERT_NO_THROW(tmpl = std::make_unique<ChatTemplate>(src)) << c.template_path;
    }
    if (c.kind == "render") {
      std::string expected = ft::testing::read_file(c.expected_path);
      try {
        std::string got = tmpl->render_conversation(conv, pinned_clock());
        EXPECT_EQ(got, expected) << "render differs: " << c.name;
        renders += got == expected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "render failed: " << c.name << ": " << e.what();
      }
    } else {
      try {
        tmpl->render_conversation(conv, pinned_clock());
        ADD_FAILURE() << "expected an error (" << c.error_message << "): " << c.name;
      } catch (const jinja::TemplateError& e) {
        ++errors;
        if (c.raised_by_template) {
          EXPECT_TRUE(e.raised_by_template()) << c.name << ": " << e.what();
          EXPECT_EQ(std::string(e.what()), c.error_message) << c.name;
          // The .error file carries the same message, escaped.
          std::string line = ft::testing::read_file(c.expected_path);
          ASSERT_FALSE(line.empty());
          EXPECT_EQ(unescape_error_line(line.substr(0, line.size() - 1)), "TemplateError: " + c.error_message);
        } else {
          EXPECT_FALSE(e.raised_by_template()) << c.name << ": " << e.what();
        }
      }
    }
  }
  EXPECT_EQ(renders, 767u);
  EXPECT_EQ(errors, 161u);
}

}  // namespace
}  // namespace ft
