#include "tokenizer/jinja/parser.h"

#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != Tok::kEof) fail(cur().line, "unexpected " + describe(cur()));
    return body;
  }

 private:
  // ---- token stream ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(Op op) const { return cur().type == Tok::kOp && cur().op == op; }
  bool is_name(std::string_view n) const { return cur().type == Tok::kName && cur().text == n; }
  bool skip_op(Op op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(std::string_view n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail(int line, const std::string& msg) const {
    throw TemplateError(ErrorKind::kTemplateSyntaxError, msg, line);
  }
  const Token& expect_op(Op op, const char* spelling) {
    if (!is_op(op)) fail(cur().line, fmt::format("expected token '{}', got '{}'", spelling, describe(cur())));
    return next();
  }
  const Token& expect_name() {
    if (cur().type != Tok::kName) fail(cur().line, fmt::format("expected token 'name', got '{}'", describe(cur())));
    return next();
  }
  void expect_name(std::string_view n) {
    if (!is_name(n)) fail(cur().line, fmt::format("expected token '{}', got '{}'", n, describe(cur())));
    next();
  }
  void expect(Tok t) {
    if (cur().type != t) {
      Token want;
      want.type = t;
      fail(cur().line, fmt::format("expected token '{}', got '{}'", describe(want), describe(cur())));
    }
    next();
  }

  // ---- statements ----
  using EndTags = std::vector<std::string_view>;

  bool at_end_tag(const EndTags& ends) const {
    if (cur().type != Tok::kName) return false;
    return std::find(ends.begin(), ends.end(), std::string_view(cur().text)) != ends.end();
  }

  Body subparse(const EndTags& ends) {
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
  Body parse_statements(const EndTags& ends, bool drop_needle) {
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
  Body parse_inner(const EndTags& ends, bool drop_needle, bool loop) {
    int soft = soft_, loops = loop_depth_;
    soft_ = 0;
    if (loop) ++loop_depth_;
    Body b = parse_statements(ends, drop_needle);
    soft_ = soft;
    loop_depth_ = loops;
    return b;
  }

  StmtPtr parse_statement() {
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

  [[noreturn]] void fail_unknown_tag(const std::string& name, int line) {
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

  StmtPtr parse_if() {
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

  StmtPtr parse_for() {
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

  StmtPtr parse_set() {
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

  std::unique_ptr<MacroDef> parse_signature(std::string name) {
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

  StmtPtr parse_macro() {
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

  StmtPtr parse_call_block() {
    auto s = std::make_unique<Stmt>(StmtKind::kCallBlock, next().line);
    if (is_op(Op::kLParen)) {
      s->macro = parse_signature("caller");
    } else {
      s->macro = std::make_unique<MacroDef>();
      s->macro->name = "caller";
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

  StmtPtr parse_filter_block() {
    auto s = std::make_unique<Stmt>(StmtKind::kFilterBlock, next().line);
    s->filter = parse_filter(nullptr, true);
    s->bodies.push_back(parse_inner({"endfilter"}, true, false));
    return s;
  }

  StmtPtr parse_with() {
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

  StmtPtr parse_print() {
    auto s = std::make_unique<Stmt>(StmtKind::kOutput, next().line);
    while (cur().type != Tok::kBlockEnd) {
      if (!s->exprs.empty()) expect_op(Op::kComma, ",");
      s->exprs.push_back(parse_expression(true));
    }
    return s;
  }

  StmtPtr parse_generation() {
    auto s = std::make_unique<Stmt>(StmtKind::kScope, next().line);
    s->bodies.push_back(parse_inner({"endgeneration"}, true, false));
    return s;
  }

  // Assignment target: names, ns.attr refs (with_namespace) or a tuple of them.
  Target parse_assign_target(const EndTags& extra_end, bool with_namespace) {
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

  // ---- expressions ----
  bool is_tuple_end(const EndTags& extra) const {
    if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(Op::kRParen)) return true;
    return at_end_tag(extra);
  }

  ExprPtr make(ExprKind k, int line) {
    auto e = std::make_unique<Expr>(k, line);
    e->literal = k == ExprKind::kConst;
    return e;
  }

  // Records the height of a finished composite node; deep trees (e.g. "1+1+...+1" with thousands of
  // terms) would overflow the stack when evaluated or destroyed, and jinja2's recursive compiler
  // rejects them too.
  ExprPtr seal(ExprPtr e) {
    int d = 0;
    auto see = [&](const ExprPtr& c) {
      if (c) d = std::max(d, c->depth);
    };
    see(e->target);
    for (const auto& a : e->args) see(a);
    for (const auto& kv : e->kwargs) see(kv.second);
    see(e->dyn_args);
    see(e->dyn_kwargs);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth) fail(e->line, "expression nested too deeply");
    e->literal = foldable_shape(*e);
    if (e->literal && e->kind != ExprKind::kSlice) return fold(std::move(e));
    return e;
  }

  // Whether jinja2's optimizer could fold this node (Expr.as_const): no names or calls, no filters that
  // take the context; a conditional needs only a constant test (the branch taken is folded lazily), and
  // `and`/`or` only a constant left side.
  static bool foldable_shape(const Expr& e) {
    auto lit = [](const ExprPtr& c) { return !c || c->literal; };
    switch (e.kind) {
      case ExprKind::kConst: return true;
      case ExprKind::kName:
      case ExprKind::kCall: return false;
      case ExprKind::kCondExpr: return lit(e.args[0]);
      case ExprKind::kAnd:
      case ExprKind::kOr: return lit(e.args[0]);
      case ExprKind::kFilter:
        if (!e.target || !e.filter || e.name == "map" || e.name == "select" || e.name == "reject" ||
            e.name == "selectattr" || e.name == "rejectattr")
          return false;
        break;
      case ExprKind::kTest:
        if (!e.test) return false;
        break;
      default: break;
    }
    if (e.dyn_args || e.dyn_kwargs || !lit(e.target)) return false;
    for (const auto& a : e.args)
      if (!lit(a)) return false;
    for (const auto& kv : e.kwargs)
      if (!kv.second->literal) return false;
    return true;
  }

  // jinja2's optimizer: a subexpression built from literals whose value has a safe repr (None, bool,
  // numbers, strings, and lists/tuples/dicts of those) becomes a constant at compile time. Folding
  // evaluates slices through the sandbox's getitem, so a bad literal slice folds to undefined.
  static bool safe_repr(const Value& v) {
    switch (v.kind()) {
      case Value::Kind::kNone: case Value::Kind::kBool: case Value::Kind::kInt:
      case Value::Kind::kFloat: case Value::Kind::kString: return true;
      case Value::Kind::kList:
        for (const auto& x : v.list().items)
          if (!safe_repr(x)) return false;
        return true;
      case Value::Kind::kDict:
        for (const auto& kv : v.dict_ref().items)
          if (!safe_repr(kv.first) || !safe_repr(kv.second)) return false;
        return true;
      default: return false;
    }
  }

  ExprPtr fold(ExprPtr e) {
    Value v;
    try {
      v = folder_.eval_folding(*e);
    } catch (const TemplateError&) {
      return e;  // raises again when rendered, as in jinja2
    }
    if (!safe_repr(v)) return e;
    auto c = make(ExprKind::kConst, e->line);
    c->value = std::move(v);
    return c;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const EndTags& extra, bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(Op::kComma, ",");
      if (is_tuple_end(extra)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(Op::kComma)) is_tuple = true;
      else break;
      line = cur().line;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail(cur().line, fmt::format("Expected an expression, got '{}'", describe(cur())));
    }
    auto e = make(ExprKind::kTuple, line);
    e->args = std::move(args);
    return seal(std::move(e));
  }

  // Bounds the parser's own recursion for pathological input such as "((((..." or "----...".
  struct Nest {
    Parser& p;
    explicit Nest(Parser& parser) : p(parser) {
      if (++p.nest_ > kMaxExprDepth) p.fail(p.cur().line, "expression nested too deeply");
    }
    ~Nest() { --p.nest_; }
  };

  ExprPtr parse_expression(bool with_condexpr) {
    Nest nest(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    ExprPtr expr1 = parse_or();
    while (skip_name("if")) {
      ++soft_;
      ExprPtr expr2 = parse_or();
      ExprPtr expr3;
      if (skip_name("else")) expr3 = parse_condexpr();
      --soft_;
      auto e = make(ExprKind::kCondExpr, line);
      e->args.push_back(std::move(expr2));
      e->args.push_back(std::move(expr1));
      e->args.push_back(std::move(expr3));
      expr1 = seal(std::move(e));
      line = cur().line;
    }
    return expr1;
  }

  ExprPtr binary(ExprKind k, ExprPtr a, ExprPtr b, int line) {
    auto e = make(k, line);
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprPtr parse_or() {
    int line = cur().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = binary(ExprKind::kOr, std::move(left), parse_and(), line);
    return left;
  }

  ExprPtr parse_and() {
    int line = cur().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = binary(ExprKind::kAnd, std::move(left), parse_not(), line);
    return left;
  }

  ExprPtr parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      auto e = make(ExprKind::kNot, next().line);
      e->args.push_back(parse_not());
      return seal(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr expr = parse_math1();
    std::vector<CmpOp> ops;
    std::vector<ExprPtr> operands;
    while (true) {
      CmpOp op;
      if (cur().type == Tok::kOp && (cur().op == Op::kEq || cur().op == Op::kNe || cur().op == Op::kLt ||
                                     cur().op == Op::kLe || cur().op == Op::kGt || cur().op == Op::kGe)) {
        Op o = next().op;
        op = o == Op::kEq ? CmpOp::kEq : o == Op::kNe ? CmpOp::kNe : o == Op::kLt ? CmpOp::kLt
           : o == Op::kLe ? CmpOp::kLe : o == Op::kGt ? CmpOp::kGt : CmpOp::kGe;
      } else if (skip_name("in")) {
        op = CmpOp::kIn;
      } else if (is_name("not") && look().type == Tok::kName && look().text == "in") {
        next();
        next();
        op = CmpOp::kNotIn;
      } else {
        break;
      }
      ops.push_back(op);
      operands.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = make(ExprKind::kCompare, line);
    e->args.push_back(std::move(expr));
    for (auto& o : operands) e->args.push_back(std::move(o));
    e->cmp = std::move(ops);
    return seal(std::move(e));
  }

  ExprPtr math(BinOp op, ExprPtr a, ExprPtr b, int line) {
    auto e = make(ExprKind::kBinary, line);
    e->op = op;  // before seal(), which may fold the node
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return seal(std::move(e));
  }

  ExprPtr parse_math1() {
    int line = cur().line;
    ExprPtr left = parse_concat();
    while (is_op(Op::kAdd) || is_op(Op::kSub)) {
      BinOp op = next().op == Op::kAdd ? BinOp::kAdd : BinOp::kSub;
      left = math(op, std::move(left), parse_concat(), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op(Op::kTilde)) return first;
    auto e = make(ExprKind::kConcat, line);
    e->args.push_back(std::move(first));
    while (skip_op(Op::kTilde)) e->args.push_back(parse_math2());
    return seal(std::move(e));
  }

  ExprPtr parse_math2() {
    int line = cur().line;
    ExprPtr left = parse_pow();
    while (is_op(Op::kMul) || is_op(Op::kDiv) || is_op(Op::kFloorDiv) || is_op(Op::kMod)) {
      Op o = next().op;
      BinOp op = o == Op::kMul ? BinOp::kMul : o == Op::kDiv ? BinOp::kDiv : o == Op::kFloorDiv ? BinOp::kFloorDiv : BinOp::kMod;
      left = math(op, std::move(left), parse_pow(), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = cur().line;
    ExprPtr left = parse_unary(true);
    while (skip_op(Op::kPow)) {
      left = math(BinOp::kPow, std::move(left), parse_unary(true), line);
      line = cur().line;
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    int line = cur().line;
    ExprPtr node;
    if (skip_op(Op::kSub)) {
      node = make(ExprKind::kNeg, line);
      node->args.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else if (skip_op(Op::kAdd)) {
      node = make(ExprKind::kPos, line);
      node->args.push_back(parse_unary(false));
      node = seal(std::move(node));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    ExprPtr node;
    if (t.type == Tok::kName) {
      next();
      if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
        node = make(ExprKind::kConst, t.line);
        node->value = Value(t.text == "true" || t.text == "True");
      } else if (t.text == "none" || t.text == "None") {
        node = make(ExprKind::kConst, t.line);
        node->value = Value::none();
      } else {
        node = make(ExprKind::kName, t.line);
        node->name = t.text;
      }
    } else if (t.type == Tok::kString) {
      node = make(ExprKind::kConst, t.line);
      std::string s = next().text;
      while (cur().type == Tok::kString) s += next().text;
      node->value = Value(std::move(s));
    } else if (t.type == Tok::kInt) {
      node = make(ExprKind::kConst, t.line);
      node->value = Value(next().ival);
    } else if (t.type == Tok::kFloat) {
      node = make(ExprKind::kConst, t.line);
      node->value = Value(next().fval);
    } else if (is_op(Op::kLParen)) {
      next();
      node = parse_tuple(false, true, {}, true);
      expect_op(Op::kRParen, ")");
    } else if (is_op(Op::kLBracket)) {
      node = make(ExprKind::kList, next().line);
      while (!is_op(Op::kRBracket)) {
        if (!node->args.empty()) expect_op(Op::kComma, ",");
        if (is_op(Op::kRBracket)) break;
        node->args.push_back(parse_expression(true));
      }
      expect_op(Op::kRBracket, "]");
      node = seal(std::move(node));
    } else if (is_op(Op::kLBrace)) {
      node = make(ExprKind::kDict, next().line);
      while (!is_op(Op::kRBrace)) {
        if (!node->args.empty()) expect_op(Op::kComma, ",");
        if (is_op(Op::kRBrace)) break;
        node->args.push_back(parse_expression(true));
        expect_op(Op::kColon, ":");
        node->args.push_back(parse_expression(true));
      }
      expect_op(Op::kRBrace, "}");
      node = seal(std::move(node));
    } else {
      fail(t.line, fmt::format("unexpected '{}'", describe(t)));
    }
    return node;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(Op::kDot) || is_op(Op::kLBracket)) node = parse_subscript(std::move(node));
      else if (is_op(Op::kLParen)) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op(Op::kPipe)) node = parse_filter(std::move(node), false);
      else if (is_name("is")) node = parse_test(std::move(node));
      else if (is_op(Op::kLParen)) node = parse_call(std::move(node));
      else break;
    }
    return node;
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& t = next();
    if (t.op == Op::kDot) {
      const Token& a = next();
      if (a.type == Tok::kName) {
        auto e = make(ExprKind::kGetattr, t.line);
        e->target = std::move(node);
        e->name = a.text;
        return seal(std::move(e));
      }
      if (a.type != Tok::kInt) fail(a.line, "expected name or number");
      auto e = make(ExprKind::kGetitem, t.line);
      e->target = std::move(node);
      auto k = make(ExprKind::kConst, a.line);
      k->value = Value(a.ival);
      e->args.push_back(std::move(k));
      return seal(std::move(e));
    }
    std::vector<ExprPtr> args;
    while (!is_op(Op::kRBracket)) {
      if (!args.empty()) expect_op(Op::kComma, ",");
      args.push_back(parse_subscribed());
    }
    expect_op(Op::kRBracket, "]");
    auto e = make(ExprKind::kGetitem, t.line);
    e->target = std::move(node);
    if (args.size() == 1) {
      e->args.push_back(std::move(args[0]));
    } else {
      auto tup = make(ExprKind::kTuple, t.line);
      tup->args = std::move(args);
      e->args.push_back(seal(std::move(tup)));
    }
    return seal(std::move(e));
  }

  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> parts;
    if (skip_op(Op::kColon)) {
      parts.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!skip_op(Op::kColon)) return node;
      parts.push_back(std::move(node));
    }
    if (is_op(Op::kColon)) parts.push_back(nullptr);
    else if (!is_op(Op::kRBracket) && !is_op(Op::kComma)) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (skip_op(Op::kColon)) {
      if (!is_op(Op::kRBracket) && !is_op(Op::kComma)) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto e = make(ExprKind::kSlice, line);
    e->args = std::move(parts);
    return seal(std::move(e));
  }

  void parse_call_args(Expr& e) {
    int line = expect_op(Op::kLParen, "(").line;
    bool require_comma = false;
    auto ensure = [&](bool ok) {
      if (!ok) fail(line, "invalid syntax for function call expression");
    };
    while (!is_op(Op::kRParen)) {
      if (require_comma) {
        expect_op(Op::kComma, ",");
        if (is_op(Op::kRParen)) break;
      }
      if (skip_op(Op::kMul)) {
        ensure(!e.dyn_args && !e.dyn_kwargs);
        e.dyn_args = parse_expression(true);
      } else if (skip_op(Op::kPow)) {
        ensure(!e.dyn_kwargs);
        e.dyn_kwargs = parse_expression(true);
      } else if (cur().type == Tok::kName && look().type == Tok::kOp && look().op == Op::kAssign) {
        ensure(!e.dyn_kwargs);
        std::string key = next().text;
        next();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        ensure(!e.dyn_args && !e.dyn_kwargs && e.kwargs.empty());
        e.args.push_back(parse_expression(true));
      }
      require_comma = true;
    }
    expect_op(Op::kRParen, ")");
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur().line);
    e->target = std::move(node);
    parse_call_args(*e);
    return seal(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name().text;
    while (skip_op(Op::kDot)) name += "." + expect_name().text;
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op(Op::kPipe) || start_inline) {
      if (!start_inline) next();
      int line = cur().line;
      auto e = make(ExprKind::kFilter, line);
      e->name = dotted_name();
      e->target = std::move(node);
      if (is_op(Op::kLParen)) parse_call_args(*e);
      e->filter = find_filter(e->name);
      if (!e->filter && soft_ == 0)
        throw TemplateError(ErrorKind::kTemplateAssertionError, fmt::format("No filter named '{}'.", e->name), line);
      node = seal(std::move(e));
      start_inline = false;
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = next().line;
    bool negated = skip_name("not");
    auto e = make(ExprKind::kTest, line);
    e->name = dotted_name();
    e->target = std::move(node);
    const Token& t = cur();
    if (is_op(Op::kLParen)) {
      parse_call_args(*e);
    } else if ((t.type == Tok::kName || t.type == Tok::kString || t.type == Tok::kInt || t.type == Tok::kFloat ||
                is_op(Op::kLParen) || is_op(Op::kLBracket) || is_op(Op::kLBrace)) &&
               !(t.type == Tok::kName && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail(t.line, "You cannot chain multiple tests with is");
      e->args.push_back(parse_postfix(parse_primary()));
    }
    e->test = find_test(e->name);
    if (!e->test && soft_ == 0)
      throw TemplateError(ErrorKind::kTemplateAssertionError, fmt::format("No test named '{}'.", e->name), line);
    e = seal(std::move(e));
    if (!negated) return e;
    auto n = make(ExprKind::kNot, line);
    n->args.push_back(std::move(e));
    return seal(std::move(n));
  }

  // Marks which of caller/varargs/kwargs a macro body reads (jinja2 accepts extra arguments only then).
  static void scan_expr(const Expr* e, MacroDef& m) {
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
  static void scan_body(const Body& body, MacroDef& m) {
    for (const auto& s : body) {
      for (const auto& e : s->exprs) scan_expr(e.get(), m);
      scan_expr(s->filter.get(), m);
      if (s->kind == StmtKind::kMacro || s->kind == StmtKind::kCallBlock) {
        for (const auto& d : s->macro->defaults) scan_expr(d.get(), m);
        continue;  // a nested macro's own body does not make this macro take extra arguments
      }
      for (const auto& b : s->bodies) scan_body(b, m);
    }
  }
  static void scan_macro_names(MacroDef& m, const Body& body) {
    for (const auto& d : m.defaults) scan_expr(d.get(), m);
    scan_body(body, m);
  }

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

}  // namespace

Body parse_template(std::string_view source) { return Parser(tokenize(source)).parse(); }

}  // namespace ft::jinja
