#pragma once
// Host objects the interpreter exposes to templates: namespace(), the `loop` variable, macros,
// bound methods ("abc".upper), builtin functions (range, raise_exception, ...), cycler and joiner.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/jinja/interpreter.h"

namespace ft::jinja {

/** jinja2.utils.Namespace: attributes assignable with {% set ns.attr = ... %}. */
class Namespace : public Object {
 public:
  Dict attrs;
  const char* type_name() const override { return "Namespace"; }
  Value get_attr(const std::string& name) const override;
  bool set_attr(const std::string& name, const Value& value) override;
  std::string str() const override;
};

/** jinja2.runtime.LoopContext over a materialized item list. */
class LoopContext : public Object {
 public:
  LoopContext(std::vector<Value> items, int depth0) : items_(std::move(items)), depth0_(depth0) {}
  const char* type_name() const override { return "LoopContext"; }
  Value get_attr(const std::string& name) const override;
  bool callable() const override { return recursive_ != nullptr; }
  /** loop(children) in a recursive loop: renders the loop body over children one level deeper. */
  Value call(Interpreter& in, CallArgs& args) const override;
  bool call_method(Interpreter& in, const std::string& name, CallArgs& args, Value& result) const override;
  std::string str() const override;

  const std::vector<Value>& items() const { return items_; }
  void set_index(size_t i) { index0_ = i; }
  /** Makes the loop callable (recursive loops). */
  void set_recursive(const Stmt* stmt, std::shared_ptr<Scope> scope) {
    recursive_ = stmt;
    scope_ = std::move(scope);
  }

 private:
  std::vector<Value> items_;
  size_t index0_ = 0;
  int depth0_;
  mutable std::vector<Value> last_changed_;
  mutable bool changed_called_ = false;
  const Stmt* recursive_ = nullptr;
  std::shared_ptr<Scope> scope_;
};

/** A {% macro %} (or a call block's `caller`), closing over its defining scope. */
class Macro : public Object {
 public:
  Macro(const MacroDef* def, const Body* body, std::shared_ptr<Scope> closure)
      : def_(def), body_(body), closure_(std::move(closure)) {}
  const char* type_name() const override { return "Macro"; }
  Value get_attr(const std::string& name) const override;
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override;
  std::string str() const override;

 private:
  const MacroDef* def_;
  const Body* body_;
  std::shared_ptr<Scope> closure_;
};

/** A method bound to its receiver (`"abc".upper` without the call). */
class BoundMethod : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  const char* type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override;
  std::string str() const override;

 private:
  Value self_;
  std::string name_;
};

/** A builtin global function. */
class BuiltinFunction : public Object {
 public:
  using Fn = Value (*)(Interpreter& in, CallArgs& args);
  BuiltinFunction(const char* name, Fn fn) : name_(name), fn_(fn) {}
  const char* type_name() const override { return "function"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override { return fn_(in, args); }
  std::string str() const override { return std::string("<function ") + name_ + ">"; }

 private:
  const char* name_;
  Fn fn_;
};

/** jinja2.utils.Cycler: next() / current / reset(). */
class Cycler : public Object {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  const char* type_name() const override { return "Cycler"; }
  Value get_attr(const std::string& name) const override;
  bool call_method(Interpreter& in, const std::string& name, CallArgs& args, Value& result) const override;

 private:
  std::vector<Value> items_;
  mutable size_t pos_ = 0;
};

/** jinja2.utils.Joiner: returns "" on the first call, then the separator. */
class Joiner : public Object {
 public:
  explicit Joiner(std::string sep) : sep_(std::move(sep)) {}
  const char* type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Interpreter& in, CallArgs& args) const override;

 private:
  std::string sep_;
  mutable bool used_ = false;
};

}  // namespace ft::jinja
