#pragma once
// The engine flags `ft run`, `ft serve` and `ft bench` share, and their one mapping to EngineOptions:
// -t/--threads, --device, --page-size, --cuda-graph-max-bs, --kv-cache-dtype, --embed-weights, the MoE offload flags
// (cli/moe_flags.h) and the llama.cpp / Python-engine flags answered with a warning or a refusal
// (cli/compat_flags.h). Each command then sets the sizing fields it owns (kv_tokens, max_seqs,
// max_step_tokens, max_logit_rows).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "cli/compat_flags.h"
#include "cli/moe_flags.h"
#include "engine/engine.h"

namespace ft::cli {

struct EngineFlags {
  int threads = 0;              // --threads: CPU threads (0: all cores)
  std::string device = "auto";  // --device: cpu, cuda or auto
  int32_t page_size = 64;       // --page-size: KV page size in tokens
  int32_t cuda_graph_max_bs = 16;  // --cuda-graph-max-bs: largest decode batch replayed as a CUDA graph (0: off)
  std::string kv_cache_dtype = "auto";  // --kv-cache-dtype: auto, f32, bf16, fp8 or q8_0
  std::string embed_weights = "auto";   // --embed-weights: auto, device or host
  double kv_host_gib = 0;               // --kv-host-gib: the host KV tier's bound (0: off)
  std::string prompt_cache_dir;         // --prompt-cache-dir: the persistent prompt cache ("" : off)
  double prompt_cache_gib = 16;         // --prompt-cache-gib: its files' bound
  MoeFlags moe;
  CompatFlags compat;  // -ngl, --tensor-parallel-size, the Python engine's --memory-ratio, ...
};

/** Registers -t/--threads (>= 0), --device, --page-size (>= 1), --cuda-graph-max-bs (>= 0), --kv-cache-dtype
 *  (auto, f32, bf16), --embed-weights (auto, device, host), the MoE flags and the compatibility flags on
 *  `cmd` (groups Engine, Memory, MoE expert offload, Logging), writing into `f` (which must outlive parsing). */
void add_engine_flags(CLI::App* cmd, EngineFlags& f);

/** EngineOptions with threads, device, page_size, cuda_graph_max_bs, kv_cache_dtype, embed_weights and the MoE fields (apply_moe_flags) from `f`; the
 *  sizing fields keep their defaults. Throws ft::Error(kInvalidArgument) for a --device other than cpu,
 *  cuda or auto, for a bad MoE flag combination (apply_moe_flags) and for a refused compatibility
 *  flag (check_compat_flags, which also warns for -ngl). */
EngineOptions engine_options(const EngineFlags& f);

/** Refuses --kv-host-gib and --prompt-cache-dir for `command` ("ft run", "ft bench"), which generate
 *  without the serving loop's prefix cache, so the tiers would have nothing to keep: throws
 *  ft::Error(kInvalidArgument) naming the flag when either is set. */
void refuse_kv_tiers(const EngineOptions& o, const char* command);

}  // namespace ft::cli
