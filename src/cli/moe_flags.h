#pragma once
// The MoE expert-offload flags shared by `ft run`, `ft serve` and `ft bench` (issue 7; registered with
// the other engine flags by cli/engine_flags.h): --moe-strategy,
// --moe-cache-slots | --moe-cache-rate | --moe-cache-auto, --moe-cpu-layers, --moe-fetch-cap, --moe-prefetch,
// --moe-cpu-int8, --moe-bank-format,
// --kv-reserve-tokens, --gpu-memory-limit (GiB), --decode-log-interval.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ft::cli {

struct MoeFlags {
  std::string strategy = "auto";
  std::optional<int64_t> cache_slots;
  std::optional<double> cache_rate;
  bool cache_auto = false;
  std::string cpu_layers;
  bool cpu_moe = false;          // llama.cpp's -cmoe/--cpu-moe: --moe-strategy cpu
  std::optional<int32_t> fetch_cap;
  std::vector<double> cpu_cost;  // --moe-cpu-cost C[,T]
  bool calibrate = false;        // --moe-calibrate
  std::string prefetch = "auto";
  std::optional<int32_t> prefetch_depth;  // unset: MoeOptions' default (2)
  std::string cpu_int8 = "on";
  std::string cpu_bf16 = "off";
  std::string bank_format = "auto";
  std::optional<int64_t> kv_reserve_tokens;  // unset: the engine default (the KV cache it allocates)
  std::optional<double> gpu_memory_limit_gib;
  int64_t decode_log_interval = 0;
};

/** Registers the flags on `cmd`, writing into `f` (which must outlive parsing). */
void add_moe_flags(CLI::App* cmd, MoeFlags& f);

/** Checks the combination and copies it into `eo` (moe, kv_reserve_tokens, gpu_memory_limit in
 *  bytes, decode_log_interval). Throws ft::Error(kInvalidArgument) naming the flags for an unknown
 *  strategy, more than one cache-size flag, a cache flag with fused or cpu, --moe-cpu-layers with
 *  fused or cpu, --moe-fetch-cap without hybrid, --moe-prefetch on without an expert cache or other than
 *  on|off, --moe-prefetch-depth outside 1 to PrefetchTargets::kMax or without an expert cache or with
 *  --moe-prefetch off, --moe-cpu-int8 or --moe-cpu-bf16 other than on|off,
 *  --moe-calibrate with fused, offload or cpu or beside --moe-fetch-cap or --moe-cpu-cost, --moe-bank-format other than auto|stored|ec12 or ec12 with fused, and out-of-range values. */
void apply_moe_flags(const MoeFlags& f, EngineOptions& eo);

}  // namespace ft::cli
