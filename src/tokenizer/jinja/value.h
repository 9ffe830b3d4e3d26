#pragma once
// The value model of the Jinja interpreter: Python objects as jinja2 sees them. Undefined (jinja2's
// default Undefined, with the hint that its error will carry), None, bool, int (64-bit), float, str
// (UTF-8; `markup` marks a markupsafe.Markup, which escapes what is added to it), list and tuple,
// dict (insertion-ordered, any hashable key), and host objects (namespace, loop, macro, bound method).
// Lists and dicts are shared by reference like Python's; the immutable sandbox forbids mutating them,
// so sharing is safe. Printing follows Python str()/repr().
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/jinja/error.h"

namespace ft::jinja {

class Value;
class Interpreter;

/** A list (or tuple when `tuple`); also the payload of iterators and dict views (Kind::kIter). */
struct List {
  std::vector<Value> items;
  bool tuple = false;
  const char* iter_type = nullptr;  // kIter: "generator", "dict_items", ...
  bool single_pass = false;         // kIter: an iterator (consumed by iteration) rather than a view
  mutable size_t pos = 0;           // single_pass: items before pos were consumed
  int64_t range[3] = {0, 0, 1};     // kIter "range": start, stop, step
  size_t weight = 0;                // footprint of the items (Value::footprint), set by the factories
};

/** An insertion-ordered dict (Python 3.7+ semantics). Lookups are linear: template dicts are small. */
struct Dict {
  std::vector<std::pair<Value, Value>> items;
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  /** Inserts or replaces (a replaced key keeps its position). */
  void set(Value key, Value value);
  size_t weight = 0;  // footprint of the keys and values (Value::footprint), set by Value::dict
};

/** An undefined value with an explicit message (and the error its use raises). */
struct UndefinedInfo {
  std::string hint;
  ErrorKind kind = ErrorKind::kUndefinedError;  // kSecurityError for unsafe attributes
};

/** Positional and keyword arguments of a call. */
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

/** A host object: namespace(), the loop variable, macros, bound methods, builtin functions. */
class Object : public std::enable_shared_from_this<Object> {
 public:
  virtual ~Object() = default;
  /** Python type name ("Namespace", "LoopContext", "Macro", "builtin_function_or_method"). */
  virtual const char* type_name() const = 0;
  /** Attribute lookup; an undefined Value when missing. */
  virtual Value get_attr(const std::string& name) const;
  /** Attribute assignment ({% set ns.x = ... %}); false when the object does not allow it. */
  virtual bool set_attr(const std::string& name, const Value& value);
  virtual bool callable() const { return false; }
  /** Calls the object; throws TypeError when not callable. */
  virtual Value call(Interpreter& in, CallArgs& args) const;
  /** Calls method `name`; returns false when the object has no such method. */
  virtual bool call_method(Interpreter& in, const std::string& name, CallArgs& args, Value& result) const;
  /** Python str(). */
  virtual std::string str() const;
};

class Value {
 public:
  // kIter: a lazy Python iterable jinja2 filters return (generator from map/select/...; dict_items
  // views from dict.items()): iterable, not subscriptable, not JSON-serializable.
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kObject, kIter };

  /** A plain undefined value. */
  Value() : kind_(Kind::kUndefined), owner_(nullptr) {}
  Value(bool b) : kind_(Kind::kBool), b_(b) {}  // NOLINT(google-explicit-constructor)
  Value(int v) : kind_(Kind::kInt), i_(v) {}    // NOLINT
  Value(int64_t v) : kind_(Kind::kInt), i_(v) {}  // NOLINT
  Value(double v) : kind_(Kind::kFloat), f_(v) {}  // NOLINT
  Value(std::string s, bool markup = false) : kind_(Kind::kString), markup_(markup), i_(0), s_(std::move(s)) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  Value(std::string_view s) : Value(std::string(s)) {}  // NOLINT

