#pragma once
// Comma-separated integer lists on the command line: --prompt-ids 1,2,3 (run), --ids (tokenize),
// --batch 1,8,32 (bench). One parser, so every such flag trims blanks and reports errors alike.
#include <cstdint>
#include <string>
#include <vector>

namespace ft::cli {

/** The integers of `text` ("1, 2,3"; blanks around entries allowed), each in [lo, hi]. `flag` and `what`
 *  name them in errors: "--batch: 'x' is not a batch size (1..4096)". Throws ft::Error(kInvalidArgument)
 *  for an empty list, an empty entry, a non-integer or an out-of-range value. */
std::vector<int32_t> parse_int_list(const std::string& text, const char* flag, const char* what, int64_t lo,
                                    int64_t hi);

}  // namespace ft::cli
