#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {

const Value* Dict::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.str()));
  for (const auto& kv : items)
    if (equals(kv.first, key)) return &kv.second;
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& kv : items)
    if (kv.first.is_string() && kv.first.str() == key) return &kv.second;
  return nullptr;
}

namespace {
// a + b, stopping at a quarter of SIZE_MAX (footprints only need to compare against limits).
size_t saturating_add(size_t a, size_t b) {
  constexpr size_t kCap = SIZE_MAX / 4;
  return a >= kCap || b >= kCap || a + b >= kCap ? kCap : a + b;
}
}  // namespace

void Dict::set(Value key, Value value) {
  for (auto& kv : items) {
    if (equals(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  weight = saturating_add(weight, saturating_add(key.footprint(), value.footprint()));
  items.emplace_back(std::move(key), std::move(value));
}

Value Object::get_attr(const std::string& name) const { return Value::undefined_missing(type_name(), name, false); }

bool Object::set_attr(const std::string&, const Value&) { return false; }

Value Object::call(Interpreter&, CallArgs&) const {
  raise(ErrorKind::kTypeError, "'{}' object is not callable", type_name());
}

bool Object::call_method(Interpreter&, const std::string&, CallArgs&, Value&) const { return false; }

std::string Object::str() const { return fmt::format("<{} object>", type_name()); }

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::undefined_name(std::string name) {
  Value v;
  v.s_ = std::move(name);
  return v;
}

Value Value::undefined_missing(const char* owner_type, std::string key_text, bool element) {
  Value v;
  v.owner_ = owner_type;
  v.s_ = std::move(key_text);
  v.markup_ = element;
  return v;
}

Value Value::undefined_hint(std::string hint, ErrorKind kind) {
  Value v;
  v.p_ = std::make_shared<UndefinedInfo>(UndefinedInfo{std::move(hint), kind});
  return v;
}

size_t Value::footprint() const {
  switch (kind_) {
    case Kind::kString: return s_.size() + 2;
    case Kind::kList:
    case Kind::kIter: return saturating_add(sizeof(Value), list().weight);
    case Kind::kDict: return saturating_add(sizeof(Value), dict_ref().weight);
    default: return sizeof(Value);
  }
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  auto l = std::make_shared<List>();
  for (const Value& x : items) l->weight = saturating_add(l->weight, x.footprint());
  l->items = std::move(items);
  v.p_ = std::move(l);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  static_cast<List*>(v.p_.get())->tuple = true;
  return v;
}

Value Value::iter(std::vector<Value> items, const char* type, bool single_pass) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kIter;
  auto* l = static_cast<List*>(v.p_.get());
  l->iter_type = type;
  l->single_pass = single_pass;
  return v;
}

Value Value::range(int64_t start, int64_t stop, int64_t step) {
  std::vector<Value> items;
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / (-step) : 0);
  items.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.emplace_back(start + i * step);
  Value v = iter(std::move(items), "range", false);
  auto* l = static_cast<List*>(v.p_.get());
  l->range[0] = start;
  l->range[1] = stop;
  l->range[2] = step;
  return v;
}

Value Value::dict(std::shared_ptr<Dict> d) {
  d->weight = 0;
  for (const auto& kv : d->items) d->weight = saturating_add(d->weight, saturating_add(kv.first.footprint(), kv.second.footprint()));
  Value v;
  v.kind_ = Kind::kDict;
  v.p_ = std::move(d);
  return v;
}

Value Value::dict() { return dict(std::make_shared<Dict>()); }

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.p_ = std::shared_ptr<void>(o, o.get());  // keep the Object* (base) address
  return v;
}

bool Value::is_range() const { return kind_ == Kind::kIter && std::strcmp(list().iter_type, "range") == 0; }

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_.empty();
    case Kind::kList: return !list().items.empty();
    case Kind::kDict: return !dict_ref().items.empty();
    case Kind::kObject: return true;
    case Kind::kIter: return list().single_pass || !list().items.empty();
  }
  return false;
}

