// `ft template` as a user runs it: every 7th render case of shared/fixtures/chat/manifest.json comes out
// byte-identical with the clock pinned to 2026-11-30, a template's raise_exception exits 2 with the
// template's own message, and --model uses the GGUF's own ChatML template.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string shared(const std::string& rel) { return ::ft::testing::shared_dir() + "/" + rel; }

TEST(Template, RendersFixturesExactly) {
  auto manifest = nlohmann::json::parse(::ft::testing::read_file(shared("fixtures/chat/manifest.json")));
  int renders = 0, errors = 0, i = 0;
  for (const auto& c : manifest["cases"]) {
    if (i++ % 7 != 0) continue;
    const std::string args = "template --template " + quote(shared(c["template"].get<std::string>())) +
                             " --conversation " + quote(shared("fixtures/chat/" + c["conversation"].get<std::string>())) +
                             " --now 2026-11-30T00:00:00";
    Result r = run_ft(args);
    if (c["kind"] == "render") {
      ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
      EXPECT_EQ(r.out, ::ft::testing::read_file(shared("fixtures/chat/" + c["expected"].get<std::string>()))) << args;
      ++renders;
    } else {
      EXPECT_EQ(r.code, 2) << args;
      if (c.value("raised_by_template", false)) {
        EXPECT_NE(r.err.find(c["error_message"].get<std::string>()), std::string::npos) << r.err;
      }
      ++errors;
    }
  }
  EXPECT_GT(renders, 50);
  EXPECT_GT(errors, 5);
}

TEST(Template, ModelTemplateFromGguf) {
  const std::string conv = (std::filesystem::temp_directory_path() / "ft_template_conv.json").string();
  {
    std::ofstream out(conv);
    out << R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true})";
  }
  Result r = run_ft("template --model " + quote(shared("fixtures/gguf/qwen3/qwen3-bf16.gguf")) + " --conversation " + quote(conv));
  std::filesystem::remove(conv);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Template, BadArgumentsExit2) {
  EXPECT_EQ(run_ft("template --conversation /nonexistent.json --template /nonexistent.jinja").code, 2);
  EXPECT_EQ(run_ft("template --conversation x.json").code, 2);  // neither --model nor --template
}

}  // namespace
}  // namespace ft
