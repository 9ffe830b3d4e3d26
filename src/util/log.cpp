#include "util/log.h"

#include "util/error.h"

namespace ft {

void set_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off")
    fail(ErrorCode::kInvalidArgument, "unknown log level '{}' (use trace, debug, info, warn, error, off)", name);
  spdlog::set_level(level);
}

}  // namespace ft
