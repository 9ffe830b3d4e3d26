#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace detail {

Body Parser::parse() {
  Body body = subparse({});
  if (cur().type != Tok::kEof) fail(cur().line, "unexpected " + describe(cur()));
  return body;
}

bool Parser::skip_op(Op op) {
  if (!is_op(op)) return false;
  next();
  return true;
}

bool Parser::skip_name(std::string_view n) {
  if (!is_name(n)) return false;
  next();
  return true;
}

const Token& Parser::expect_op(Op op, const char* spelling) {
  if (!is_op(op)) fail(cur().line, fmt::format("expected token '{}', got '{}'", spelling, describe(cur())));
  return next();
}

const Token& Parser::expect_name() {
  if (cur().type != Tok::kName) fail(cur().line, fmt::format("expected token 'name', got '{}'", describe(cur())));
  return next();
}

void Parser::expect_name(std::string_view n) {
  if (!is_name(n)) fail(cur().line, fmt::format("expected token '{}', got '{}'", n, describe(cur())));
  next();
}

void Parser::expect(Tok t) {
  if (cur().type != t) {
    Token want;
    want.type = t;
    fail(cur().line, fmt::format("expected token '{}', got '{}'", describe(want), describe(cur())));
  }
  next();
}

bool Parser::at_end_tag(const EndTags& ends) const {
  if (cur().type != Tok::kName) return false;
  return std::find(ends.begin(), ends.end(), std::string_view(cur().text)) != ends.end();
}

Body Parser::subparse(const EndTags& ends) {
  if (++block_depth_ > kMaxBlockDepth) fail(cur().line, "blocks nested too deeply");
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{block_depth_};
  Body body;
  if (!ends.empty()) end_stack_.push_back(ends);
  while (cur().type != Tok::kEof) {
    const Token& t = cur();
    if (t.type == Tok::kData) {
      auto s = std::make_unique<Stmt>(StmtKind::kText, t.line);
      s->text = t.text;
      body.push_back(std::move(s));
      next();
    } else if (t.type == Tok::kVarBegin) {
      next();
      auto s = std::make_unique<Stmt>(StmtKind::kOutput, cur().line);
      s->exprs.push_back(parse_tuple(false, true, {}, false));
      expect(Tok::kVarEnd);
      body.push_back(std::move(s));
    } else if (t.type == Tok::kBlockBegin) {
      next();
      if (!ends.empty() && at_end_tag(ends)) {
        end_stack_.pop_back();
        return body;
      }
      body.push_back(parse_statement());
      expect(Tok::kBlockEnd);
    } else {
      fail(t.line, "internal parsing error");
    }
  }
  if (!ends.empty()) end_stack_.pop_back();
  return body;
}

// Parses statements until one of `ends`; leaves the end tag name as the current token.
Body Parser::parse_statements(const EndTags& ends, bool drop_needle) {
  skip_op(Op::kColon);
  expect(Tok::kBlockEnd);
  Body body = subparse(ends);
  if (cur().type == Tok::kEof) {
    std::string want;
    for (size_t i = 0; i < ends.size(); ++i) want += (i ? " or '" : "'") + std::string(ends[i]) + "'";
    fail(cur().line, "Unexpected end of template. Jinja was looking for the following tags: " + want +
                         ". The innermost block that needs to be closed is '" + tag_stack_.back() + "'.");
  }
  if (drop_needle) next();
  return body;
}

// Body of a construct that opens a new frame in jinja2's compiler (unknown filters are hard errors).
Body Parser::parse_inner(const EndTags& ends, bool drop_needle, bool loop) {
  int soft = soft_, loops = loop_depth_;
  soft_ = 0;
  if (loop) ++loop_depth_;
  Body b = parse_statements(ends, drop_needle);
  soft_ = soft;
  loop_depth_ = loops;
  return b;
}

StmtPtr Parser::parse_statement() {
  const Token& t = cur();
  if (t.type != Tok::kName) fail(t.line, "tag name expected");
  std::string name = t.text;
  int line = t.line;
  tag_stack_.push_back(name);
  StmtPtr s;
  if (name == "if") s = parse_if();
  else if (name == "for") s = parse_for();
  else if (name == "set") s = parse_set();
  else if (name == "macro") s = parse_macro();
  else if (name == "call") s = parse_call_block();
  else if (name == "filter") s = parse_filter_block();
  else if (name == "with") s = parse_with();
  else if (name == "print") s = parse_print();
  else if (name == "generation") s = parse_generation();
  else if (name == "break" || name == "continue") {
    next();
    if (loop_depth_ == 0) fail(line, fmt::format("'{}' outside of a loop", name));
    s = std::make_unique<Stmt>(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, line);
  } else {
    tag_stack_.pop_back();
    fail_unknown_tag(name, line);
  }
  tag_stack_.pop_back();
  return s;
}

