#include "tokenizer/jinja/value.h"

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

void Dict::set(Value key, Value value) {
  for (auto& kv : items) {
    if (equals(kv.first, key)) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

std::string UndefinedInfo::message() const {
  if (!hint.empty()) return hint;
  if (owner.empty()) return fmt::format("{} is undefined", name);
  return fmt::format("{} has no {} {}", owner, element ? "element" : "attribute", name);
}

Value Object::get_attr(const std::string& name) const {
  UndefinedInfo info;
  info.name = py::repr(name);
  info.owner = fmt::format("'{} object'", type_name());
  return Value::undefined(std::move(info));
}

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

Value Value::undefined(UndefinedInfo info) {
  Value v;
  v.p_ = std::make_shared<UndefinedInfo>(std::move(info));
  return v;
}

Value Value::undefined_name(std::string name) {
  UndefinedInfo info;
  info.name = py::repr(name);
  return undefined(std::move(info));
}

Value Value::undefined_hint(std::string hint, ErrorKind kind) {
  UndefinedInfo info;
  info.hint = std::move(hint);
  info.kind = kind;
  return undefined(std::move(info));
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  auto l = std::make_shared<List>();
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

Value Value::dict(std::shared_ptr<Dict> d) {
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
  if (!p_) return "value is undefined";
  return static_cast<const UndefinedInfo*>(p_.get())->message();
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
  switch (a.kind()) {
    case K::kUndefined:
    case K::kNone: return true;
    case K::kString: return a.str() == b.str();
    case K::kList: {
      const List& x = a.list();
      const List& y = b.list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case K::kDict: {
      const Dict& x = a.dict_ref();
      const Dict& y = b.dict_ref();
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

}  // namespace ft::jinja