  static Value none();
  /** Undefined variable `name` ("'name' is undefined"). */
  static Value undefined_name(std::string name);
  /** Missing attribute/key of an object of Python type `owner_type` (a string literal):
   *  "'dict object' has no attribute 'x'"; element = looked up by a non-string key (key_text is
   *  then its repr: "has no element 5"). No allocation for short names. */
  static Value undefined_missing(const char* owner_type, std::string key_text, bool element);
  /** Undefined with an explicit message; kind = the error its use raises. */
  static Value undefined_hint(std::string hint, ErrorKind kind = ErrorKind::kUndefinedError);
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  /** An iterator (single_pass, e.g. "generator") or a view ("dict_items") over items. */
  static Value iter(std::vector<Value> items, const char* type, bool single_pass);
  /** Python range(start, stop, step) (step != 0; the caller bounds its length). */
  static Value range(int64_t start, int64_t stop, int64_t step);
  bool is_range() const;
  static Value dict(std::shared_ptr<Dict> d);
  static Value dict();
  static Value object(std::shared_ptr<Object> o);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  /** int or bool (Python bool is an int). */
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }  // list or tuple
  bool is_tuple() const { return kind_ == Kind::kList && list().tuple; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_iter() const { return kind_ == Kind::kIter; }
  bool is_object() const { return kind_ == Kind::kObject; }
  bool markup() const { return markup_; }

  bool as_bool() const { return b_; }
  /** Integer value of an int or bool. */
  int64_t as_int() const { return kind_ == Kind::kBool ? (b_ ? 1 : 0) : i_; }
  /** Numeric value of an int, bool or float. */
  double as_float() const { return kind_ == Kind::kFloat ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_; }
  const List& list() const { return *static_cast<const List*>(p_.get()); }
  const std::shared_ptr<List> list_ptr() const { return std::static_pointer_cast<List>(p_); }
  const Dict& dict_ref() const { return *static_cast<const Dict*>(p_.get()); }
  const std::shared_ptr<Dict> dict_ptr() const { return std::static_pointer_cast<Dict>(p_); }
  Object* object_ptr() const { return static_cast<Object*>(p_.get()); }
  /** Identity of the referenced list/dict/object (for `is sameas`). */
  const void* identity() const { return p_.get(); }

  /** Python truthiness (Undefined is falsy). */
  bool truthy() const;
  /** Python str(); Undefined prints as "". */
  std::string to_str() const;
  /** Bytes the value stands for when printed or serialized, counting a list or dict nested twice
   *  twice (saturating): a template that nests a list in itself repeatedly ([l, l] forty times) is
   *  seen growing exponentially before anything walks it. O(1): lists and dicts cache their items'. */
  size_t footprint() const;
  /** Appends str(value) to out. */
  void append_to(std::string& out) const;
  /** Python repr(). */
  std::string repr() const;
  /** Python type name for error messages ("str", "int", "NoneType", "Undefined", ...). */
  const char* type_name() const;
  /** The message its use would raise (Undefined only). */
  std::string undefined_message() const;
  /** Throws the error using this Undefined raises (UndefinedError or SecurityError). */
  [[noreturn]] void raise_undefined() const;

 private:
  Kind kind_;
  bool markup_ = false;
  union {
    bool b_;
    int64_t i_;
    double f_;
    const char* owner_;  // kUndefined: type of the object a lookup missed on (null: a variable)
  };
  std::string s_;            // kString text; kUndefined: the missing name (or key repr)
  std::shared_ptr<void> p_;  // List, Dict, Object, or UndefinedInfo (kUndefined with a hint)
};

/** Python ==. A list or dict compared with itself is equal without walking it; a comparison that
 *  reaches a list or dict it is already comparing (two lists that each hold themselves) raises
 *  TemplateError (kTemplateRuntimeError), as Python's RecursionError ends it. */
bool equals(const Value& a, const Value& b);

/** CPython's Py_ReprEnter / Py_ReprLeave: marks `container` (a List, Dict or Namespace) as being
 *  walked on this thread for its lifetime; reentered() is true when it already was further up the
 *  stack, i.e. the container holds itself (a list appended to itself, a namespace attribute holding
 *  the namespace). Printing then writes "[...]" / "{...}" and tojson raises "Circular reference
 *  detected", as Python does, instead of recursing without end. */
class CycleGuard {
 public:
  explicit CycleGuard(const void* container);
  ~CycleGuard();
  CycleGuard(const CycleGuard&) = delete;
  CycleGuard& operator=(const CycleGuard&) = delete;
  bool reentered() const { return reentered_; }

 private:
  const void* container_;
  bool reentered_;
};

/** "'dict object'"-style description jinja2 uses in undefined messages. */
std::string object_type_repr(const Value& v);

}  // namespace ft::jinja
