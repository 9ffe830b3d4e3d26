#include "tokenizer/jinja/interpreter.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/objects.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {

namespace {
constexpr int kMaxMacroDepth = 200;  // Python's recursion limit would stop a runaway template too
}

const Value* Scope::find(std::string_view name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& kv : s->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}

void Scope::set(std::string_view name, Value v) {
  for (auto& kv : vars) {
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  }
  vars.emplace_back(std::string(name), std::move(v));
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.list().items;
    case Value::Kind::kIter: {
      const List& l = v.list();
      if (!l.single_pass) return l.items;
      std::vector<Value> rest(l.items.begin() + static_cast<std::ptrdiff_t>(std::min(l.pos, l.items.size())), l.items.end());
      l.pos = l.items.size();
      return rest;
    }
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict_ref().items.size());
      for (const auto& kv : v.dict_ref().items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      const std::string& s = v.str();
      for (size_t i = 0; i < s.size();) {
        size_t j = i;
        py::next_cp(s, j);
        chars.emplace_back(s.substr(i, j - i));  // iterating a Markup yields plain str characters
        i = j;
      }
      return chars;
    }
    case Value::Kind::kObject:
      if (auto* loop = dynamic_cast<LoopContext*>(v.object_ptr())) return loop->items();
      [[fallthrough]];
    default:
      raise(ErrorKind::kTypeError, "'{}' object is not iterable", v.type_name());
  }
}

std::string Interpreter::render(const Body& body, std::shared_ptr<Scope> globals) {
  std::string out;
  out.reserve(4096);
  out_ = &out;
  struct Cleanup {  // empty every scope and namespace of this render (breaks their cycles), also on errors
    std::vector<std::shared_ptr<Scope>>& scopes;
    std::vector<std::shared_ptr<Namespace>>& namespaces;
    ~Cleanup() {
      for (const auto& s : scopes) s->vars.clear();
      scopes.clear();
      for (const auto& ns : namespaces) ns->attrs = Dict();
      namespaces.clear();
    }
  } cleanup{scopes_, namespaces_};
  scopes_.push_back(globals);
  exec_body(body, new_scope(std::move(globals)));
  out_ = nullptr;
  return out;
}

std::shared_ptr<Scope> Interpreter::new_scope(std::shared_ptr<Scope> parent) {
  scopes_.push_back(std::make_shared<Scope>(std::move(parent)));
  return scopes_.back();
}

std::string Interpreter::render_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  if (++depth_ > kMaxMacroDepth) {
    --depth_;
    raise(ErrorKind::kTemplateRuntimeError, "maximum recursion depth exceeded ({} nested macro calls)", kMaxMacroDepth);
  }
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body, scope);
  } catch (...) {
    out_ = saved;
    --depth_;
    throw;
  }
  out_ = saved;
  --depth_;
  return buf;
}

std::string Interpreter::render_child(const Body& body, const std::shared_ptr<Scope>& parent, int* flow) {
  const std::shared_ptr<Scope> child = new_scope(parent);
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  Flow f;
  try {
    f = exec_body(body, child);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  if (flow) *flow = static_cast<int>(f);
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const std::shared_ptr<Scope>& scope) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Target& t, const Value& v, Scope& scope) {
  switch (t.kind) {
    case Target::Kind::kName: scope.set(t.name, v); return;
    case Target::Kind::kNsRef: {
      const Value* ns = scope.find(t.name);
      if (!ns || !ns->is_object() || !ns->object_ptr()->set_attr(t.attr, v))
        raise(ErrorKind::kTemplateRuntimeError, "cannot assign attribute on non-namespace object");
      return;
    }
    case Target::Kind::kTuple: {
      if (v.is_undefined()) v.raise_undefined();
      std::vector<Value> items = iterate(v);
      if (items.size() > t.items.size())
        raise(ErrorKind::kValueError, "too many values to unpack (expected {})", t.items.size());
      if (items.size() < t.items.size())
        raise(ErrorKind::kValueError, "not enough values to unpack (expected {}, got {})", t.items.size(), items.size());
      for (size_t i = 0; i < items.size(); ++i) assign(t.items[i], items[i], scope);
      return;
    }
  }
}

void Interpreter::step() {
  if (++steps_ > options_.max_steps)
    raise(ErrorKind::kTemplateRuntimeError, "the template ran more than {} steps (a loop without end?)",
          options_.max_steps);
}

