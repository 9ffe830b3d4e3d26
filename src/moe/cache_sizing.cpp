#include "moe/cache_sizing.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "util/error.h"
#include "util/format.h"

namespace ft {

namespace {

void check_budget(const GpuMemoryBudget& b) {
  auto bad = [](const char* field, int64_t v) {
    fail(ErrorCode::kInvalidArgument, "expert cache sizing: {} = {} is invalid", field, v);
  };
  if (b.gpu_memory_limit <= 0) bad("gpu_memory_limit", b.gpu_memory_limit);
  if (b.resident_bytes < 0) bad("resident_bytes", b.resident_bytes);
  if (b.kv_bytes_per_token < 0) bad("kv_bytes_per_token", b.kv_bytes_per_token);
  if (b.kv_reserve_tokens < 0)
    fail(ErrorCode::kInvalidArgument, "--kv-reserve-tokens {} must not be negative", b.kv_reserve_tokens);
  if (b.slot_bytes <= 0) bad("slot_bytes", b.slot_bytes);
  if (b.experts_per_layer < 1) bad("experts_per_layer", b.experts_per_layer);
  if (b.total_experts < b.experts_per_layer) bad("total_experts", b.total_experts);
  if (b.expert_bytes < 0) bad("expert_bytes", b.expert_bytes);
}

/** Throws kOutOfMemory: `slots` slots do not fit in `avail` bytes. */
[[noreturn]] void not_enough(const GpuMemoryBudget& b, int64_t slots, const char* what, int64_t avail,
                             int64_t kv_bytes) {
  const int64_t need = slots * b.slot_bytes, missing = need - std::max<int64_t>(avail, 0);
  std::string kv_hint;
  if (b.kv_bytes_per_token > 0) {
    const int64_t tokens = (missing + b.kv_bytes_per_token - 1) / b.kv_bytes_per_token;
    const int64_t page = std::max<int64_t>(b.kv_page_tokens, 1);
    const int64_t lower = (b.kv_reserve_tokens - tokens) / page * page;  // whole pages: the pool rounds up
    if (tokens <= b.kv_reserve_tokens && lower > 0)
      kv_hint = fmt::format(", lower {} to {} or less", b.kv_reserve_flag, lower);
  }
  fail(ErrorCode::kOutOfMemory,
       "expert cache: {} ({} slots of {}) needs {}, but --gpu-memory-limit {} leaves {} after {} of resident weights "
       "and buffers{} and {} of KV for {} {}: {} missing. Raise {}--gpu-memory-limit{}{}{}",
       what, slots, format_bytes(b.slot_bytes), format_bytes(need), format_bytes(b.gpu_memory_limit),
       format_bytes(std::max<int64_t>(avail, 0)), format_bytes(b.resident_bytes), b.resident_note, format_bytes(kv_bytes),
       b.kv_reserve_flag, b.kv_reserve_tokens, format_bytes(missing), b.host_advice, kv_hint,
       std::string(what).rfind("--moe-cache", 0) == 0 ? ", request fewer slots" : "",
       b.cpu_advice);
}

}  // namespace

CacheSize plan_cache_size(const GpuMemoryBudget& b, const CacheSizeRequest& req) {
  check_budget(b);
  CacheSize out;
  out.kv_bytes = b.kv_bytes_per_token * b.kv_reserve_tokens;
  const int64_t avail = b.gpu_memory_limit - b.resident_bytes - out.kv_bytes;
  out.experts_fit = avail >= b.expert_bytes;
  const int64_t min_slots = std::min<int64_t>(2 * int64_t{b.experts_per_layer}, b.total_experts);
  const int64_t fit = std::max<int64_t>(avail, 0) / b.slot_bytes;
  int64_t n = 0;
  std::string what;
  switch (req.mode) {
    case CacheSizeMode::kSlots:
      if (req.slots < min_slots)
        fail(ErrorCode::kInvalidArgument,
             "--moe-cache-slots {} is below the minimum of {} (2 x {} experts per layer: prefill streams two layers)",
             req.slots, min_slots, b.experts_per_layer);
      n = req.slots;
      if (n > b.total_experts) {
        out.note = fmt::format("--moe-cache-slots {} reduced to {}, every routed expert that goes through the cache", n,
                               b.total_experts);
        n = b.total_experts;
      }
      what = fmt::format("--moe-cache-slots {}", req.slots);
      break;
    case CacheSizeMode::kRate:
      if (!(req.rate > 0.0 && req.rate <= 1.0))
        fail(ErrorCode::kInvalidArgument, "--moe-cache-rate {} must be in (0, 1]", req.rate);
      n = static_cast<int64_t>(std::ceil(req.rate * static_cast<double>(b.total_experts) - 1e-9));
      if (n < min_slots) {
        out.note = fmt::format(
            "--moe-cache-rate {} gives {} slots, raised to the minimum of {} = 2 x experts per layer", req.rate, n,
            min_slots);
        n = min_slots;
      }
      what = fmt::format("--moe-cache-rate {}", req.rate);
      break;
    case CacheSizeMode::kAuto:
      n = std::min(fit, b.total_experts);
      if (n < min_slots) n = min_slots;  // reported below
      what = "the smallest legal cache";
      break;
  }
  if (n > fit) not_enough(b, n, what.c_str(), avail, out.kv_bytes);
  out.n_slots = n;
  out.pool_bytes = n * b.slot_bytes;
  out.free_bytes = avail - out.pool_bytes;
  return out;
}

}  // namespace ft
