#pragma once
// The engine flags `ft run`, `ft serve` and `ft bench` share, bound straight onto EngineOptions:
// -t/--threads, --device, --page-size, --cuda-graph-max-bs, --kv-cache-dtype, --embed-weights,
// --kv-host-gib, --prompt-cache-dir, --prompt-cache-gib, the MoE offload flags (cli/moe_flags.h); and
// the llama.cpp / Python-engine flags answered with a warning, a translation or a refusal
// (cli/compat_flags.h). Each command then sets the sizing fields it owns (kv_tokens, max_seqs,
// max_step_tokens, max_logit_rows).
#include <CLI/CLI.hpp>

#include "cli/compat_flags.h"
#include "engine/engine_options.h"

namespace ft::cli {

/** Registers -t/--threads (0 to 1024), --device (cpu, cuda, auto; its default here: auto), --page-size
 *  (>= 1), --cuda-graph-max-bs (>= 0), --kv-cache-dtype (auto, f32, bf16, fp8, q8_0), --embed-weights
 *  (auto, device, host), the KV tier flags, the MoE flags and the compatibility flags on `cmd` (groups
 *  Engine, Memory, MoE expert offload, Logging, llama.cpp flags), writing into `eo` and `compat` (which
 *  must outlive parsing). A value a typed field cannot hold is refused while parsing (exit 2). */
void add_engine_flags(CLI::App* cmd, EngineOptions& eo, CompatFlags& compat);

/** After parsing `cmd`: answers the compatibility flags (check_compat_flags: warnings, refusals),
 *  translates -cmoe (--moe-strategy cpu) and -ctk/-ctv (--kv-cache-dtype) into `eo`, sets the MoE
 *  calibration's folder (default_cache_dir), checks the choices between flags (check_moe_flag_choices)
 *  and calls eo.validate(). Throws ft::Error (kInvalidArgument, or kUnsupported for a refused
 *  compatibility flag) naming the flags: -cmoe with another --moe-strategy, -ctk/-ctv disagreeing with
 *  --kv-cache-dtype, --prompt-cache-gib without --prompt-cache-dir, and whatever those checks throw. */
void finish_engine_options(const CLI::App& cmd, EngineOptions& eo, const CompatFlags& compat);

/** Refuses --kv-host-gib and --prompt-cache-dir for `command` ("ft run", "ft bench"), which generate
 *  without the serving loop's prefix cache, so the tiers would have nothing to keep: throws
 *  ft::Error(kInvalidArgument) naming the flag when either is set. */
void refuse_kv_tiers(const EngineOptions& o, const char* command);

}  // namespace ft::cli
