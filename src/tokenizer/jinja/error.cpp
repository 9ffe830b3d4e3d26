#include "tokenizer/jinja/error.h"

namespace ft::jinja {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTemplateSyntaxError: return "TemplateSyntaxError";
    case ErrorKind::kTemplateAssertionError: return "TemplateAssertionError";
    case ErrorKind::kTemplateError: return "TemplateError";
    case ErrorKind::kTemplateRuntimeError: return "TemplateRuntimeError";
    case ErrorKind::kUndefinedError: return "UndefinedError";
    case ErrorKind::kSecurityError: return "SecurityError";
    case ErrorKind::kTypeError: return "TypeError";
    case ErrorKind::kValueError: return "ValueError";
    case ErrorKind::kZeroDivisionError: return "ZeroDivisionError";
    case ErrorKind::kOverflowError: return "OverflowError";
    case ErrorKind::kIndexError: return "IndexError";
    case ErrorKind::kKeyError: return "KeyError";
  }
  return "Error";
}

static std::string compose(ErrorKind kind, const std::string& message, int line) {
  if (kind == ErrorKind::kTemplateError) return message;
  std::string head = line > 0 ? fmt::format("template line {}: ", line) : std::string();
  return head + error_kind_name(kind) + ": " + message;
}

static ErrorCode code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kTemplateSyntaxError:
    case ErrorKind::kTemplateAssertionError: return ErrorCode::kInvalidFile;
    default: return ErrorCode::kInvalidArgument;
  }
}

TemplateError::TemplateError(ErrorKind kind, std::string message, int line)
    : ft::Error(code_for(kind), compose(kind, message, line)), kind_(kind), message_(std::move(message)),
      line_(line) {}

TemplateError TemplateError::at_line(int line) const {
  if (line_ > 0 || line <= 0) return *this;
  return TemplateError(kind_, message_, line);
}

}  // namespace ft::jinja
