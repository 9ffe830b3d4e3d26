#include "tokenizer/jinja/objects.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {

Value Namespace::get_attr(const std::string& name) const {
  if (const Value* v = attrs.find(std::string_view(name))) return *v;
  return Object::get_attr(name);
}

bool Namespace::set_attr(const std::string& name, const Value& value) {
  attrs.set(Value(name), value);
  return true;
}

std::string Namespace::str() const {
  const CycleGuard guard(this);  // an attribute that holds the namespace prints as Python's reprlib does
  if (guard.reentered()) return "<Namespace {...}>";
  return "<Namespace " + Value::dict(std::make_shared<Dict>(attrs)).to_str() + ">";
}

Value LoopContext::get_attr(const std::string& name) const {
  const int64_t n = static_cast<int64_t>(items_.size());
  const int64_t i = static_cast<int64_t>(index0_);
  if (name == "index") return Value(i + 1);
  if (name == "index0") return Value(i);
  if (name == "length") return Value(n);
  if (name == "revindex") return Value(n - i);
  if (name == "revindex0") return Value(n - i - 1);
  if (name == "first") return Value(i == 0);
  if (name == "last") return Value(i == n - 1);
  if (name == "depth") return Value(static_cast<int64_t>(depth0_) + 1);
  if (name == "depth0") return Value(static_cast<int64_t>(depth0_));
  if (name == "previtem") {
    if (i == 0) return Value::undefined_hint("there is no previous item");
    return items_[index0_ - 1];
  }
  if (name == "nextitem") {
    if (i + 1 >= n) return Value::undefined_hint("there is no next item");
    return items_[index0_ + 1];
  }
  if (name == "cycle" || name == "changed") {
    auto self = std::const_pointer_cast<Object>(shared_from_this());
    return Value::object(std::make_shared<BoundMethod>(Value::object(self), name));
  }
  return Object::get_attr(name);
}

bool LoopContext::call_method(Interpreter&, const std::string& name, CallArgs& args, Value& result) const {
  if (name == "cycle") {
    if (args.pos.empty()) raise(ErrorKind::kTypeError, "no items for cycling given");
    result = args.pos[index0_ % args.pos.size()];
    return true;
  }
  if (name == "changed") {
    bool same = changed_called_ && last_changed_.size() == args.pos.size();
    for (size_t k = 0; same && k < args.pos.size(); ++k) same = equals(last_changed_[k], args.pos[k]);
    changed_called_ = true;
    last_changed_ = args.pos;
    result = Value(!same);
    return true;
  }
  return false;
}

Value LoopContext::call(Interpreter& in, CallArgs& args) const {
  if (!recursive_)
    raise(ErrorKind::kTypeError, "The loop must be marked as recursive ('recursive' modifier) to be called");
  if (args.pos.size() != 1) raise(ErrorKind::kTypeError, "loop() takes exactly one argument");
  return Value(in.render_loop(*recursive_, scope_, args.pos[0], depth0_ + 1));
}

std::string LoopContext::str() const {
  return fmt::format("<LoopContext {}/{}>", index0_ + 1, items_.size());
}

Value Macro::get_attr(const std::string& name) const {
  if (name == "name") return def_->name.empty() ? Value::none() : Value(def_->name);
  if (name == "arguments") {
    std::vector<Value> a;
    for (const auto& p : def_->params) a.emplace_back(p);
    return Value::tuple(std::move(a));
  }
  if (name == "catch_kwargs") return Value(def_->uses_kwargs);
  if (name == "catch_varargs") return Value(def_->uses_varargs);
  if (name == "caller") return Value(def_->uses_caller);
  return Object::get_attr(name);
}

Value Macro::call(Interpreter& in, CallArgs& args) const {
  const std::shared_ptr<Scope> scope = in.new_scope(closure_);
  const auto& params = def_->params;
  std::vector<bool> bound(params.size(), false);
  size_t npos = args.pos.size();
  if (npos > params.size() && !def_->uses_varargs)
    raise(ErrorKind::kTypeError, "macro '{}' takes not more than {} argument(s)", def_->name, params.size());
  for (size_t i = 0; i < params.size() && i < npos; ++i) {
    scope->set(params[i], args.pos[i]);
    bound[i] = true;
  }
  auto extra_kw = std::make_shared<Dict>();
  Value caller;
  for (auto& kv : args.kw) {
    size_t k = 0;
    while (k < params.size() && params[k] != kv.first) ++k;
    if (k < params.size()) {
      if (bound[k]) raise(ErrorKind::kTypeError, "macro '{}' got multiple values for argument '{}'", def_->name, kv.first);
      scope->set(params[k], kv.second);
      bound[k] = true;
    } else if (kv.first == "caller" && def_->uses_caller) {
      caller = kv.second;
    } else if (def_->uses_kwargs) {
      extra_kw->set(Value(kv.first), kv.second);
    } else if (kv.first == "caller") {
      raise(ErrorKind::kTypeError,
            "macro '{}' was invoked with two values for the special caller argument. This is most likely a bug.",
            def_->name);
    } else {
      raise(ErrorKind::kTypeError, "macro '{}' takes no keyword argument '{}'", def_->name, kv.first);
    }
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (bound[i]) continue;
    if (def_->defaults[i]) scope->set(params[i], in.eval(*def_->defaults[i], *scope));
    else scope->set(params[i], Value::undefined_hint(fmt::format("parameter '{}' was not provided", params[i])));
  }
  if (def_->uses_varargs) {
    std::vector<Value> rest;
    for (size_t i = params.size(); i < npos; ++i) rest.push_back(args.pos[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  }
  if (def_->uses_kwargs) scope->set("kwargs", Value::dict(extra_kw));
  if (def_->uses_caller)
    scope->set("caller", caller.is_undefined() ? Value::undefined_hint("No caller defined") : caller);
  return Value(in.render_body(*body_, scope));
}

std::string Macro::str() const { return def_->name.empty() ? "<Macro anonymous>" : "<Macro '" + def_->name + "'>"; }

Value BoundMethod::call(Interpreter& in, CallArgs& args) const { return ::ft::jinja::call_method(in, self_, name_, args); }

std::string BoundMethod::str() const {
  return fmt::format("<built-in method {} of {} object>", name_, self_.type_name());
}

Value Cycler::get_attr(const std::string& name) const {
  if (name == "current") return items_.empty() ? Value::none() : items_[pos_];
  if (name == "items") return Value::list(items_);
  return Object::get_attr(name);
}

bool Cycler::call_method(Interpreter&, const std::string& name, CallArgs&, Value& result) const {
  if (name == "next" || name == "__next__") {
    result = items_[pos_];
    pos_ = (pos_ + 1) % items_.size();
    return true;
  }
  if (name == "reset") {
    pos_ = 0;
    result = Value::none();
    return true;
  }
  return false;
}

Value Joiner::call(Interpreter&, CallArgs&) const {
  if (!used_) {
    used_ = true;
    return Value("");
  }
  return Value(sep_);
}

}  // namespace ft::jinja
