#pragma once
// Registries of the builtin filters, tests, methods and global functions (implemented in filters.cpp,
// tests.cpp, methods.cpp, globals.cpp), plus the argument binder they share.
#include <initializer_list>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace ft::jinja {

/** Filter by name (jinja2 builtins + Hugging Face's tojson); null when unknown. */
FilterFn find_filter(std::string_view name);
/** Test by name; null when unknown. */
TestFn find_test(std::string_view name);

/** Calls method `name` of a str/list/dict/object value (str.strip, dict.items, loop.cycle, ...).
 *  Mutating list/dict methods raise SecurityError as in jinja2's ImmutableSandboxedEnvironment. */
Value call_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args);

/** Sandboxed attribute lookup `obj.name` (jinja2 SandboxedEnvironment.getattr): methods first, then
 *  keys; unsafe (mutating or private) attributes give an undefined that raises SecurityError. */
Value get_attr(const Value& obj, const std::string& name);
/** Python getattr(obj, name) only (the `attr` filter): methods and object attributes, never keys. */
Value get_python_attr(const Value& obj, const std::string& name);
/** Sandboxed subscript `obj[key]` (SandboxedEnvironment.getitem): keys/indices first, then methods. */
Value get_item(const Value& obj, const Value& key);

/** The global functions: range, dict, namespace, cycler, joiner, raise_exception, strftime_now. */
Value find_global(std::string_view name);

/** Binds call arguments to a builtin's parameter names, Python style. */
class ArgBinder {
 public:
  /** Throws TypeError for too many positional arguments or an unknown keyword. */
  ArgBinder(const char* fn, CallArgs& args, std::initializer_list<const char*> params);
  /** Argument i (positional or by keyword), or null when not given. */
  const Value* get(size_t i) const { return slots_[i]; }
  /** Argument i or `dflt`. */
  Value get_or(size_t i, Value dflt) const { return slots_[i] ? *slots_[i] : std::move(dflt); }
  /** Argument i; TypeError when missing. */
  const Value& require(size_t i) const;

 private:
  const char* fn_;
  std::vector<const char*> names_;
  std::vector<const Value*> slots_;
};

}  // namespace ft::jinja
