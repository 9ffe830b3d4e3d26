#include "cli/engine_flags.h"

#include "cli/flag_checks.h"
#include "cli/help_format.h"
#include "util/error.h"

namespace ft::cli {

void add_engine_flags(CLI::App* cmd, EngineFlags& f) {
  cmd->add_option("--device", f.device, "cpu, cuda or auto (cuda when a GPU is visible)")
      ->capture_default_str()
      ->group(kGroupEngine);
  // Each thread is a persistent worker; a typo like 100000 used to exhaust the process limit.
  cmd->add_option("-t,--threads", f.threads, "CPU threads (0 = all cores; at most 1024)")
      ->capture_default_str()
      ->check(in_range(0, 1024))
      ->group(kGroupEngine);
  cmd->add_option("--page-size", f.page_size, "KV cache page size in tokens")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(kGroupMemory);
  cmd->add_option("--cuda-graph-max-bs", f.cuda_graph_max_bs,
                  "decode steps of up to this many sequences replay CUDA graphs (padded to 1, 2, 4, ...; 0 = off)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(kGroupEngine);
  cmd->add_option("--kv-cache-dtype", f.kv_cache_dtype,
                  "KV cache element type: auto (the activation dtype), f32, bf16 (CUDA: half the KV memory), fp8 "
                  "(E4M3, a scale a head a token) or q8_0 (int8, an f16 scale per 32 values): about half of bf16 "
                  "(fp8 and q8_0: CPU backend only for now)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "f32", "bf16", "fp8", "q8_0"}))
      ->group(kGroupMemory);
  cmd->add_option("--embed-weights", f.embed_weights,
                  "token embedding table: device; host (host memory the GPU reads a step's rows of, one bus read a decode "
                  "step, so its bytes stay out of --gpu-memory-limit; refused for a model whose LM head is tied to "
                  "the table; on the CPU backend only the memory accounting changes); or auto: host when the MoE "
                  "plan's expert cache is sized by the memory left and short of every expert (its slots get the "
                  "table's bytes), or when a plan fits only without the table")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "device", "host"}))
      ->group(kGroupMemory);
  cmd->add_option("--kv-host-gib", f.kv_host_gib,
                  "host KV tier in GiB: prefix-cache pages evicted from the KV cache are kept in host memory (LRU) "
                  "and copied back when a later prompt starts with them, counted as cached tokens (0 = off; "
                  "ft serve, CPU backend)")
      ->capture_default_str()
      ->group(kGroupMemory);
  cmd->add_option("--prompt-cache-dir", f.prompt_cache_dir,
                  "persistent prompt cache: pages of cached prompt prefixes are written to this folder in the "
                  "background and loaded instead of recomputed after a restart; files of another model or KV "
                  "layout, truncated or corrupt ones are skipped with a warning (ft serve, CPU backend)")
      ->group(kGroupMemory);
  cmd->add_option("--prompt-cache-gib", f.prompt_cache_gib,
                  "bound of --prompt-cache-dir's files in GiB; the least recently used are removed beyond it")
      ->capture_default_str()
      ->group(kGroupMemory);
  add_compat_flags(cmd, f.compat);
  add_moe_flags(cmd, f.moe);
}

void refuse_kv_tiers(const EngineOptions& o, const char* command) {
  if (o.kv_host_gib > 0)
    fail(ErrorCode::kInvalidArgument,
         "--kv-host-gib: {} runs its prompts without the prefix cache, so a host KV tier would hold nothing; it "
         "works with ft serve",
         command);
  if (!o.prompt_cache_dir.empty())
    fail(ErrorCode::kInvalidArgument,
         "--prompt-cache-dir: {} runs its prompts without the prefix cache, so nothing would be cached; it works "
         "with ft serve",
         command);
}

EngineOptions engine_options(const EngineFlags& f) {
  if (f.device != "cpu" && f.device != "cuda" && f.device != "auto")
    fail(ErrorCode::kInvalidArgument, "--device must be cpu, cuda or auto (got '{}')", f.device);
  check_compat_flags(f.compat);
  EngineOptions eo;
  apply_moe_flags(f.moe, eo);
  eo.threads = f.threads;
  eo.device = f.device;
  eo.page_size = f.page_size;
  eo.cuda_graph_max_bs = f.cuda_graph_max_bs;
  eo.kv_cache_dtype = f.kv_cache_dtype;
  if (const std::optional<std::string> ct = kv_dtype_from_cache_types(f.compat)) {
    if (f.kv_cache_dtype != "auto" && f.kv_cache_dtype != *ct)
      fail(ErrorCode::kInvalidArgument, "--kv-cache-dtype {} and -ctk/-ctv (= {}) disagree: give one", f.kv_cache_dtype,
           *ct);
    eo.kv_cache_dtype = *ct;
  }
  eo.embed_weights = f.embed_weights;
  if (!(f.kv_host_gib >= 0) || f.kv_host_gib > 1e6)
    fail(ErrorCode::kInvalidArgument, "--kv-host-gib must be between 0 (off) and 1e6 GiB (got {})", f.kv_host_gib);
  if (!(f.prompt_cache_gib > 0) || f.prompt_cache_gib > 1e6)
    fail(ErrorCode::kInvalidArgument, "--prompt-cache-gib must be > 0 and at most 1e6 GiB (got {})", f.prompt_cache_gib);
  eo.kv_host_gib = f.kv_host_gib;
  eo.prompt_cache_dir = f.prompt_cache_dir;
  eo.prompt_cache_gib = f.prompt_cache_gib;
  return eo;
}

}  // namespace ft::cli
