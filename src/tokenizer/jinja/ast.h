#pragma once
// Syntax tree of a parsed Jinja template (the node set of jinja2.nodes that chat templates need).
// Expressions and statements each carry the template line they start on, for error messages.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ft::jinja {

enum class ExprKind : uint8_t {
  kConst,     // value
  kName,      // name
  kList,      // args = items
  kTuple,     // args = items
  kDict,      // args = key0, value0, key1, value1, ...
  kGetattr,   // target.name
  kGetitem,   // target[args[0]]
  kSlice,     // args = start, stop, step (each may be null); only as a Getitem key
  kCall,      // target(args, kwargs, *dyn_args, **dyn_kwargs)
  kFilter,    // target | name(args...); target null inside {% filter %} / {% set x | f %} blocks
  kTest,      // target is name(args...)
  kNeg,       // -args[0]
  kPos,       // +args[0]
  kNot,       // not args[0]
  kBinary,    // args[0] op args[1]
  kAnd,       // args[0] and args[1]
  kOr,        // args[0] or args[1]
  kConcat,    // args joined with ~
  kCompare,   // args[0] cmp[0] args[1] cmp[1] args[2] ...
  kCondExpr,  // args[1] if args[0] else args[2] (args[2] may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

using FilterFn = Value (*)(Interpreter& in, const Value& input, CallArgs& args);
using TestFn = bool (*)(Interpreter& in, const Value& input, CallArgs& args);

struct Expr {
  ExprKind kind;
  int line = 0;
  Value value;                 // kConst
  std::string name;            // kName, kGetattr attribute, kFilter/kTest name
  BinOp op = BinOp::kAdd;      // kBinary
  std::vector<CmpOp> cmp;      // kCompare
  ExprPtr target;              // object / callee / filtered or tested value
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  ExprPtr dyn_args, dyn_kwargs;
  FilterFn filter = nullptr;   // kFilter resolved at parse time (null: unknown, fails when evaluated)
  TestFn test = nullptr;       // kTest resolved at parse time
  int depth = 1;               // height of this subtree (bounded by the parser)
  bool literal = false;        // built from literals only: jinja2 folds such {{ output }} at compile time

  Expr(ExprKind k, int l) : kind(k), line(l) {}
};

/** Assignment target: a name, namespace attribute (ns.attr) or tuple of targets. */
struct Target {
  enum class Kind : uint8_t { kName, kNsRef, kTuple } kind = Kind::kName;
  std::string name;  // variable (kName) or namespace variable (kNsRef)
  std::string attr;  // kNsRef attribute
  std::vector<Target> items;
  int line = 0;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // exprs: each printed
  kIf,           // exprs: one test per branch; bodies: one per branch, plus else when has_else
  kFor,          // target in exprs[0] [if exprs[1]]; bodies[0] = body, bodies[1] = else
  kSet,          // target = exprs[0]
  kSetBlock,     // target = render(bodies[0]) | filter (filter optional)
  kMacro,        // macro name(params) bodies[0]
  kCallBlock,    // exprs[0] = the call, with `caller` = macro(params) bodies[0]
  kFilterBlock,  // filter(render(bodies[0]))
  kWith,         // targets = exprs; bodies[0]
  kBreak,
  kContinue,
  kScope,        // bodies[0] rendered in place ({% generation %})
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

/** A macro's (or call block's caller's) signature. */
struct MacroDef {
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // aligned with params; null = required
  bool uses_caller = false, uses_varargs = false, uses_kwargs = false;
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;                 // kText
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
  bool has_else = false;            // kIf
  bool recursive = false;           // kFor
  Target target;                    // kFor, kSet, kSetBlock
  std::vector<Target> targets;      // kWith
  ExprPtr filter;                   // kSetBlock / kFilterBlock filter chain (innermost target null)
  std::unique_ptr<MacroDef> macro;  // kMacro, kCallBlock (body = bodies[0])

  Stmt(StmtKind k, int l) : kind(k), line(l) {}
};

}  // namespace ft::jinja
