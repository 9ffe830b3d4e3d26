#pragma once
// Whole-file reads for small text inputs (JSON configs, chat templates, conversations).
#include <string>

namespace ft {

/** The bytes of the file at `path`. Throws ft::Error(kNotFound) "<path>: no such file" when it does
 *  not exist, kIo "<path>: cannot open: <reason>" when it cannot be read. */
std::string read_text_file(const std::string& path);

}  // namespace ft
