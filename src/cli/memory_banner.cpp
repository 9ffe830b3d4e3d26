#include "cli/memory_banner.h"

#include <fmt/format.h>

#include "engine/memory_plan.h"
#include "util/format.h"

namespace ft::cli {

std::string memory_banner(Engine& engine, int threads) {
  const MemoryPlan& plan = engine.memory_plan();
  const std::string thread_text = threads == 1  ? std::string("1 thread")
                                  : threads > 0 ? fmt::format("{} threads", threads)
                                                : std::string("all threads");
  std::string s = fmt::format("  memory    weights {} (mapped); KV {} tokens = {} pages x {} ({}); device {}, {}\n",
                              format_bytes(plan.weight_bytes), plan.kv_tokens, plan.kv_pages, plan.kv.page_size,
                              format_bytes(plan.kv_bytes), engine.ops().name(), thread_text);
  return s + memory_table(plan, engine.ops().device() == Device::kCuda ? "GPU" : "device");
}

}  // namespace ft::cli
