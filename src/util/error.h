#pragma once
// ft::Error: the one exception type FreeToken throws for bad input, bad configuration and
// failed resources. It carries a machine-readable code (mapped to an HTTP status in server/
// and to an exit code in cli/) and a message a user can act on.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace ft {

enum class ErrorCode {
  kInvalidArgument,   // bad request / bad flag value            -> HTTP 400, exit 2
  kInvalidFile,       // malformed or truncated file             -> exit 2
  kNotFound,          // missing file, tensor, model             -> HTTP 404, exit 2
  kUnsupported,       // valid but not implemented here          -> HTTP 400, exit 2
  kOutOfMemory,       // memory plan does not fit                -> HTTP 503, exit 3
  kContextLength,     // prompt + max_tokens over the limit      -> HTTP 400
  kOverloaded,        // queue full                              -> HTTP 503
  kIo,                // OS-level I/O failure                    -> exit 2
  kInternal,          // a bug: an invariant did not hold        -> HTTP 500, exit 1
};

/** Name of an error code ("invalid_argument", ...). */
const char* error_code_name(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  explicit Error(const std::string& message) : Error(ErrorCode::kInvalidArgument, message) {}
  ErrorCode code() const { return code_; }

  /** Returns a copy whose message is "context: original message" (errors gain context on the way up). */
  Error with_context(const std::string& context) const { return Error(code_, context + ": " + what()); }

 private:
  ErrorCode code_;
};

/** Throws ft::Error(code, fmt::format(...)). */
template <typename... Args>
[[noreturn]] void fail(ErrorCode code, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(code, fmt::format(f, std::forward<Args>(args)...));
}

/** Throws ErrorCode::kInternal with file:line when an internal invariant (not input data) is broken. */
#define FT_CHECK(cond)                                                                          \
  do {                                                                                          \
    if (!(cond)) ::ft::fail(::ft::ErrorCode::kInternal, "internal check failed: {} ({}:{})", #cond, \
                            __FILE__, __LINE__);                                                \
  } while (0)

}  // namespace ft
