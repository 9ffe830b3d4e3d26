#pragma once
// Errors raised while parsing or rendering a Jinja template. Each carries the Python/jinja2 exception
// class it stands for (TypeError, UndefinedError, SecurityError, ...) and, once known, the template line.
// what() reads "template line 12: TypeError: can only concatenate str (not "int") to str"; an error the
// template raised itself through raise_exception(msg) reads exactly msg.
#include <string>

#include "util/error.h"

namespace ft::jinja {

enum class ErrorKind {
  kTemplateSyntaxError,     // unknown tag, bad expression: found while parsing
  kTemplateAssertionError,  // unknown filter or test outside a conditional: found while parsing
  kTemplateError,           // raise_exception() in the template
  kTemplateRuntimeError,    // e.g. assigning an attribute of a non-namespace
  kUndefinedError,          // operation on an undefined value
  kSecurityError,           // mutating a list/dict (immutable sandbox), private attributes
  kTypeError,
  kValueError,
  kZeroDivisionError,
  kOverflowError,
  kIndexError,
  kKeyError,
};

/** Python name of an error kind ("TypeError", ...). */
const char* error_kind_name(ErrorKind kind);

class TemplateError : public ft::Error {
 public:
  /** line 0 = not yet known (added as the error leaves the statement that raised it). */
  TemplateError(ErrorKind kind, std::string message, int line = 0);
  ErrorKind kind() const { return kind_; }
  int line() const { return line_; }
  /** The message without kind or line ("can only concatenate ..."). */
  const std::string& message() const { return message_; }
  /** True for raise_exception(): what() is the template's message verbatim. */
  bool raised_by_template() const { return kind_ == ErrorKind::kTemplateError; }
  /** Copy with the line filled in (no-op when already known). */
  TemplateError at_line(int line) const;

 private:
  ErrorKind kind_;
  std::string message_;
  int line_;
};

/** Throws TemplateError(kind, fmt::format(...)). */
template <typename... Args>
[[noreturn]] void raise(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw TemplateError(kind, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace ft::jinja
