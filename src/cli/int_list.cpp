#include "cli/int_list.h"

#include <sstream>

#include "util/error.h"

namespace ft::cli {

std::vector<int32_t> parse_int_list(const std::string& text, const char* flag, const char* what, int64_t lo,
                                    int64_t hi) {
  std::vector<int32_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b == std::string::npos) fail(ErrorCode::kInvalidArgument, "{}: empty entry in '{}'", flag, text);
    const std::string tok = item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || v < lo || v > hi)
      fail(ErrorCode::kInvalidArgument, "{}: '{}' is not {} ({}..{})", flag, tok, what, lo, hi);
    out.push_back(static_cast<int32_t>(v));
  }
  if (out.empty()) fail(ErrorCode::kInvalidArgument, "{}: no values in '{}'", flag, text);
  return out;
}

}  // namespace ft::cli