void Parser::fail_unknown_tag(const std::string& name, int line) {
  static const char* kUnsupported[] = {"block", "extends", "include", "import", "from", "autoescape"};
  for (const char* u : kUnsupported)
    if (name == u) fail(line, fmt::format("tag '{}' is not supported in chat templates", name));
  std::string msg = fmt::format("Encountered unknown tag '{}'.", name);
  if (!end_stack_.empty()) {
    std::string want;
    const EndTags& e = end_stack_.back();
    for (size_t i = 0; i < e.size(); ++i) want += (i ? " or '" : "'") + std::string(e[i]) + "'";
    msg += " Jinja was looking for the following tags: " + want + ".";
    if (!tag_stack_.empty()) msg += " The innermost block that needs to be closed is '" + tag_stack_.back() + "'.";
  }
  fail(line, msg);
}

StmtPtr Parser::parse_if() {
  auto s = std::make_unique<Stmt>(StmtKind::kIf, next().line);
  ++soft_;
  while (true) {
    s->exprs.push_back(parse_tuple(false, false, {}, false));
    s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const Token& t = next();
    if (t.text == "elif") continue;
    if (t.text == "else") {
      s->bodies.push_back(parse_statements({"endif"}, true));
      s->has_else = true;
    }
    break;
  }
  --soft_;
  return s;
}

StmtPtr Parser::parse_for() {
  auto s = std::make_unique<Stmt>(StmtKind::kFor, next().line);
  int soft = soft_;
  soft_ = 0;
  s->target = parse_assign_target({"in"}, false);
  expect_name("in");
  s->exprs.push_back(parse_tuple(false, false, {"recursive"}, false));
  if (skip_name("if")) s->exprs.push_back(parse_expression(true));
  s->recursive = skip_name("recursive");
  soft_ = soft;
  s->bodies.push_back(parse_inner({"endfor", "else"}, false, true));
  if (next().text == "endfor") {
    s->bodies.emplace_back();
  } else {
    s->bodies.push_back(parse_inner({"endfor"}, true, false));
  }
  return s;
}

StmtPtr Parser::parse_set() {
  int line = next().line;
  Target target = parse_assign_target({}, true);
  if (skip_op(Op::kAssign)) {
    auto s = std::make_unique<Stmt>(StmtKind::kSet, line);
    s->target = std::move(target);
    s->exprs.push_back(parse_tuple(false, true, {}, false));
    return s;
  }
  auto s = std::make_unique<Stmt>(StmtKind::kSetBlock, line);
  s->target = std::move(target);
  if (is_op(Op::kPipe)) s->filter = parse_filter(nullptr, false);
  s->bodies.push_back(parse_inner({"endset"}, true, false));
  return s;
}

std::unique_ptr<MacroDef> Parser::parse_signature(std::string name) {
  auto m = std::make_unique<MacroDef>();
  m->name = std::move(name);
  expect_op(Op::kLParen, "(");
  while (!is_op(Op::kRParen)) {
    if (!m->params.empty()) expect_op(Op::kComma, ",");
    m->params.push_back(expect_name().text);
    if (skip_op(Op::kAssign)) {
      m->defaults.push_back(parse_expression(true));
    } else {
      if (std::any_of(m->defaults.begin(), m->defaults.end(), [](const ExprPtr& e) { return e != nullptr; }))
        fail(cur().line, "non-default argument follows default argument");
      m->defaults.push_back(nullptr);
    }
  }
  expect_op(Op::kRParen, ")");
  return m;
}

StmtPtr Parser::parse_macro() {
  auto s = std::make_unique<Stmt>(StmtKind::kMacro, next().line);
  std::string name = expect_name().text;
  s->macro = parse_signature(name);
  int loops = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(parse_inner({"endmacro"}, true, false));
  loop_depth_ = loops;
  scan_macro_names(*s->macro, s->bodies[0]);
  return s;
}

StmtPtr Parser::parse_call_block() {
  auto s = std::make_unique<Stmt>(StmtKind::kCallBlock, next().line);
  if (is_op(Op::kLParen)) {
    s->macro = parse_signature("");  // anonymous, as jinja2 names a call block's caller
  } else {
    s->macro = std::make_unique<MacroDef>();
    s->macro->name = "";
  }
  ExprPtr call = parse_expression(true);
  if (call->kind != ExprKind::kCall) fail(s->line, "expected call");
  s->exprs.push_back(std::move(call));
  int loops = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(parse_inner({"endcall"}, true, false));
  loop_depth_ = loops;
  scan_macro_names(*s->macro, s->bodies[0]);
  return s;
}

