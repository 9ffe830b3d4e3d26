#pragma once
// Internal: the Jinja parser's class, shared by parser.cpp (token stream, statements) and
// parser_expr.cpp (expressions, constant folding). Follows jinja2 3.1 parser.py.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"

namespace ft::jinja::detail {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse();

 private:
  // ---- token stream ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(Op op) const { return cur().type == Tok::kOp && cur().op == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(Op op);
  bool skip_name(std::string_view n);
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw TemplateError(ErrorKind::kTemplateSyntaxError, msg, line);
  }
  const Token& expect_op(Op op, const char* spelling);
  const Token& expect_name();
  void expect_name(std::string_view n);
  void expect(Tok t);

  // ---- statements ----
  using EndTags = std::vector<std::string_view>;

  bool at_end_tag(const EndTags& ends) const;

  Body subparse(const EndTags& ends);

  // Parses statements until one of `ends`; leaves the end tag name as the current token.
  Body parse_statements(const EndTags& ends, bool drop_needle);

  // Body of a construct that opens a new frame in jinja2's compiler (unknown filters are hard errors).
  Body parse_inner(const EndTags& ends, bool drop_needle, bool loop);

  StmtPtr parse_statement();

  [[noreturn]] void fail_unknown_tag(const std::string& name, int line);

  StmtPtr parse_if();

  StmtPtr parse_for();

  StmtPtr parse_set();

  std::unique_ptr<MacroDef> parse_signature(std::string name);

  StmtPtr parse_macro();

  StmtPtr parse_call_block();

  StmtPtr parse_filter_block();

  StmtPtr parse_with();

  StmtPtr parse_print();

  StmtPtr parse_generation();

  // Assignment target: names, ns.attr refs (with_namespace) or a tuple of them.
  Target parse_assign_target(const EndTags& extra_end, bool with_namespace);

  // ---- expressions ----
  bool is_tuple_end(const EndTags& extra) const;

  ExprPtr make(ExprKind k, int line);

  // Records the height of a finished composite node; deep trees (e.g. "1+1+...+1" with thousands of
  // terms) would overflow the stack when evaluated or destroyed, and jinja2's recursive compiler
  // rejects them too.
  ExprPtr seal(ExprPtr e);

  // Whether jinja2's optimizer could fold this node (Expr.as_const): no names or calls, no filters that
  // take the context; a conditional needs only a constant test (the branch taken is folded lazily), and
  // `and`/`or` only a constant left side.
  static bool foldable_shape(const Expr& e);

  // jinja2's optimizer: a subexpression built from literals whose value has a safe repr (None, bool,
  // numbers, strings, and lists/tuples/dicts of those) becomes a constant at compile time. Folding
  // evaluates slices through the sandbox's getitem, so a bad literal slice folds to undefined.
  static bool safe_repr(const Value& v);

  ExprPtr fold(ExprPtr e);

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const EndTags& extra, bool explicit_parens);

  // Bounds the parser's own recursion for pathological input such as "((((..." or "----...".
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nest_ > kMaxExprDepth) p.fail(p.cur().line, "expression nested too deeply");
    }
    ~Nest() { --p.nest_; }
  };

  ExprPtr parse_expression(bool with_condexpr);

  ExprPtr parse_condexpr();

  ExprPtr binary(ExprKind k, ExprPtr a, ExprPtr b, int line);

  ExprPtr parse_or();

  ExprPtr parse_and();

  ExprPtr parse_not();

  ExprPtr parse_compare();

  ExprPtr math(BinOp op, ExprPtr a, ExprPtr b, int line);

  ExprPtr parse_math1();

  ExprPtr parse_concat();

  ExprPtr parse_math2();

  ExprPtr parse_pow();

  ExprPtr parse_unary(bool with_filter);

  ExprPtr parse_primary();

  ExprPtr parse_postfix(ExprPtr node);

  ExprPtr parse_filter_expr(ExprPtr node);

  ExprPtr parse_subscript(ExprPtr node);

  ExprPtr parse_subscribed();

  void parse_call_args(Expr& e);

  ExprPtr parse_call(ExprPtr node);

  std::string dotted_name();

  ExprPtr parse_filter(ExprPtr node, bool start_inline);

  ExprPtr parse_test(ExprPtr node);

  // Marks which of caller/varargs/kwargs a macro body reads (jinja2 accepts extra arguments only then).
  static void scan_expr(const Expr* e, MacroDef& m);
  static void scan_body(const Body& body, MacroDef& m);
  static void scan_macro_names(MacroDef& m, const Body& body);

  static constexpr int kMaxExprDepth = 400;
  static constexpr int kMaxBlockDepth = 200;
  RenderOptions fold_options_;
  Interpreter folder_{fold_options_};
  std::vector<Token> toks_;
  size_t pos_ = 0;
  int nest_ = 0;
  int block_depth_ = 0;
  int soft_ = 0;        // >0 inside an if statement or conditional expression (same frame)
  int loop_depth_ = 0;  // enclosing for loops (break/continue allowed)
  std::vector<EndTags> end_stack_;
  std::vector<std::string> tag_stack_;
};

}  // namespace ft::jinja::detail