void Value::append_to(std::string& out) const {
  switch (kind_) {
    case Kind::kUndefined: return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += b_ ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(i_); return;
    case Kind::kFloat: out += py::float_repr(f_); return;
    case Kind::kString: out += s_; return;
    case Kind::kList: {
      const List& l = list();
      const CycleGuard guard(&l);
      if (guard.reentered()) {
        out += l.tuple ? "(...)" : "[...]";
        return;
      }
      out += l.tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) out += ',';
      out += l.tuple ? ')' : ']';
      return;
    }
    case Kind::kDict: {
      const CycleGuard guard(&dict_ref());
      if (guard.reentered()) {
        out += "{...}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& kv : dict_ref().items) {
        if (!first) out += ", ";
        first = false;
        out += kv.first.repr();
        out += ": ";
        out += kv.second.repr();
      }
      out += '}';
      return;
    }
    case Kind::kObject: out += object_ptr()->str(); return;
    case Kind::kIter: {
      const List& l = list();
      out += l.single_pass ? "<" : "";
      out += l.iter_type;
      if (l.single_pass) {
        out += " object>";
        return;
      }
      if (std::strcmp(l.iter_type, "range") == 0) {
        out += l.range[2] == 1 ? fmt::format("({}, {})", l.range[0], l.range[1])
                               : fmt::format("({}, {}, {})", l.range[0], l.range[1], l.range[2]);
        return;
      }
      out += "([";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      out += "])";
      return;
    }
  }
}

std::string Value::to_str() const {
  if (kind_ == Kind::kString) return s_;
  std::string out;
  append_to(out);
  return out;
}

std::string Value::repr() const {
  if (kind_ == Kind::kString) {
    std::string r = py::repr(s_);
    return markup_ ? "Markup(" + r + ")" : r;
  }
  if (kind_ == Kind::kUndefined) return "Undefined";
  return to_str();
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return markup_ ? "Markup" : "str";
    case Kind::kList: return list().tuple ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kObject: return object_ptr()->type_name();
    case Kind::kIter: return list().iter_type;
  }
  return "object";
}

std::string Value::undefined_message() const {
  if (p_) return static_cast<const UndefinedInfo*>(p_.get())->hint;
  if (!owner_) return s_.empty() ? "value is undefined" : py::repr(s_) + " is undefined";
  // jinja2 Undefined._undefined_message: "'dict object' has no attribute 'x'", "list object has no element 5"
  bool none = std::string_view(owner_) == "NoneType";
  if (markup_) return fmt::format("{} has no element {}", none ? "None" : fmt::format("{} object", owner_), s_);
  return fmt::format("{} has no attribute {}", none ? "'None'" : fmt::format("'{} object'", owner_), py::repr(s_));
}

void Value::raise_undefined() const {
  ErrorKind kind = p_ ? static_cast<const UndefinedInfo*>(p_.get())->kind : ErrorKind::kUndefinedError;
  throw TemplateError(kind, undefined_message());
}

bool equals(const Value& a, const Value& b) {
  using K = Value::Kind;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  auto no_end = [] {  // a comparison back at a container it is inside
    raise(ErrorKind::kTemplateRuntimeError, "maximum recursion depth exceeded in comparison (a list or dict holds "
          "itself)");
  };
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList: {
      const List& x = a.list();
      const List& y = b.list();
      if (&x == &y) return true;
      const CycleGuard guard(&x);
      if (guard.reentered()) no_end();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case K::kDict: {
      const Dict& x = a.dict_ref();
      const Dict& y = b.dict_ref();
      if (&x == &y) return true;
      const CycleGuard guard(&x);
      if (guard.reentered()) no_end();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& kv : x.items) {
        const Value* other = y.find(kv.first);
        if (!other || !equals(kv.second, *other)) return false;
      }
      return true;
    }
    case K::kObject:
    case K::kIter: return a.identity() == b.identity();
    default: return false;
  }
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "'None'";
  return fmt::format("'{} object'", v.type_name());
}

namespace {
thread_local std::vector<const void*> walking;  // containers being printed, serialized or compared
}  // namespace

CycleGuard::CycleGuard(const void* container)
    : container_(container), reentered_(std::find(walking.begin(), walking.end(), container) != walking.end()) {
  if (!reentered_) walking.push_back(container);
}

CycleGuard::~CycleGuard() {
  if (!reentered_) walking.pop_back();
}

}  // namespace ft::jinja