void Interpreter::check_size(size_t bytes) const {
  if (bytes > options_.max_bytes)
    raise(ErrorKind::kOverflowError, "the template built more than {} bytes of text or list", options_.max_bytes);
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  const Flow f = exec_stmt(s, scope);
  if (out_ && out_->size() > options_.max_bytes) {  // the output (or block buffer) it appended to
    try {
      check_size(out_->size());
    } catch (const TemplateError& e) {
      throw e.at_line(s.line);
    }
  }
  return f;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, const std::shared_ptr<Scope>& scope) {
  try {
    step();
    switch (s.kind) {
      case StmtKind::kText: *out_ += s.text; return Flow::kNormal;
      case StmtKind::kOutput:
        for (const auto& e : s.exprs) {
          if (!e->literal || e->kind == ExprKind::kConst) {
            eval(*e, *scope).append_to(*out_);
            continue;
          }
          // A literal {{ output }} jinja2 could not fold into a constant (its value is undefined or has
          // no safe repr) is still computed at compile time: same folding rules, else runtime rules.
          Value v;
          bool folded = true;
          try {
            v = eval_folding(*e);
          } catch (const TemplateError&) {
            folded = false;
          }
          (folded ? v : eval(*e, *scope)).append_to(*out_);
        }
        return Flow::kNormal;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.exprs.size(); ++i)
          if (eval(*s.exprs[i], *scope).truthy()) return exec_body(s.bodies[i], scope);
        if (s.has_else) return exec_body(s.bodies.back(), scope);
        return Flow::kNormal;
      case StmtKind::kFor: return exec_for(s, scope, eval(*s.exprs[0], *scope), 0);
      case StmtKind::kSet: assign(s.target, eval(*s.exprs[0], *scope), *scope); return Flow::kNormal;
      case StmtKind::kSetBlock: {
        int flow = 0;
        Value text(render_child(s.bodies[0], scope, &flow));
        if (static_cast<Flow>(flow) != Flow::kNormal) return static_cast<Flow>(flow);
        assign(s.target, s.filter ? eval_filter_chain(*s.filter, *scope, text) : text, *scope);
        return Flow::kNormal;
      }
      case StmtKind::kMacro:
        scope->set(s.macro->name, Value::object(std::make_shared<Macro>(s.macro.get(), &s.bodies[0], scope)));
        return Flow::kNormal;
      case StmtKind::kCallBlock: {
        const Expr& call = *s.exprs[0];
        CallArgs args;
        eval_args(call, *scope, args);
        args.kw.emplace_back("caller", Value::object(std::make_shared<Macro>(s.macro.get(), &s.bodies[0], scope)));
        Value callee = eval(*call.target, *scope);
        call_value(callee, args).append_to(*out_);
        return Flow::kNormal;
      }
      case StmtKind::kFilterBlock: {
        int flow = 0;
        Value text(render_child(s.bodies[0], scope, &flow));
        if (static_cast<Flow>(flow) != Flow::kNormal) return static_cast<Flow>(flow);
        eval_filter_chain(*s.filter, *scope, text).append_to(*out_);
        return Flow::kNormal;
      }
      case StmtKind::kWith: {
        const std::shared_ptr<Scope> inner = new_scope(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) assign(s.targets[i], eval(*s.exprs[i], *scope), *inner);
        return exec_body(s.bodies[0], inner);
      }
      case StmtKind::kBreak: return Flow::kBreak;
      case StmtKind::kContinue: return Flow::kContinue;
      case StmtKind::kScope: *out_ += render_child(s.bodies[0], scope); return Flow::kNormal;
    }
  } catch (const TemplateError& e) {
    if (e.line() > 0) throw;
    throw e.at_line(s.line);
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const std::shared_ptr<Scope>& scope, const Value& iterable,
                                        int depth0) {
  std::vector<Value> items = iterate(iterable);
  const std::shared_ptr<Scope> inner = new_scope(scope);
  if (s.exprs.size() > 1) {  // {% for x in xs if cond %}: filter before the loop counts items
    std::vector<Value> kept;
    for (auto& v : items) {
      inner->vars.clear();
      assign(s.target, v, *inner);
      if (eval(*s.exprs[1], *inner).truthy()) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    if (!s.bodies[1].empty()) {
      inner->vars.clear();
      return exec_body(s.bodies[1], inner);  // break/continue here belong to an enclosing loop
    }
    return Flow::kNormal;
  }
  auto loop = std::make_shared<LoopContext>(std::move(items), depth0);
  if (s.recursive) loop->set_recursive(&s, scope);
  Value loop_value = Value::object(loop);
  const auto& list = loop->items();
  for (size_t i = 0; i < list.size(); ++i) {
    loop->set_index(i);
    inner->vars.clear();
    inner->vars.emplace_back("loop", loop_value);
    assign(s.target, list[i], *inner);
    if (exec_body(s.bodies[0], inner) == Flow::kBreak) break;
  }
  return Flow::kNormal;
}

std::string Interpreter::render_loop(const Stmt& s, const std::shared_ptr<Scope>& scope, const Value& iterable,
                                     int depth0) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_for(s, scope, iterable, depth0);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Value Interpreter::lookup(const std::string& name, Scope& scope) {
  if (const Value* v = scope.find(name)) return *v;
  Value g = find_global(name);
  if (!g.is_undefined()) return g;
  return Value::undefined_name(name);
}

void Interpreter::eval_args(const Expr& e, Scope& scope, CallArgs& out) {
  out.pos.reserve(e.args.size());
  for (const auto& a : e.args) out.pos.push_back(eval(*a, scope));
  for (const auto& kv : e.kwargs) out.kw.emplace_back(kv.first, eval(*kv.second, scope));
  if (e.dyn_args) {
    for (auto& v : iterate(eval(*e.dyn_args, scope))) out.pos.push_back(std::move(v));
  }
  if (e.dyn_kwargs) {
    Value d = eval(*e.dyn_kwargs, scope);
    if (!d.is_dict()) raise(ErrorKind::kTypeError, "argument after ** must be a mapping, not {}", d.type_name());
    for (const auto& kv : d.dict_ref().items) {
      if (!kv.first.is_string()) raise(ErrorKind::kTypeError, "keywords must be strings");
      out.kw.emplace_back(kv.first.str(), kv.second);
    }
  }
}

Value Interpreter::call_value(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) callee.raise_undefined();
  if (callee.is_object() && callee.object_ptr()->callable()) return callee.object_ptr()->call(*this, args);
  raise(ErrorKind::kTypeError, "'{}' object is not callable", callee.type_name());
}