StmtPtr Parser::parse_filter_block() {
  auto s = std::make_unique<Stmt>(StmtKind::kFilterBlock, next().line);
  s->filter = parse_filter(nullptr, true);
  s->bodies.push_back(parse_inner({"endfilter"}, true, false));
  return s;
}

StmtPtr Parser::parse_with() {
  auto s = std::make_unique<Stmt>(StmtKind::kWith, next().line);
  while (cur().type != Tok::kBlockEnd) {
    if (!s->targets.empty()) expect_op(Op::kComma, ",");
    s->targets.push_back(parse_assign_target({}, false));
    expect_op(Op::kAssign, "=");
    s->exprs.push_back(parse_expression(true));
  }
  s->bodies.push_back(parse_inner({"endwith"}, true, false));
  return s;
}

StmtPtr Parser::parse_print() {
  auto s = std::make_unique<Stmt>(StmtKind::kOutput, next().line);
  while (cur().type != Tok::kBlockEnd) {
    if (!s->exprs.empty()) expect_op(Op::kComma, ",");
    s->exprs.push_back(parse_expression(true));
  }
  return s;
}

StmtPtr Parser::parse_generation() {
  auto s = std::make_unique<Stmt>(StmtKind::kScope, next().line);
  s->bodies.push_back(parse_inner({"endgeneration"}, true, false));
  return s;
}

// Assignment target: names, ns.attr refs (with_namespace) or a tuple of them.
Target Parser::parse_assign_target(const EndTags& extra_end, bool with_namespace) {
  Target tuple;
  tuple.kind = Target::Kind::kTuple;
  tuple.line = cur().line;
  bool is_tuple = false;
  while (true) {
    if (!tuple.items.empty()) expect_op(Op::kComma, ",");
    if (is_tuple_end(extra_end)) break;
    Target t;
    t.line = cur().line;
    const Token& n = cur();
    if (n.type != Tok::kName || n.text == "true" || n.text == "false" || n.text == "none" ||
        n.text == "True" || n.text == "False" || n.text == "None")
      fail(n.line, fmt::format("can't assign to '{}'", describe(n)));
    t.name = next().text;
    if (with_namespace && is_op(Op::kDot)) {
      next();
      t.kind = Target::Kind::kNsRef;
      t.attr = expect_name().text;
    }
    tuple.items.push_back(std::move(t));
    if (is_op(Op::kComma)) is_tuple = true;
    else break;
  }
  if (!is_tuple) {
    if (tuple.items.empty()) fail(cur().line, fmt::format("Expected an expression, got '{}'", describe(cur())));
    return std::move(tuple.items[0]);
  }
  return tuple;
}

// Marks which of caller/varargs/kwargs a macro body reads (jinja2 accepts extra arguments only then).
void Parser::scan_expr(const Expr* e, MacroDef& m) {
  if (!e) return;
  if (e->kind == ExprKind::kName) {
    if (e->name == "caller") m.uses_caller = true;
    else if (e->name == "varargs") m.uses_varargs = true;
    else if (e->name == "kwargs") m.uses_kwargs = true;
  }
  scan_expr(e->target.get(), m);
  for (const auto& a : e->args) scan_expr(a.get(), m);
  for (const auto& kv : e->kwargs) scan_expr(kv.second.get(), m);
  scan_expr(e->dyn_args.get(), m);
  scan_expr(e->dyn_kwargs.get(), m);
}

void Parser::scan_body(const Body& body, MacroDef& m) {
  for (const auto& s : body) {
    for (const auto& e : s->exprs) scan_expr(e.get(), m);
    scan_expr(s->filter.get(), m);
    // jinja2's UndeclaredNameVisitor also walks nested macro and call-block bodies.
    if (s->macro)
      for (const auto& d : s->macro->defaults) scan_expr(d.get(), m);
    for (const auto& b : s->bodies) scan_body(b, m);
  }
}

void Parser::scan_macro_names(MacroDef& m, const Body& body) {
  for (const auto& d : m.defaults) scan_expr(d.get(), m);
  scan_body(body, m);
}

}  // namespace detail

Body parse_template(std::string_view source) { return detail::Parser(tokenize(source)).parse(); }

}  // namespace ft::jinja
