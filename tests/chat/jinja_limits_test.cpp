// The template engine's run-time limits (RenderOptions::max_steps / max_bytes, pystr's kMaxStrBytes):
// templates that loop without end or grow text without bound, the inputs fuzz/chat_template_fuzz.cpp
// ran into (before the limits each ran for minutes or exhausted memory), are refused with a
// TemplateError; real templates render as before.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

namespace ft::jinja {
namespace {

RenderOptions limits(int64_t steps, size_t bytes) {
  RenderOptions o;
  o.max_steps = steps;
  o.max_bytes = bytes;
  return o;
}

// The error rendering `src` raises under `o`, and how long it took to refuse.
std::string refusal(const std::string& src, const RenderOptions& o = {}) {
  const Value vars = from_json(nlohmann::ordered_json::object());
  const auto t0 = std::chrono::steady_clock::now();
  try {
    Template(src).render(vars.dict_ref(), o);
  } catch (const TemplateError& e) {
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 120.0) << src;
    return e.what();
  }
  ADD_FAILURE() << "rendered: " << src;
  return "";
}

TEST(JinjaLimits, LoopWithoutEndStopsAtTheStepLimit) {
  const std::string nested = "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}";
  EXPECT_NE(refusal(nested, limits(100000, size_t{64} << 20)).find("more than 100000 steps"), std::string::npos);
  EXPECT_NE(refusal(nested).find("steps"), std::string::npos);  // the default limit stops it too
}

TEST(JinjaLimits, DoublingStringStopsAtTheByteLimit) {
  const std::string doubling =
      "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}";
  EXPECT_NE(refusal(doubling, limits(1000000, 1 << 20)).find("more than 1048576 bytes"), std::string::npos);
  EXPECT_NE(refusal(doubling).find("bytes"), std::string::npos);
}

TEST(JinjaLimits, SelfNestedListIsRefusedBeforeItIsPrinted) {
  // [l, l] forty times is 2^40 leaves in 40 steps: printing, tojson or == would never end.
  const std::string nest = "{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = [ns.l, ns.l] %}"
                           "{% endfor %}";
  for (const char* use : {"{{ ns.l }}", "{{ ns.l|tojson }}", "{{ ns.l == ns.l }}", "{{ ns.l|string|length }}"})
    EXPECT_NE(refusal(nest + use).find("bytes"), std::string::npos) << use;
}

// A container that holds itself (here through a namespace attribute, the shape `make fuzz` found:
// `{% set ns.s = ns, s %}` then `{{ ns.s }}` recursed until the stack overflowed) prints as Python's
// reprlib does, and tojson or == of one refuses instead of recursing. Expected texts from jinja2 3.1.
TEST(JinjaLimits, ContainersHoldingThemselvesPrintAsPythonDoes) {
  const Value vars = from_json(nlohmann::ordered_json::object());
  auto render = [&](const std::string& src) { return Template(src).render(vars.dict_ref()); };
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% set ns.s = ns, 'x' %}{{ ns.s }}|{{ ns }}"),
            "(<Namespace {'n': 0, 's': (...)}>, 'x')|<Namespace {'n': 0, 's': (<Namespace {...}>, 'x')}>");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.s = [ns] %}{{ ns }}|{{ ns.s }}"),
            "<Namespace {'a': 1, 's': [<Namespace {...}>]}>|[<Namespace {'a': 1, 's': [...]}>]");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.d = {'k': ns} %}{{ ns.d }}"),
            "{'k': <Namespace {'a': 1, 'd': {...}}>}");
  EXPECT_EQ(render("{% set ns = namespace(a=1) %}{% set ns.l = [ns] %}{{ ns.l == ns.l }}"), "True");  // identity
  EXPECT_NE(refusal("{% set ns = namespace(a=1) %}{% set ns.s = (ns, 1) %}{{ ns.s|tojson }}").find("Namespace"),
            std::string::npos);
}

TEST(JinjaLimits, HugeWidthsAreRefused) {
  for (const char* src : {"{{ 'a'|center(2000000000) }}", "{{ 'ab'|indent(2000000000) }}",
                          "{{ 'a'.ljust(2000000000) }}", "{{ '\\t'.expandtabs(2000000000) }}",
                          "{{ [1]|batch(2000000000, 0)|list }}",
                          "{{ ('a' * 60000000)|replace('a', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaa') }}"})
    EXPECT_NE(refusal(src).find("too large"), std::string::npos) << src;
}

TEST(JinjaLimits, OrdinaryTemplatesRenderUnderTheDefaults) {
  const Value vars = from_json(nlohmann::ordered_json::parse(R"({"xs": [1, 2, 3]})"));
  EXPECT_EQ(Template("{% for x in xs %}{{ x * 2 }}{{ 'ab' * 2 }}{% endfor %}{{ 'x'|center(5) }}").render(vars.dict_ref()),
            "2abab4abab6abab  x  ");
  EXPECT_EQ(Template("{{ 'ab' * 3 }}{{ ('a' * 5)|replace('a', 'bc') }}").render(vars.dict_ref()), "abababbcbcbcbcbc");
}

}  // namespace
}  // namespace ft::jinja
