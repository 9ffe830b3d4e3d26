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

/** The classes `b` sizes: its slot_classes, else one class of slot_bytes. */
std::vector<SlotClass> classes_of(const GpuMemoryBudget& b) {
  if (!b.slot_classes.empty()) return b.slot_classes;
  SlotClass c;
  c.record_bytes = b.slot_bytes;
  c.max_experts = b.experts_per_layer;
  c.total_experts = b.total_experts;
  return {c};
}

/** "12 slots of 3.00 MiB", or per class "12 slots: 4 of 3.00 MiB, 8 of 1.50 MiB". */
std::string describe_slots(const std::vector<SlotClass>& classes, const std::vector<int64_t>& counts, int64_t slots) {
  if (classes.size() == 1) return fmt::format("{} slots of {}", slots, format_bytes(classes[0].slot_bytes()));
  std::string s = fmt::format("{} slots:", slots);
  for (size_t c = 0; c < classes.size(); ++c)
    s += fmt::format("{} {} of {}", c ? "," : "", counts[c], format_bytes(classes[c].slot_bytes()));
  return s;
}

/** Throws kOutOfMemory: `slots` slots (`need` bytes) do not fit in `avail` bytes. */
[[noreturn]] void not_enough(const GpuMemoryBudget& b, const std::string& slots, int64_t need, const char* what,
                             int64_t avail, int64_t kv_bytes) {
  const int64_t missing = need - std::max<int64_t>(avail, 0);
  std::string kv_hint;
  if (b.kv_bytes_per_token > 0) {
    const int64_t tokens = (missing + b.kv_bytes_per_token - 1) / b.kv_bytes_per_token;
    const int64_t page = std::max<int64_t>(b.kv_page_tokens, 1);
    const int64_t lower = (b.kv_reserve_tokens - tokens) / page * page;  // whole pages: the pool rounds up
    if (tokens <= b.kv_reserve_tokens && lower > 0)
      kv_hint = fmt::format(", lower {} to {} or less", b.kv_reserve_flag, lower);
  }
  fail(ErrorCode::kOutOfMemory,
       "expert cache: {} ({}) needs {}, but --gpu-memory-limit {} leaves {} after {} of resident weights "
       "and buffers{} and {} of KV for {} {}: {} missing. Raise {}--gpu-memory-limit{}{}{}",
       what, slots, format_bytes(need), format_bytes(b.gpu_memory_limit),
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
  std::vector<SlotClass> classes = classes_of(b);
  int64_t min_slots = 0, total = 0;
  for (const SlotClass& c : classes) min_slots += c.min_slots(), total += c.total_experts;
  auto bytes_of = [&](int64_t n) { return slot_pool_bytes(classes, split_slots(classes, n)); };
  auto fits = [&](int64_t n) { return bytes_of(n) <= std::max<int64_t>(avail, 0); };
  const std::string per_class = classes.size() == 1 ? "" : fmt::format(" in each of the {} slot sizes", classes.size());
  int64_t n = 0;
  std::string what;
  switch (req.mode) {
    case CacheSizeMode::kSlots:
      if (req.slots < min_slots)
        fail(ErrorCode::kInvalidArgument,
             "--moe-cache-slots {} is below the minimum of {} (2 x {} experts per layer{}: prefill streams two layers)",
             req.slots, min_slots, b.experts_per_layer, per_class);
      n = req.slots;
      if (n > total) {
        out.note = fmt::format("--moe-cache-slots {} reduced to {}, every routed expert that goes through the cache", n,
                               total);
        n = total;
      }
      what = fmt::format("--moe-cache-slots {}", req.slots);
      break;
    case CacheSizeMode::kRate:
      if (!(req.rate > 0.0 && req.rate <= 1.0))
        fail(ErrorCode::kInvalidArgument, "--moe-cache-rate {} must be in (0, 1]", req.rate);
      n = static_cast<int64_t>(std::ceil(req.rate * static_cast<double>(total) - 1e-9));
      if (n < min_slots) {
        out.note = fmt::format(
            "--moe-cache-rate {} gives {} slots, raised to the minimum of {} = 2 x experts per layer{}", req.rate, n,
            min_slots, per_class);
        n = min_slots;
      }
      what = fmt::format("--moe-cache-rate {}", req.rate);
      break;
    case CacheSizeMode::kAuto: {
      // The most slots that fit: bytes grow with the count (each class's share does), so a binary
      // search, then a step down while the split's rounding leaves it over.
      int64_t lo = min_slots, hi = total;
      if (!fits(lo)) {
        n = lo;  // reported below
      } else {
        while (lo < hi) {
          const int64_t mid = lo + (hi - lo + 1) / 2;
          if (fits(mid)) lo = mid;
          else hi = mid - 1;
        }
        n = lo;
      }
      what = "the smallest legal cache";
      break;
    }
  }
  const std::vector<int64_t> counts = split_slots(classes, n);
  const int64_t need = slot_pool_bytes(classes, counts);
  if (need > std::max<int64_t>(avail, 0))
    not_enough(b, describe_slots(classes, counts, n), need, what.c_str(), avail, out.kv_bytes);
  for (size_t c = 0; c < classes.size(); ++c) classes[c].n_slots = counts[c];
  out.n_slots = n;
  out.pool_bytes = need;
  out.free_bytes = avail - need;
  out.classes = std::move(classes);
  return out;
}

std::string describe_cache_slots(const CacheSize& cache) {
  if (cache.classes.empty()) return fmt::format("{} slots", cache.n_slots);
  if (cache.classes.size() == 1) return describe_slots(cache.classes, {cache.n_slots}, cache.n_slots);
  std::string s = fmt::format("{} slots:", cache.n_slots);
  for (size_t c = 0; c < cache.classes.size(); ++c)
    s += fmt::format("{} {} of {} (layers {})", c ? "," : "", cache.classes[c].n_slots,
                     format_bytes(cache.classes[c].slot_bytes()), cache.classes[c].layer_list());
  return s;
}

}  // namespace ft
