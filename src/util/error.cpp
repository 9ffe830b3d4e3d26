#include "util/error.h"

namespace ft {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kInvalidFile: return "invalid_file";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfMemory: return "out_of_memory";
    case ErrorCode::kContextLength: return "context_length_exceeded";
    case ErrorCode::kOverloaded: return "overloaded";
    case ErrorCode::kIo: return "io_error";
    case ErrorCode::kInternal: return "internal_error";
  }
  return "unknown";
}

}  // namespace ft
