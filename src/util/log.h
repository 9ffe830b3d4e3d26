#pragma once
// Logging: spdlog's default logger (stderr). The only mutable global FreeToken keeps.
#include <spdlog/spdlog.h>

namespace ft {
/** Sets the log level from a name ("trace", "debug", "info", "warn", "error", "off"). Throws ft::Error on an unknown name. */
void set_log_level(const std::string& name);
}  // namespace ft