Value Interpreter::eval_call(const Expr& e, Scope& scope) {
  if (e.target->kind == ExprKind::kGetattr) {  // method call fast path: obj.name(args)
    Value self = eval(*e.target->target, scope);
    if (self.is_undefined()) self.raise_undefined();
    CallArgs args;
    eval_args(e, scope, args);
    return call_method(*this, self, e.target->name, args);
  }
  Value callee = eval(*e.target, scope);
  CallArgs args;
  eval_args(e, scope, args);
  return call_value(callee, args);
}

Value Interpreter::apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) raise(ErrorKind::kTemplateRuntimeError, "No filter named '{}' found.", name);
  return f(*this, input, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& input, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) raise(ErrorKind::kTemplateRuntimeError, "No test named '{}' found.", name);
  return t(*this, input, args);
}

Value Interpreter::eval_filter_chain(const Expr& f, Scope& scope, const Value& block_input) {
  Value input = f.target ? (f.target->kind == ExprKind::kFilter ? eval_filter_chain(*f.target, scope, block_input)
                                                                 : eval(*f.target, scope))
                         : block_input;
  CallArgs args;
  eval_args(f, scope, args);
  if (!f.filter) raise(ErrorKind::kTemplateRuntimeError, "No filter named '{}' found.", f.name);
  return f.filter(*this, input, args);
}

