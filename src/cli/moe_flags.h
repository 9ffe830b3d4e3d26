#pragma once
// The MoE expert-offload flags shared by `ft run`, `ft serve` and `ft bench` (issue 7; registered with
// the other engine flags by cli/engine_flags.h), bound onto EngineOptions::moe and its MoE fields:
// --moe-strategy, --moe-cache-slots | --moe-cache-rate | --moe-cache-auto, --moe-cpu-layers,
// --moe-fetch-cap, --moe-cpu-cost, --moe-calibrate, --moe-prefetch, --moe-prefetch-depth, --moe-cpu-int8,
// --moe-cpu-bf16, --moe-bank-format, --kv-reserve-tokens, --gpu-memory-limit (GiB), --decode-log-interval;
// and llama.cpp's -cmoe/--cpu-moe (into CompatFlags::cpu_moe).
#include <CLI/CLI.hpp>

#include "cli/compat_flags.h"
#include "engine/engine_options.h"

namespace ft::cli {

/** Registers the flags on `cmd`, writing into `eo` and `compat` (which must outlive parsing). A value
 *  no field can hold is refused while parsing, naming the flag (exit 2): an unknown --moe-strategy,
 *  --moe-prefetch, --moe-cpu-int8, --moe-cpu-bf16 or --moe-bank-format; --moe-fetch-cap or
 *  --kv-reserve-tokens below 0 (-1 is "not given" there); --moe-cpu-cost outside its ranges;
 *  --gpu-memory-limit not above 0 GiB (0 bytes is "no limit"). Ranges and combinations the fields can
 *  hold are EngineOptions::validate's. */
void add_moe_flags(CLI::App* cmd, EngineOptions& eo, CompatFlags& compat);

/** The choices between MoE flags that EngineOptions cannot tell apart once parsed: throws
 *  ft::Error(kInvalidArgument) for more than one of --moe-cache-slots, --moe-cache-rate and
 *  --moe-cache-auto, and for --moe-cache-auto with fused or cpu (which have no expert cache). */
void check_moe_flag_choices(const CLI::App& cmd, const EngineOptions& eo);

}  // namespace ft::cli
