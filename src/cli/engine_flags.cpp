#include "cli/engine_flags.h"

#include "cli/flag_checks.h"
#include "cli/help_format.h"
#include "cli/moe_flags.h"
#include "engine/calibration_cache.h"
#include "util/error.h"

namespace ft::cli {

void add_engine_flags(CLI::App* cmd, EngineOptions& eo, CompatFlags& compat) {
  eo.device = DeviceChoice::kAuto;  // the command line's default; the library's is cpu
  cmd->add_option_function<std::string>(
         "--device",
         [&eo](const std::string& v) {
           const std::optional<DeviceChoice> d = device_choice_from_name(v);
           if (!d) refuse_flag_value("--device must be cpu, cuda or auto (got '{}')", v);
           eo.device = *d;
         },
         "cpu, cuda or auto (cuda when a GPU is visible)")
      ->default_str(device_choice_name(eo.device))
      ->group(kGroupEngine);
  // Each thread is a persistent worker; a typo like 100000 used to exhaust the process limit.
  cmd->add_option("-t,--threads", eo.threads, "CPU threads (0 = all cores; at most 1024)")
      ->capture_default_str()
      ->check(in_range(0, 1024))
      ->group(kGroupEngine);
  cmd->add_option("--page-size", eo.page_size, "KV cache page size in tokens")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(kGroupMemory);
  cmd->add_option("--cuda-graph-max-bs", eo.cuda_graph_max_bs,
                  "decode steps of up to this many sequences replay CUDA graphs (padded to 1, 2, 4, ...; 0 = off)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(kGroupEngine);
  cmd->add_option_function<std::string>(
         "--kv-cache-dtype", [&eo](const std::string& v) { eo.kv_cache_dtype = *kv_cache_dtype_from_name(v); },
         "KV cache element type: auto (bf16 on CUDA, f32 on the CPU), f32, bf16 (CUDA: half of f32's memory), fp8 "
         "(E4M3, a scale a head a token) or q8_0 (int8, an f16 scale per 32 values): about half of bf16 "
         "(fp8 and q8_0: standard and sliding-window attention; MLA on CUDA refused)")
      ->default_str(kv_cache_dtype_name(eo.kv_cache_dtype))
      ->check(CLI::IsMember({"auto", "f32", "bf16", "fp8", "q8_0"}))
      ->group(kGroupMemory);
  cmd->add_option_function<std::string>(
         "--embed-weights", [&eo](const std::string& v) { eo.embed_weights = *embed_placement_from_name(v); },
         "token embedding table: device; host (host memory the GPU reads a step's rows of, one bus read a decode "
         "step, so its bytes stay out of --gpu-memory-limit; refused for a model whose LM head is tied to "
         "the table; on the CPU backend only the memory accounting changes); or auto: host when the MoE "
         "plan's expert cache is sized by the memory left and short of every expert (its slots get the "
         "table's bytes), or when a plan fits only without the table")
      ->default_str(embed_placement_name(eo.embed_weights))
      ->check(CLI::IsMember({"auto", "device", "host"}))
      ->group(kGroupMemory);
  cmd->add_option("--kv-host-gib", eo.kv_host_gib,
                  "host KV tier in GiB: prefix-cache pages evicted from the KV cache are kept in host memory (LRU) "
                  "and copied back when a later prompt starts with them, counted as cached tokens (0 = off; "
                  "ft serve; pinned on CUDA)")
      ->capture_default_str()
      ->group(kGroupMemory);
  cmd->add_option("--prompt-cache-dir", eo.prompt_cache_dir,
                  "persistent prompt cache: pages of cached prompt prefixes are written to this folder in the "
                  "background and loaded instead of recomputed after a restart; files of another model or KV "
                  "layout, truncated or corrupt ones are skipped with a warning (ft serve)")
      ->group(kGroupMemory);
  cmd->add_option("--prompt-cache-gib", eo.prompt_cache_gib,
                  "bound of --prompt-cache-dir's files in GiB (refused without it); the least recently used are removed "
                  "beyond it")
      ->capture_default_str()
      ->group(kGroupMemory);
  cmd->add_option("--tensor-parallel-size,--tp-size", eo.tensor_parallel,
                  "-tp: ranks to split the model over (1 to 8): attention heads and dense FFN columns split, one engine a "
                  "rank, rank 0 schedules (CUDA: GPU r for rank r over NCCL, libnccl.so.2 loaded at run time; "
                  "CPU backend: the ranks are threads)")
      ->capture_default_str()
      ->check(in_range(1, kMaxTensorParallel))
      ->group(kGroupEngine);
  cmd->add_option_function<std::string>(
         "--expert-parallel", [&eo](const std::string& v) { eo.expert_parallel = v == "on"; },
         "on: the MoE layers' experts are split over the --tensor-parallel-size ranks (each rank holds, caches and "
         "computes only its own block, routes masked on the device) instead of copied to every rank")
      ->default_str("off")
      ->check(CLI::IsMember({"on", "off"}))
      ->group(kGroupEngine);
  add_compat_flags(cmd, compat);
  add_moe_flags(cmd, eo, compat);
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

void finish_engine_options(const CLI::App& cmd, EngineOptions& eo, const CompatFlags& compat) {
  check_compat_flags(compat);
  if (compat.cpu_moe) {
    if (eo.moe.strategy != MoeStrategy::kAuto && eo.moe.strategy != MoeStrategy::kCpu)
      fail(ErrorCode::kInvalidArgument, "-cmoe/--cpu-moe means --moe-strategy cpu, not {}: give one of them",
           moe_strategy_name(eo.moe.strategy));
    eo.moe.strategy = MoeStrategy::kCpu;
  }
  check_moe_flag_choices(cmd, eo);
  eo.moe.calibration_dir = default_cache_dir();
  if (const std::optional<std::string> ct = kv_dtype_from_cache_types(compat)) {
    const KvCacheDtype from_ct = *kv_cache_dtype_from_name(*ct);
    if (eo.kv_cache_dtype != KvCacheDtype::kAuto && eo.kv_cache_dtype != from_ct)
      fail(ErrorCode::kInvalidArgument, "--kv-cache-dtype {} and -ctk/-ctv (= {}) disagree: give one",
           kv_cache_dtype_name(eo.kv_cache_dtype), *ct);
    eo.kv_cache_dtype = from_ct;
    const std::string& given = compat.cache_type_k ? *compat.cache_type_k : *compat.cache_type_v;
    eo.kv_cache_dtype_flag =
        given == *ct ? fmt::format("-ctk/-ctv {}", given)
                     : fmt::format("-ctk/-ctv {} (= --kv-cache-dtype {}: ft has no f16 KV cache; bf16 takes f16's 2 bytes a "
                                   "value and keeps f32's range)",
                                   given, *ct);
  }
  eo.validate();
  // After validate(): a value out of range is named as such first.
  if (cmd.count("--prompt-cache-gib") > 0 && eo.prompt_cache_dir.empty())
    fail(ErrorCode::kInvalidArgument,
         "--prompt-cache-gib {:g} bounds the files of the prompt cache, which needs --prompt-cache-dir DIR (ft "
         "serve): give the folder too, or leave --prompt-cache-gib out",
         eo.prompt_cache_gib);
}

}  // namespace ft::cli
