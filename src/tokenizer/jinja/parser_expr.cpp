// Expression half of the Jinja parser: operator precedence, postfix/filter/test chains, call
// arguments, and jinja2's compile-time constant folding of literal subexpressions.
#include <algorithm>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/parser_impl.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja::detail {

bool Parser::is_tuple_end(const EndTags& extra) const {
  if (cur().type == Tok::kVarEnd || cur().type == Tok::kBlockEnd || is_op(Op::kRParen)) return true;
  return at_end_tag(extra);
}

ExprPtr Parser::make(ExprKind k, int line) {
  auto e = std::make_unique<Expr>(k, line);
  e->literal = k == ExprKind::kConst;
  return e;
}

// Records the height of a finished composite node; deep trees (e.g. "1+1+...+1" with thousands of
// terms) would overflow the stack when evaluated or destroyed, and jinja2's recursive compiler
// rejects them too.
ExprPtr Parser::seal(ExprPtr e) {
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
bool Parser::foldable_shape(const Expr& e) {
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
bool Parser::safe_repr(const Value& v) {
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

ExprPtr Parser::fold(ExprPtr e) {
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

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr, const EndTags& extra, bool explicit_parens) {
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

ExprPtr Parser::parse_expression(bool with_condexpr) {
  Nest nest(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
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

ExprPtr Parser::binary(ExprKind k, ExprPtr a, ExprPtr b, int line) {
  auto e = make(k, line);
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return seal(std::move(e));
}

ExprPtr Parser::parse_or() {
  int line = cur().line;
  ExprPtr left = parse_and();
  while (skip_name("or")) left = binary(ExprKind::kOr, std::move(left), parse_and(), line);
  return left;
}

ExprPtr Parser::parse_and() {
  int line = cur().line;
  ExprPtr left = parse_not();
  while (skip_name("and")) left = binary(ExprKind::kAnd, std::move(left), parse_not(), line);
  return left;
}

ExprPtr Parser::parse_not() {
  Nest nest(*this);
  if (is_name("not")) {
    auto e = make(ExprKind::kNot, next().line);
    e->args.push_back(parse_not());
    return seal(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
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

ExprPtr Parser::math(BinOp op, ExprPtr a, ExprPtr b, int line) {
  auto e = make(ExprKind::kBinary, line);
  e->op = op;  // before seal(), which may fold the node
  e->args.push_back(std::move(a));
  e->args.push_back(std::move(b));
  return seal(std::move(e));
}

ExprPtr Parser::parse_math1() {
  int line = cur().line;
  ExprPtr left = parse_concat();
  while (is_op(Op::kAdd) || is_op(Op::kSub)) {
    BinOp op = next().op == Op::kAdd ? BinOp::kAdd : BinOp::kSub;
    left = math(op, std::move(left), parse_concat(), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op(Op::kTilde)) return first;
  auto e = make(ExprKind::kConcat, line);
  e->args.push_back(std::move(first));
  while (skip_op(Op::kTilde)) e->args.push_back(parse_math2());
  return seal(std::move(e));
}

ExprPtr Parser::parse_math2() {
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

ExprPtr Parser::parse_pow() {
  int line = cur().line;
  ExprPtr left = parse_unary(true);
  while (skip_op(Op::kPow)) {
    left = math(BinOp::kPow, std::move(left), parse_unary(true), line);
    line = cur().line;
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
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

ExprPtr Parser::parse_primary() {
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

ExprPtr Parser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(Op::kDot) || is_op(Op::kLBracket)) node = parse_subscript(std::move(node));
    else if (is_op(Op::kLParen)) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op(Op::kPipe)) node = parse_filter(std::move(node), false);
    else if (is_name("is")) node = parse_test(std::move(node));
    else if (is_op(Op::kLParen)) node = parse_call(std::move(node));
    else break;
  }
  return node;
}

ExprPtr Parser::parse_subscript(ExprPtr node) {
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

ExprPtr Parser::parse_subscribed() {
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

void Parser::parse_call_args(Expr& e) {
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

ExprPtr Parser::parse_call(ExprPtr node) {
  auto e = make(ExprKind::kCall, cur().line);
  e->target = std::move(node);
  parse_call_args(*e);
  return seal(std::move(e));
}

std::string Parser::dotted_name() {
  std::string name = expect_name().text;
  while (skip_op(Op::kDot)) name += "." + expect_name().text;
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr node, bool start_inline) {
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

ExprPtr Parser::parse_test(ExprPtr node) {
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

}  // namespace ft::jinja::detail