Value Interpreter::slice_value(const Value& obj, const Expr& key, Scope& scope) {
  if (obj.is_undefined()) obj.raise_undefined();
  std::optional<int64_t> b[3];
  for (int k = 0; k < 3; ++k) {
    if (!key.args[k]) continue;
    Value v = eval(*key.args[k], scope);
    if (v.is_none()) continue;
    if (!v.is_int())  // slices bypass the sandbox's getitem in jinja2: Python's errors show
      raise(ErrorKind::kTypeError, "slice indices must be integers or None or have an __index__ method");
    b[k] = v.as_int();
  }
  if (obj.is_string()) return Value(py::slice(obj.str(), b[0], b[1], b[2]), obj.markup());
  if (obj.is_list()) {
    std::vector<Value> items;
    const auto& src = obj.list().items;
    for (int64_t i : py::slice_indices(static_cast<int64_t>(src.size()), b[0], b[1], b[2]))
      items.push_back(src[static_cast<size_t>(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  if (obj.is_range()) {  // range(a, b, s)[i:j:k] == range(a + i*s, a + j*s, s*k) with slice.indices(len)
    const List& r = obj.list();
    int64_t n = static_cast<int64_t>(r.items.size()), k = b[2].value_or(1);
    if (k == 0) raise(ErrorKind::kValueError, "slice step cannot be zero");
    auto bound = [&](std::optional<int64_t> v, int64_t dflt) {
      if (!v) return dflt;
      int64_t x = *v < 0 ? *v + n : *v;
      return k > 0 ? std::clamp<int64_t>(x, 0, n) : std::clamp<int64_t>(x, -1, n - 1);
    };
    int64_t i = bound(b[0], k > 0 ? 0 : n - 1), j = bound(b[1], k > 0 ? n : -1);
    return Value::range(r.range[0] + i * r.range[2], r.range[0] + j * r.range[2], r.range[2] * k);
  }
  if (obj.is_dict()) raise(ErrorKind::kTypeError, "unhashable type: 'slice'");
  raise(ErrorKind::kTypeError, "'{}' object is not subscriptable", obj.type_name());
}

Value Interpreter::eval_folding(const Expr& e) {
  Scope empty;
  bool saved = folding_;
  folding_ = true;
  try {
    Value v = eval(e, empty);
    folding_ = saved;
    return v;
  } catch (...) {
    folding_ = saved;
    throw;
  }
}

Value Interpreter::eval(const Expr& e, Scope& scope) {
  step();
  Value v = eval_expr(e, scope);
  if (v.is_string() || v.is_list() || v.is_dict()) check_size(v.footprint());
  return v;
}

Value Interpreter::eval_expr(const Expr& e, Scope& scope) {
  if (folding_ && !e.literal) raise(ErrorKind::kTemplateRuntimeError, "not a constant");  // jinja2: Impossible
  switch (e.kind) {
    case ExprKind::kConst: return e.value;
    case ExprKind::kName: return lookup(e.name, scope);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      items.reserve(e.args.size());
      for (const auto& a : e.args) items.push_back(eval(*a, scope));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      auto d = std::make_shared<Dict>();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) d->set(eval(*e.args[i], scope), eval(*e.args[i + 1], scope));
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr: return get_attr(eval(*e.target, scope), e.name);
    case ExprKind::kGetitem: {
      Value obj = eval(*e.target, scope);
      const Expr& key = *e.args[0];
      if (key.kind != ExprKind::kSlice) return get_item(obj, eval(key, scope));
      if (folding_) {
        try {
          return slice_value(obj, key, scope);
        } catch (const TemplateError& err) {
          if (err.kind() != ErrorKind::kTypeError) throw;
          return Value::undefined_missing(obj.type_name(), "slice", true);
        }
      }
      return slice_value(obj, key, scope);
    }
    case ExprKind::kSlice: raise(ErrorKind::kTemplateSyntaxError, "slice outside of a subscript");
    case ExprKind::kCall: return eval_call(e, scope);
    case ExprKind::kFilter: return eval_filter_chain(e, scope, Value());
    case ExprKind::kTest: {
      Value input = eval(*e.target, scope);
      CallArgs args;
      eval_args(e, scope, args);
      if (!e.test) raise(ErrorKind::kTemplateRuntimeError, "No test named '{}' found.", e.name);
      return Value(e.test(*this, input, args));
    }
    case ExprKind::kNeg: return negate(eval(*e.args[0], scope));
    case ExprKind::kPos: return unary_plus(eval(*e.args[0], scope));
    case ExprKind::kNot: return Value(!eval(*e.args[0], scope).truthy());
    case ExprKind::kBinary:
      if (e.op == BinOp::kPow && !folding_ && e.args[0]->kind == ExprKind::kConst && e.args[0]->value.is_number() &&
          (e.args[0]->value.is_float() ? std::signbit(e.args[0]->value.as_float()) : e.args[0]->value.as_int() < 0)) {
        // jinja2 writes a folded negative constant into its generated Python as "-1.5", so an unfolded
        // "-1.5 ** x" runs as -(1.5 ** x).
        return negate(binary_op(BinOp::kPow, negate(e.args[0]->value), eval(*e.args[1], scope)));
      }
      return binary_op(e.op, eval(*e.args[0], scope), eval(*e.args[1], scope));
    case ExprKind::kAnd: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? eval(*e.args[1], scope) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.args[0], scope);
      return a.truthy() ? a : eval(*e.args[1], scope);
    }
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& a : e.args) eval(*a, scope).append_to(s);
      return Value(std::move(s));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.args[0], scope);
      for (size_t i = 0; i < e.cmp.size(); ++i) {
        Value right = eval(*e.args[i + 1], scope);
        if (!compare(e.cmp[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondExpr:
      if (eval(*e.args[0], scope).truthy()) return eval(*e.args[1], scope);
      if (e.args[2]) return eval(*e.args[2], scope);
      return Value::undefined_hint(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.", e.line));
  }
  return Value();
}

}  // namespace ft::jinja
