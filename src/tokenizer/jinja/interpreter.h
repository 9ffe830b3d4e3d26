#pragma once
// Tree-walking renderer for parsed Jinja templates. Scoping follows jinja2's compiled code: `if` shares
// its enclosing scope, each for-loop iteration, macro call, with/filter/set block body gets a child
// scope (assignments inside do not leak out), macros see their defining scope at call time (late
// binding, like Python closures), and namespace() objects carry state across scopes.
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace ft::jinja {

/** Variables of one scope; lookups walk the parent chain. */
class Namespace;

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  explicit Scope(std::shared_ptr<Scope> p = nullptr) : parent(std::move(p)) {}
  /** Nearest binding of name, or null. */
  const Value* find(std::string_view name) const;
  /** Binds name in this scope. */
  void set(std::string_view name, Value v);
};


struct RenderOptions {
  /** Clock read by strftime_now(); nullopt = the current local time. */
  std::optional<std::tm> now;
  /** Most statements and expressions one render may evaluate: a template that loops without end
   *  (nested range() loops, recursive macros over growing data) fails with a TemplateRuntimeError
   *  instead of running on. Real chat templates take a few thousand per message. */
  int64_t max_steps = 10'000'000;
  /** Most bytes of text (the output, any block's buffer, any one string value) and of list storage
   *  one render may build: a template that doubles a string or list fails with an OverflowError
   *  instead of exhausting memory. */
  size_t max_bytes = size_t{64} << 20;
};

class Interpreter {
 public:
  explicit Interpreter(const RenderOptions& options) : options_(options) {}

  /** Renders body with `globals` as the outermost scope. Throws TemplateError with the line. */
  std::string render(const Body& body, std::shared_ptr<Scope> globals);

  /** Evaluates an expression (counted against RenderOptions::max_steps; a string or list result
   *  larger than max_bytes raises OverflowError). */
  Value eval(const Expr& e, Scope& scope);
  /** Evaluates a literal-only expression as jinja2's compile-time constant folding does. */
  Value eval_folding(const Expr& e);
  /** Calls a callable value (macro, builtin, bound method); TypeError/UndefinedError otherwise. */
  Value call_value(const Value& callee, CallArgs& args);
  /** Applies filter `name` (for map/select style filters that take a filter or test name). */
  Value apply_filter(const std::string& name, const Value& input, CallArgs& args);
  bool apply_test(const std::string& name, const Value& input, CallArgs& args);
  /** Renders a body with its own output buffer in `scope`; returns the text. */
  std::string render_body(const Body& body, const std::shared_ptr<Scope>& scope);
  /** Renders a body in a fresh child scope of `parent`. A {% break %} or
   *  {% continue %} inside ({% set %}/{% filter %} blocks are inlined in jinja2's generated code, so
   *  they reach the enclosing loop) is returned through `flow` when given. */
  std::string render_child(const Body& body, const std::shared_ptr<Scope>& parent, int* flow = nullptr);
  /** Runs a for statement over `iterable` (used by recursive loops: loop(children)). */
  std::string render_loop(const Stmt& s, const std::shared_ptr<Scope>& scope, const Value& iterable, int depth0);

  const RenderOptions& options() const { return options_; }

  /** A new scope under `parent`, kept until render() ends. A macro holds its defining scope and that
   *  scope may hold the macro: render() empties every scope it made when it returns (also when an
   *  error unwinds), which breaks such cycles; until then a macro stored outside its block (in a
   *  namespace, a returned value) still sees the variables of the scope it was defined in. */
  std::shared_ptr<Scope> new_scope(std::shared_ptr<Scope> parent);

  /** Keeps `ns` (a namespace() of this render) until render() ends, which empties it (also when an
   *  error unwinds): an attribute may hold the namespace itself (`{% set ns.s = ns, 1 %}`), a
   *  reference cycle its shared_ptr count would never free. */
  void own_namespace(std::shared_ptr<Namespace> ns) { namespaces_.push_back(std::move(ns)); }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const std::shared_ptr<Scope>& scope);
  Flow exec(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Flow exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope);
  Flow exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, const Value& iterable, int depth0);
  void assign(const Target& t, const Value& v, Scope& scope);
  Value eval_call(const Expr& e, Scope& scope);
  Value slice_value(const Value& obj, const Expr& slice, Scope& scope);
  Value eval_filter_chain(const Expr& f, Scope& scope, const Value& block_input);
  void eval_args(const Expr& e, Scope& scope, CallArgs& out);
  Value lookup(const std::string& name, Scope& scope);
  Value eval_expr(const Expr& e, Scope& scope);
  /** Counts one step against max_steps. */
  void step();
  /** Raises OverflowError when `bytes` of text or list storage exceed max_bytes. */
  void check_size(size_t bytes) const;

  const RenderOptions& options_;
  std::string* out_ = nullptr;
  int depth_ = 0;         // macro call depth (recursion guard)
  int64_t steps_ = 0;     // statements and expressions evaluated (RenderOptions::max_steps)
  std::vector<std::shared_ptr<Scope>> scopes_;  // every scope of this render, emptied at its end
  std::vector<std::shared_ptr<Namespace>> namespaces_;  // every namespace() of this render, emptied at its end
  bool folding_ = false;  // evaluating a literal {{ output }}, which jinja2 constant-folds
};

/** Python-style sequence view of a value for iteration: list/tuple items, dict keys, str characters;
 *  Undefined iterates as empty. TypeError ("'int' object is not iterable") otherwise. */
std::vector<Value> iterate(const Value& v);

}  // namespace ft::jinja
