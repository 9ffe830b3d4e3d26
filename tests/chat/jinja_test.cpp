// Unit tests of the Jinja interpreter. Every expected string below is what Python jinja2 3.1 renders in
// Hugging Face's environment (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/template.h"

namespace ft::jinja {
namespace {

std::string R(const std::string& src, const std::string& vars_json = "{}") {
  Value vars = from_json(nlohmann::ordered_json::parse(vars_json));
  RenderOptions o;
  o.now = parse_clock("2026-11-30T09:05:07");
  return Template(src).render(vars.dict_ref(), o);
}

// The error rendering (or parsing) src raises.
TemplateError E(const std::string& src, const std::string& vars_json = "{}") {
  try {
    R(src, vars_json);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << src;
  return TemplateError(ErrorKind::kValueError, "none");
}

TEST(Jinja, ArithmeticAndNumberPrinting) {
  EXPECT_EQ(R("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }}"), "7 9 3 -4 2 -2");
  EXPECT_EQ(R("{{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }}"), "3.5 2.0 1024 0.5 4 64");
  EXPECT_EQ(R("{{ 1.0 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 0.0001 }} {{ -0.0 }}"),
            "1.0 1e+20 1e+16 1000000000000000.0 0.30000000000000004 1e-05 0.0001 -0.0");
  EXPECT_EQ(R("{{ 3.0 // 2 }} {{ -7.5 // 2 }} {{ 7.5 % -2 }} {{ true + 1 }} {{ 1_000 }} {{ 0x10 }}"),
            "1.0 -4.0 -0.5 2 1000 16");
  EXPECT_EQ(R("{{ 'ab' * 3 }} {{ 2 * 'x' }} {{ [1] * 2 }} {{ 'a' ~ 1 ~ none ~ 1.5 }} {{ 'a' ~ (1 + 2) }}"),
            "ababab xx [1, 1] a1None1.5 a3");
  EXPECT_EQ(E("{{ 'a' ~ 1 + 2 }}").kind(), ErrorKind::kTypeError);  // ~ binds tighter than +: ('a' ~ 1) + 2
  EXPECT_EQ(E("{{ 1 / 0 }}").kind(), ErrorKind::kZeroDivisionError);
  EXPECT_EQ(E("{{ 'a' + 1 }}").message(), "can only concatenate str (not \"int\") to str");
  EXPECT_EQ(E("{{ 1 + 'a' }}").message(), "unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(E("{{ [1] + 'a' }}").message(), "can only concatenate list (not \"str\") to list");
  EXPECT_EQ(E("{{ 1 < 'a' }}").message(), "'<' not supported between instances of 'int' and 'str'");
}

TEST(Jinja, ComparisonsAndMembership) {
  EXPECT_EQ(R("{{ 1 == 1.0 }}{{ [1] == (1,) }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ [1, 2] < [1, 3] }}{{ 'a' < 'b' }}"),
            "TrueFalseTrueFalseTrueTrue");
  EXPECT_EQ(R("{{ 'a' in 'abc' }}{{ 'a' not in ['a'] }}{{ 'k' in {'k': 1} }}{{ 2 in (1, 2) }}{{ x in [1] }}"),
            "TrueFalseTrueTrueFalse");
  EXPECT_EQ(R("{{ not 1 == 2 }}{{ 0 or none }}{{ [] and 1 }}{{ 'a' and 'b' }}{{ x or 'y' }}"), "TrueNone[]by");
  EXPECT_EQ(E("{{ 'x' in none }}").message(), "argument of type 'NoneType' is not iterable");
  EXPECT_EQ(E("{{ 1 in 'abc' }}").kind(), ErrorKind::kTypeError);
}

TEST(Jinja, LiteralsPrintLikePython) {
  EXPECT_EQ(R("{{ none }} {{ true }} {{ False }} {{ [1, 'a', none, 1.5, (1,), {'a': 'b'}] }} {{ (1, 2) }} {{ () }}"),
            "None True False [1, 'a', None, 1.5, (1,), {'a': 'b'}] (1, 2) ()");
  EXPECT_EQ(R(R"({{ ["it's", 'q"', 'tab\there', 'nl\n', 'é', '\x00'] }})"),
            R"(["it's", 'q"', 'tab\there', 'nl\n', 'é', '\x00'])");
  EXPECT_EQ(R(R"({{ 'a' 'b' }}{{ '\101\x41\u0041' }}{{ '\d' }}{{ "it's" }})"), "abAAA\\dit's");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2} }}{{ {'a': 1, 'a': 2} }}"), "{'b': 1, 'a': 2}{'a': 2}");
}

TEST(Jinja, AttributesSubscriptsAndSlices) {
  const char* vars = R"({"m": {"role": "user", "content": "héllo", "items": [1, 2, 3]}})";
  EXPECT_EQ(R("{{ m.role }}{{ m['role'] }}{{ m.content[1] }}{{ m.content[1:3] }}{{ m.content[::-1] }}", vars),
            "useruseréélolléh");
  // Dot access prefers the dict method; subscript prefers the key.
  EXPECT_EQ(R("{{ m['items'] }}{{ m.items is callable }}{{ m['items'][-1] }}{{ m['items'][::2] }}", vars),
            "[1, 2, 3]True3[1, 3]");
  EXPECT_EQ(R("{{ m.missing }}|{{ m['items'][9] }}|{{ none.x }}|{{ 'abc'.foo }}|{{ [1, 2][1:'a'] }}", vars), "||||");
  EXPECT_EQ(R("{{ [[1, 2]][0].1 }}{{ {'a': {'b': 1}}.a.b }}"), "21");
}

TEST(Jinja, LoopVariables) {
  EXPECT_EQ(R("{% for x in [1, 2, 3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{{ loop.first }}{{ loop.last }}"
              "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.index0 }}{{ loop.previtem }}{{ loop.nextitem }};"
              "{% else %}E{% endfor %}"),
            "1/2TrueFalse2103;2/2FalseTrue1012;");
  EXPECT_EQ(R("{% for x in [] %}a{% else %}E{% endfor %}|{% for x in x %}a{% else %}U{% endfor %}"), "E|U");
  EXPECT_EQ(R("{% for x in [1, 2, 3] %}{{ loop.cycle('a', 'b') }}{{ loop.depth }}{{ loop.changed(x > 1) }}{% endfor %}"),
            "a1Trueb1Truea1False");
  EXPECT_EQ(R("{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}{% for k, v in {'x': 1}.items() %}{{ k }}{{ v }}{% endfor %}"),
            "1234x1");
  EXPECT_EQ(E("{% for a, b in [[1, 2, 3]] %}{% endfor %}").message(), "too many values to unpack (expected 2)");
  EXPECT_EQ(R("{% for x in [1, 2, 3, 4] %}{% if x == 1 %}{% continue %}{% endif %}{{ x }}{% if x == 3 %}{% break %}{% endif %}{% endfor %}"),
            "23");
  EXPECT_EQ(R("{% for i in range(2) %}{% for j in range(2) %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}"),
            "121|122|");
  EXPECT_EQ(R("{% for c in 'hé' %}[{{ c }}]{% endfor %}{% for k in {'a': 1, 'b': 2} %}{{ k }}{% endfor %}"), "[h][é]ab");
  EXPECT_EQ(R("{% for x in [[1, [2]], 3] recursive %}<{% if x is iterable %}{{ loop(x) }}{% else %}{{ x }}@{{ loop.depth }}{% endif %}>{% endfor %}"),
            "<<1@2><<2@3>>><3@1>");
  EXPECT_EQ(E("{% for x in 5 %}{% endfor %}").message(), "'int' object is not iterable");
}

TEST(Jinja, ScopingFollowsJinja2) {
  // for bodies get a fresh scope per iteration; if shares the enclosing scope.
  EXPECT_EQ(R("{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = i + 10 %}{{ x }},{% endfor %}|{{ x }}"),
            "010,011,012,|0");
  EXPECT_EQ(R("{% set x = 0 %}{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");
  EXPECT_EQ(R("{% set i = 'outer' %}{% for i in [1, 2] %}{{ i }}{% endfor %}{{ i }}"), "12outer");
  EXPECT_EQ(R("{% set ns = namespace(n=0, items=[]) %}{% for x in [1, 2] %}{% set ns.n = ns.n + x %}"
              "{% set ns.items = ns.items + [x] %}{% endfor %}{{ ns.n }}{{ ns.items }}"),
            "3[1, 2]");
  // Macros see their defining scope when called (late binding).
  EXPECT_EQ(R("{% macro m() %}{{ y }}{% endmacro %}{% set y = 1 %}{{ m() }}{% set y = 2 %}{{ m() }}"), "12");
  EXPECT_EQ(R("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"), "3[]");
  EXPECT_EQ(E("{% set n = 1 %}{% set n.a = 1 %}").message(), "cannot assign attribute on non-namespace object");
}

TEST(Jinja, SetMacroCallFilterBlocks) {
  EXPECT_EQ(R("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = 1, 2 %}{{ c }}"), "12(1, 2)");
  EXPECT_EQ(R("{% set x %}hello {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}"), "[hello 1]UP");
  EXPECT_EQ(R("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(1, 3, 4, z=5) }}"),
            "12(){}|13(4,){'z': 5}");
  EXPECT_EQ(R("{% macro m(a) %}[{{ a }}]{% endmacro %}{{ m() }}"), "[]");
  EXPECT_EQ(E("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}").message(), "macro 'm' takes not more than 1 argument(s)");
  EXPECT_EQ(R("{% macro m(a) %}[{{ caller(a * 2) }}]{% endmacro %}{% call(v) m(2) %}got {{ v }}{% endcall %}"), "[got 4]");
  EXPECT_EQ(R("{% filter upper %}abc{{ 'd' }}{% endfilter %}"), "ABCD");
  EXPECT_EQ(R("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}"), "321");
  // A macro kept past its block still sees that block's variables (jinja2 closures): once "" here.
  EXPECT_EQ(R("{% set ns = namespace(f=none) %}{% for x in [1] %}{% macro m() %}{{ x }}{% endmacro %}"
              "{% set ns.f = m %}{% endfor %}{{ ns.f() }}"),
            "1");
  EXPECT_EQ(R("{% set ns = namespace(f=none) %}{% with y = 7 %}{% macro m() %}{{ y }}{% endmacro %}"
              "{% set ns.f = m %}{% endwith %}{{ ns.f() }}"),
            "7");
  EXPECT_EQ(R("{% generation %}gen {{ 1 }}{% endgeneration %}"), "gen 1");
  EXPECT_EQ(R("{% set j = joiner(', ') %}{% for x in [1, 2] %}{{ j() }}{{ x }}{% endfor %}"), "1, 2");
}

TEST(Jinja, WhitespaceControl) {
  EXPECT_EQ(R("{% if true %}\n  x\n  {% endif %}\n  y\n{% for i in [1] %}\n    {{ i }}\n{% endfor %}\n"), "  x\n  y\n    1\n");
  EXPECT_EQ(R("a  {#- c -#}  b\n  {# c #}\nz\n"), "ab\nz");
  EXPECT_EQ(R("{% raw %}{{ x }}{% endraw %}\n{%- raw -%} {{ y }} {%- endraw %}\nq"), "{{ x }}{{ y }}q");
  EXPECT_EQ(R("  {%- if true %}  A  {% endif -%}  B  {{- ' C ' -}}  D"), "  A  B C D");
  EXPECT_EQ(R(" {%+ if true %}keep{% endif %}\n   {% if true %}\nx{% endif %}"), " keepx");
  EXPECT_EQ(R("line1\r\nline2\r{% if true %}\r\n  x\r\n{% endif %}\r\n"), "line1\nline2\n  x\n");
  EXPECT_EQ(R("{{ 'a' }}\n{{ 'b' }}\n\n"), "a\nb\n");  // one trailing newline of the source is dropped
}

TEST(Jinja, Filters) {
  EXPECT_EQ(R("{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'a']|sort }}{{ [3, 1]|sort(reverse=true) }}{{ {'b': 1, 'A': 2}|dictsort }}"),
            "[1, 2, 3]['A', 'a', 'b'][3, 1][('A', 2), ('b', 1)]");
  EXPECT_EQ(R("{{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|join(',') }}|{{ [1, 2]|join }}|{{ [1, 2]|map('string')|list }}"),
            "a,b|12|['1', '2']");
  EXPECT_EQ(R("{{ [{'a': 1}, {'a': 2}, {}]|selectattr('a')|list }}{{ [{'a': 1}, {'a': 2}]|selectattr('a', 'equalto', 2)|list }}"
              "{{ [1, 2, 3, 4]|select('odd')|list }}{{ [1, 2, 3]|reject('odd')|list }}{{ [{'a': 1}, {'b': 2}]|rejectattr('a')|list }}"),
            "[{'a': 1}, {'a': 2}][{'a': 2}][1, 3][2][{'b': 2}]");
  EXPECT_EQ(R("{{ x|default('d') }}|{{ none|default('d') }}|{{ ''|default('d', true) }}|{{ x|d }}|{{ x|length }}"), "d|None|d||0");
  EXPECT_EQ(R("{{ '  a b '|trim }}|{{ 'xxaxx'|trim('x') }}|{{ 'abc'|upper }}|{{ 'ABC'|lower }}|{{ \"they're bill's\"|title }}|{{ 'hELLO'|capitalize }}"),
            "a b|a|ABC|abc|They're Bill's|Hello");
  EXPECT_EQ(R("{{ 'x'|int }}{{ '42.7'|int }}{{ 3.9|int }}{{ '3'|float }}{{ 2.5|round }}{{ 3.14159|round(2) }}{{ 3|round }}{{ -1.5|abs }}"),
            "04233.02.03.1431.5");
  EXPECT_EQ(R("{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ [1, 2, 3]|reverse|list }}{{ 'abc'|reverse }}{{ [1, 2, 2, 'A', 'a']|unique|list }}"),
            "13[3, 2, 1]cba[1, 2, 'A']");
  EXPECT_EQ(R("{{ 'a\\nb\\n'|indent(2) }}|{{ 'a\\n\\nb'|indent(2, true) }}|{{ 'one two  three'|wordcount }}|{{ 'abc'|center(7) }}|"),
            "a\n  b\n|  a\n\n  b|3|  abc  |");
  EXPECT_EQ(R("{{ {'a': 1}|items|list }}{{ 'abc'|list }}{{ [1, 2, 3, 4, 5]|batch(2)|list }}{{ [3, 1, 2]|max }}{{ [1, 2, 3]|sum }}"),
            "[('a', 1)]['a', 'b', 'c'][[1, 2], [3, 4], [5]]36");
  EXPECT_EQ(R("{{ '%s-%d'|format('a', 3) }}|{{ 'aaa'|replace('a', 'b', 2) }}|{{ [1, [2, 'x']]|string }}|{{ 'Hello World'|truncate(5) }}"),
            "a-3|bba|[1, [2, 'x']]|He...");
  // map/select return generators: not JSON-serializable, None maps to nothing.
  EXPECT_EQ(R("{{ none|map(attribute='a')|list }}{{ none|selectattr('a')|list }}"), "[][]");
  EXPECT_EQ(E("{{ [1]|map('string')|tojson }}").message(), "Object of type generator is not JSON serializable");
  EXPECT_EQ(E("{{ x|nofilter }}").kind(), ErrorKind::kTemplateAssertionError);
  EXPECT_EQ(R("{% if false %}{{ x|nofilter }}{% endif %}ok"), "ok");  // unknown filters only fail when reached there
}

TEST(Jinja, ToJson) {
  EXPECT_EQ(R("{{ {'b': 1, 'a': [true, none, 1.5, 'é\"\\n']}|tojson }}"), "{\"b\": 1, \"a\": [true, null, 1.5, \"é\\\"\\n\"]}");
  EXPECT_EQ(R("{{ {'b': [1, {}], 'a': []}|tojson(indent=2) }}"), "{\n  \"b\": [\n    1,\n    {}\n  ],\n  \"a\": []\n}");
  EXPECT_EQ(R("{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}{{ [1, 2]|tojson(separators=(',', ':')) }}{{ 'é😀'|tojson(ensure_ascii=true) }}"),
            "{\"a\": 2, \"b\": 1}[1,2]\"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(R("{{ {1: 2, true: 3, none: 4}|tojson }}{{ (1, 2)|tojson }}{{ 1.0|tojson }}{{ '</script>'|tojson }}"),
            "{\"1\": 3, \"null\": 4}[1, 2]1.0\"</script>\"");  // True == 1: one key
  // Hugging Face's tojson takes ensure_ascii first: tojson(2) switches ASCII escaping on, not indent.
  EXPECT_EQ(R("{{ ['é']|tojson(2) }}"), "[\"\\u00e9\"]");
  EXPECT_EQ(E("{{ x|tojson }}").message(), "Object of type Undefined is not JSON serializable");
  // Key order of the input survives.
  EXPECT_EQ(R("{{ d|tojson }}{% for k, v in d.items() %}{{ k }}{% endfor %}", R"({"d": {"z": 1, "a": 2, "m": 3}})"),
            "{\"z\": 1, \"a\": 2, \"m\": 3}zam");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(R("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ 1 is number }}{{ true is number }}"
              "{{ true is integer }}{{ 1.0 is float }}{{ {} is mapping }}{{ [] is sequence }}{{ {} is sequence }}"),
            "FalseTrueTrueTrueTrueTrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ x is iterable }}{{ none is iterable }}{{ 5 is divisibleby 2 }}{{ 4 is even }}{{ 3 is odd }}{{ 2 is in [1, 2] }}"
              "{{ 'x' is eq 'x' }}{{ 1 is lt 2 }}{{ false is boolean }}{{ 0 is boolean }}{{ true is true }}{{ 1 is true }}"),
            "TrueFalseFalseTrueTrueTrueTrueTrueTrueFalseTrueFalse");
  EXPECT_EQ(R("{{ 'upper' is filter }}{{ 'nope' is filter }}{{ 'odd' is test }}{{ 'abc' is lower }}{{ 'ABC' is upper }}"),
            "TrueFalseTrueTrueTrue");
}

TEST(Jinja, StringDictListMethods) {
  EXPECT_EQ(R("{{ '  a  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ ' a b  c '.rsplit(None, 1) }}"),
            "a|['a', 'b', '', 'c']|['a', 'b']|['a', 'b c']|[' a b', 'c']");
  EXPECT_EQ(R("{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'a-b'.replace('-', '_') }}{{ 'aXbX'.rstrip('X') }}"
              "{{ 'abc'.find('c') }}{{ 'abcabc'.count('b') }}{{ 'a,b'.partition(',') }}"),
            "TrueTruea_baXb22('a', ',', 'b')");
  EXPECT_EQ(R("{{ 'hello world'.title() }}{{ \"they're\".title() }}{{ 'HELLO'.capitalize() }}{{ 'straße'.upper() }}{{ 'ÉCOLE'.lower() }}"),
            "Hello WorldThey'ReHelloSTRASSEécole");
  EXPECT_EQ(R("{{ ', '.join(['a', 'b']) }}{{ '{} {}'.format(1, 'a') }}{{ '{a}-{b}'.format(a=1, b=2) }}{{ '{:.2f}'.format(3.14159) }}"),
            "a, b1 a1-23.14");
  EXPECT_EQ(R("{{ {'a': 1}.get('b', 3) }}{{ {'a': 1}.get('b') }}{{ {'a': 1}.items() }}{{ {'a': 1}.keys()|list }}{{ {'a': 1}.values()|list }}"),
            "3Nonedict_items([('a', 1)])['a'][1]");
  EXPECT_EQ(R("{{ [1, 2, 3].index(2) }}{{ [1, 2, 2].count(2) }}{{ dict(a=1, b=2) }}{{ namespace(a=1).a }}"), "12{'a': 1, 'b': 2}1");
}

TEST(Jinja, ImmutableSandboxBlocksMutation) {
  for (const char* expr : {"[1].append(2)", "[1].pop()", "[1].insert(0, 1)", "[1].extend([2])", "[1].remove(1)",
                           "[1].clear()", "[1].sort()", "[1].reverse()", "{'a': 1}.update({})", "{'a': 1}.pop('a')",
                           "{'a': 1}.setdefault('b', 1)", "{'a': 1}.popitem()", "{'a': 1}.clear()"}) {
    TemplateError e = E(std::string("{{ ") + expr + " }}");
    EXPECT_EQ(e.kind(), ErrorKind::kSecurityError) << expr;
    std::string method = std::string(expr).substr(std::string(expr).find("].") != std::string::npos
                                                       ? std::string(expr).find("].") + 2
                                                       : std::string(expr).find("}.") + 2);
    method = method.substr(0, method.find('('));
    EXPECT_NE(e.message().find("'" + method + "'"), std::string::npos) << e.message();
  }
  EXPECT_EQ(E("{% set l = [1] %}{% do l.append(2) %}").kind(), ErrorKind::kTemplateSyntaxError);  // no `do` tag
  EXPECT_EQ(E("{{ [1].append(2) }}").message(), "access to attribute 'append' of 'list' object is unsafe.");
  EXPECT_EQ(R("{{ [1, 2].append }}|{{ ''.__class__ }}|"), "||");  // unsafe attributes are undefined until called
}

TEST(Jinja, UndefinedBehavesLikeJinja2Default) {
  EXPECT_EQ(R("[{{ x }}]{{ x is defined }}{{ x|length }}{% for a in x %}a{% endfor %}{{ x ~ 'a' }}{% if not x %}falsy{% endif %}"),
            "[]False0afalsy");
  EXPECT_EQ(R("{{ x|list }}{{ x|join }}{{ x|string }}{{ x|upper }}{{ x|trim }}{{ x|first }}{{ x|items|list }}"), "[][]");
  EXPECT_EQ(R("{{ x == x }}{{ x == none }}{{ x != 'a' }}{{ 'a' in x }}"), "TrueFalseTrueFalse");
  EXPECT_EQ(E("{{ x.y }}").kind(), ErrorKind::kUndefinedError);
  EXPECT_EQ(E("{{ x.y }}").message(), "'x' is undefined");
  EXPECT_EQ(E("{{ x + 'a' }}").kind(), ErrorKind::kUndefinedError);
  EXPECT_EQ(E("{{ x() }}").kind(), ErrorKind::kUndefinedError);
  EXPECT_EQ(E("{{ d.a.b }}", R"({"d": {}})").message(), "'dict object' has no attribute 'a'");
  EXPECT_EQ(E("{{ x|tojson }}").kind(), ErrorKind::kTypeError);
}

TEST(Jinja, ErrorsNameTheTemplateLine) {
  TemplateError unknown = E("line 1\n{% if true %}\n{% foo %}\n{% endif %}");
  EXPECT_EQ(unknown.kind(), ErrorKind::kTemplateSyntaxError);
  EXPECT_EQ(unknown.line(), 3);
  EXPECT_NE(std::string(unknown.what()).find("line 3"), std::string::npos) << unknown.what();
  EXPECT_NE(std::string(unknown.what()).find("unknown tag 'foo'"), std::string::npos) << unknown.what();
  EXPECT_EQ(E("{{ 1 + }}").kind(), ErrorKind::kTemplateSyntaxError);
  EXPECT_EQ(E("{% if true %}never closed").line(), 1);
  EXPECT_EQ(E("a\nb\n{{ 'unterminated }}").line(), 3);
  EXPECT_EQ(E("{% for x in y %}\n{% endif %}").kind(), ErrorKind::kTemplateSyntaxError);
  TemplateError runtime = E("a\n\n{{ 'x' + 1 }}");
  EXPECT_EQ(runtime.line(), 3);
  EXPECT_EQ(std::string(runtime.what()), "template line 3: TypeError: can only concatenate str (not \"int\") to str");
  // raise_exception carries the template's message verbatim.
  TemplateError raised = E("\n{{ raise_exception('Conversation roles must alternate ' ~ 1) }}");
  EXPECT_TRUE(raised.raised_by_template());
  EXPECT_EQ(std::string(raised.what()), "Conversation roles must alternate 1");
}

TEST(Jinja, MarkupEscapesWhatIsAddedToIt) {
  EXPECT_EQ(R("{{ '<&>'|safe + '<&\\'\"' }}"), "<&>&lt;&amp;&#39;&#34;");
  EXPECT_EQ(R("{{ ('<'|safe + 'x')|trim + '<' }}{{ '<'|safe ~ '<' }}{{ '<b>'|e }}"), "<x&lt;<<&lt;b&gt;");
}

TEST(Jinja, Jinja2QuirksKept) {
  // Constant folding: jinja2 writes the folded "-2" into its generated Python, where -2 ** n is -(2 ** n).
  EXPECT_EQ(R("{{ -2 ** n }}|{{ -2 ** 2 }}|{{ (-2) ** n }}", R"({"n": 2})"), "-4|4|-4");
  // Slices bypass the sandbox at run time (TypeError) but literal slices are folded through it (undefined).
  EXPECT_EQ(E("{{ n[1:] }}", R"({"n": 2})").message(), "'int' object is not subscriptable");
  EXPECT_EQ(R("{{ 5[1:] }}|{{ 'abc'[1:] }}"), "|bc");
  // range() is a range object: printed as such, not JSON-serializable, sliceable into a range.
  EXPECT_EQ(R("{{ range(3) }}|{{ range(1, 10, 3)[1:] }}|{{ range(3)|list }}"), "range(0, 3)|range(4, 10, 3)|[0, 1, 2]");
  EXPECT_EQ(E("{{ range(3)|tojson }}").message(), "Object of type range is not JSON serializable");
  // A call block passes `caller`: into **kwargs when the macro reads kwargs but not caller, else an error.
  EXPECT_EQ(R("{% macro m() %}{{ kwargs }}{% endmacro %}{% call m() %}x{% endcall %}"), "{'caller': <Macro anonymous>}");
  EXPECT_EQ(E("{% macro m() %}{% endmacro %}{% call m() %}{% endcall %}").kind(), ErrorKind::kTypeError);
  // {% set %} blocks are inlined: a break inside one leaves the enclosing loop.
  EXPECT_EQ(R("{% for i in [1, 2, 3] %}{% set x %}{{ i }}{% if i == 2 %}{% break %}{% endif %}{% endset %}{{ x }}{% endfor %}"),
            "1");
}

TEST(Jinja, StrftimeNowReadsThePinnedClock) {
  EXPECT_EQ(R("{{ strftime_now('%Y-%m-%d %A %B %d %j %H:%M:%S') }}"), "2026-11-30 Monday November 30 334 09:05:07");
  EXPECT_EQ(R("{{ strftime_now('%d %b %Y') }}"), "30 Nov 2026");
}

}  // namespace
}  // namespace ft::jinja
