#include "cli/moe_flags.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/help_format.h"
#include "engine/calibration_cache.h"
#include "moe/expert_compute.h"
#include "util/error.h"

namespace ft::cli {

void add_moe_flags(CLI::App* cmd, MoeFlags& f) {
  const char* g = kGroupMoe;
  // --moe-backend, --moe-cache-size: the Python FreeToken engine's names, with the same meaning (its
  // cache size is also a count of expert slots over all layers).
  cmd->add_option("--moe-strategy,--moe-backend", f.strategy,
                  "auto (fused when every expert fits and none of --moe-cache-slots/-rate, --moe-cpu-layers, --moe-prefetch "
                  "on, --moe-prefetch-depth is given; else, with a GPU, the planner: hybrid or offload, whichever its "
                  "start-up calibration times faster; else offload), fused, offload, hybrid or cpu")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--moe-cache-slots,--moe-cache-size", f.cache_slots,
                  "Expert-cache slots over all MoE layers, each one expert of one layer (at least 2 x experts per layer)")
      ->group(g);
  cmd->add_option("--moe-cache-rate", f.cache_rate, "Expert-cache slots as a fraction of the routed experts that go through the cache (all of them unless "
                  "--moe-cpu-layers), in (0, 1]")
      ->group(g);
  cmd->add_flag("--moe-cache-auto", f.cache_auto, "Every slot that fits the memory budget (the default)")->group(g);
  // llama.cpp's -cmoe/--cpu-moe and -ncmoe/--n-cpu-moe N (the MoE weights of the first N layers on
  // the CPU) mean --moe-strategy cpu and --moe-cpu-layers N here.
  cmd->add_flag("--cpu-moe", f.cpu_moe, "-cmoe (llama.cpp): every expert on the CPU, as --moe-strategy cpu")->group(g);
  cmd->add_option("--moe-cpu-layers,--n-cpu-moe", f.cpu_layers,
                  "MoE layers whose experts run on the CPU under offload/hybrid: N (first N), FRACTION (0.25) or "
                  "LIST (0,3,8-11)")
      ->group(g);
  cmd->add_option("--moe-fetch-cap", f.fetch_cap, "hybrid: experts fetched per layer per step (more run on the CPU)")
      ->group(g);
  cmd->add_option("--moe-cpu-cost", f.cpu_cost,
                  "hybrid: the planner's costs instead of its start-up calibration: C[,T], an expert's CPU time with one "
                  "token and each further token's, in fetches of one expert over PCIe (misses split so both paths end "
                  "soonest)")
      ->delimiter(',')
      ->expected(1, 2)
      ->group(g);
  cmd->add_flag("--moe-calibrate", f.calibrate,
                "Time the planner's candidate splits again at start instead of reading the calibration file that a "
                "start on this machine with this model and plan wrote ($FT_CACHE_DIR, else $XDG_CACHE_HOME/freetoken, "
                "else ~/.cache/freetoken), and rewrite it")
      ->group(g);
  cmd->add_option("--moe-prefetch", f.prefetch,
                  "on: predict the next layer's experts (its router on this layer's input) and fetch them while "
                  "this layer computes; auto: on for the offload and hybrid strategies")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--moe-prefetch-depth", f.prefetch_depth,
                  "offload: prefetch this many cache layers ahead, 1 to 4 (1: the next layer's experts; each more keeps "
                  "the copies a layer deeper in the queue; 3, the default, measured fastest on the H200). Depth d needs "
                  "2d x the experts per layer in slots (or every expert), else the deepest that fits runs. Hybrid "
                  "prefetches 1 ahead")
      ->group(g);
  cmd->add_option("--moe-cpu-int8", f.cpu_int8,
                  "on: experts computed on the CPU (hybrid, cpu, --moe-cpu-layers) dot their Q4_K/Q6_K/MXFP4 weights with an "
                  "int8 form of the activations (AVX-512 VNNI; faster, ~1e-4 relative from fp32); off: fp32, bit for bit the "
                  "CPU backend's")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--moe-cpu-bf16", f.cpu_bf16,
                  "on: experts computed on the CPU (hybrid, cpu, --moe-cpu-layers) dot their BF16 weights with a bf16 form "
                  "of the activations (AVX-512 BF16: ~2x the prefill throughput, ~3e-3 relative from fp32); off: fp32, bit "
                  "for bit the CPU backend's")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--moe-bank-format", f.bank_format,
                  "How host expert banks hold BF16 experts: ec12 (12 bits a value, lossless: ~25% fewer bytes over "
                  "PCIe and from host memory, decoded on the way in), stored (as in the checkpoint), auto (ec12 "
                  "where the experts are BF16 with dimensions that are multiples of 64). Offload, hybrid and cpu "
                  "only; ec12 is refused with fused")
      ->capture_default_str()
      ->group(g);
  cmd->add_option("--kv-reserve-tokens", f.kv_reserve_tokens,
                  "KV tokens kept free when sizing the expert cache (default: the KV cache allocated, --kv-tokens; "
                  "ft bench: 8192, a server's default)")
      ->group(g);
  cmd->add_option("--gpu-memory-limit", f.gpu_memory_limit_gib,
                  "GiB of device memory to plan within (default: the device's free memory; no limit on CPU)")
      ->group(kGroupMemory);
  cmd->add_option("--decode-log-interval", f.decode_log_interval,
                  "Log expert-cache hits, misses, bytes and CPU experts every N decode steps (0: off)")
      ->capture_default_str()
      ->group(kGroupLogging);
}

void apply_moe_flags(const MoeFlags& f, EngineOptions& eo) {
  MoeOptions o;
  if (f.cpu_moe && f.strategy != "auto" && f.strategy != "cpu")
    fail(ErrorCode::kInvalidArgument, "-cmoe/--cpu-moe means --moe-strategy cpu, not {}: give one of them",
         f.strategy);
  const std::string strategy = f.cpu_moe ? std::string("cpu") : f.strategy;
  o.strategy = parse_moe_strategy(strategy);
  const int n_cache = (f.cache_slots ? 1 : 0) + (f.cache_rate ? 1 : 0) + (f.cache_auto ? 1 : 0);
  if (n_cache > 1)
    fail(ErrorCode::kInvalidArgument, "--moe-cache-slots, --moe-cache-rate and --moe-cache-auto are alternatives: give one");
  const bool no_cache = o.strategy == MoeStrategy::kFused || o.strategy == MoeStrategy::kCpu;
  if (n_cache > 0 && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-cache-{} needs --moe-strategy auto, offload or hybrid ({} has no expert cache)",
         f.cache_slots ? "slots" : f.cache_rate ? "rate" : "auto", strategy);
  if (f.cache_slots) {
    if (*f.cache_slots < 1)  // the model's own minimum is checked once it is loaded (cache_sizing)
      fail(ErrorCode::kInvalidArgument, "--moe-cache-slots {} must be at least 2 x the experts of a MoE layer (the "
           "\"experts\" line of `ft inspect MODEL`), or leave the size to --moe-cache-auto", *f.cache_slots);
    o.cache = {CacheSizeMode::kSlots, *f.cache_slots, 0.0};
  }
  if (f.cache_rate) {
    if (!(*f.cache_rate > 0.0 && *f.cache_rate <= 1.0))
      fail(ErrorCode::kInvalidArgument, "--moe-cache-rate {} must be in (0, 1]", *f.cache_rate);
    o.cache = {CacheSizeMode::kRate, 0, *f.cache_rate};
  }
  if (!f.cpu_layers.empty() && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-layers needs --moe-strategy auto, offload or hybrid (not {})",
         strategy);
  o.cpu_layers = f.cpu_layers;
  if (f.fetch_cap) {
    if (o.strategy != MoeStrategy::kHybrid)
      fail(ErrorCode::kInvalidArgument, "--moe-fetch-cap needs --moe-strategy hybrid (not {})", strategy);
    if (*f.fetch_cap < 0) fail(ErrorCode::kInvalidArgument, "--moe-fetch-cap {} must be >= 0", *f.fetch_cap);
    o.fetch_cap = *f.fetch_cap;
  }
  if (!f.cpu_cost.empty()) {
    if (o.strategy != MoeStrategy::kHybrid)
      fail(ErrorCode::kInvalidArgument, "--moe-cpu-cost needs --moe-strategy hybrid (not {})", strategy);
    const double c = f.cpu_cost[0], t = f.cpu_cost.size() > 1 ? f.cpu_cost[1] : 0.0;
    if (!(c > 0 && c <= 1000) || !(t >= 0 && t <= 1000))
      fail(ErrorCode::kInvalidArgument, "--moe-cpu-cost {}: expected C in (0, 1000] and T in [0, 1000] (fetches)",
           fmt::join(f.cpu_cost, ","));
    o.cpu_cost = std::max<int32_t>(1, static_cast<int32_t>(std::lround(c * kFetchCostUnit)));
    o.cpu_token_cost = static_cast<int32_t>(std::lround(t * kFetchCostUnit));
  }
  if (f.calibrate) {
    if (o.strategy != MoeStrategy::kAuto && o.strategy != MoeStrategy::kHybrid)
      fail(ErrorCode::kInvalidArgument, "--moe-calibrate needs --moe-strategy auto or hybrid ({} has no planner to "
           "calibrate)", strategy);
    if (f.fetch_cap || !f.cpu_cost.empty())
      fail(ErrorCode::kInvalidArgument, "--moe-calibrate with --moe-{}: that flag sets the split the calibration would "
           "time; give one", f.fetch_cap ? "fetch-cap" : "cpu-cost");
  }
  o.recalibrate = f.calibrate;
  o.calibration_dir = default_cache_dir();
  if (f.prefetch != "on" && f.prefetch != "off" && f.prefetch != "auto")
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch {} must be auto, on or off", f.prefetch);
  o.prefetch = f.prefetch == "on" ? MoeOptions::Prefetch::kOn
               : f.prefetch == "off" ? MoeOptions::Prefetch::kOff : MoeOptions::Prefetch::kAuto;
  if (o.prefetch == MoeOptions::Prefetch::kOn && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch on needs --moe-strategy auto, offload or hybrid ({} has no expert "
         "cache)", strategy);
  if (f.prefetch_depth) {
    if (*f.prefetch_depth < 1 || *f.prefetch_depth > PrefetchTargets::kMax)
      fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth {} must be 1 to {}", *f.prefetch_depth,
           PrefetchTargets::kMax);
    if (no_cache)
      fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth needs --moe-strategy auto, offload or hybrid ({} has no "
           "expert cache)", strategy);
    if (o.prefetch == MoeOptions::Prefetch::kOff)
      fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth with --moe-prefetch off: there is no prefetch to deepen");
    o.prefetch_depth = *f.prefetch_depth;
    o.prefetch_depth_given = true;
  }
  if (f.cpu_int8 != "on" && f.cpu_int8 != "off")
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-int8 {} must be on or off", f.cpu_int8);
  o.cpu_int8 = f.cpu_int8 == "on";
  if (f.cpu_bf16 != "on" && f.cpu_bf16 != "off")
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-bf16 {} must be on or off", f.cpu_bf16);
  o.cpu_bf16 = f.cpu_bf16 == "on";
  if (f.bank_format != "auto" && f.bank_format != "stored" && f.bank_format != "ec12")
    fail(ErrorCode::kInvalidArgument, "--moe-bank-format '{}' must be auto, stored or ec12", f.bank_format);
  if (f.bank_format == "ec12" && o.strategy == MoeStrategy::kFused)
    fail(ErrorCode::kInvalidArgument, "--moe-bank-format ec12 needs expert banks: --moe-strategy offload, hybrid or "
         "cpu (fused keeps every expert on the device as the checkpoint stores it)");
  if (f.bank_format != "auto") o.bank_format = f.bank_format == "ec12" ? BankFormat::kEc12 : BankFormat::kStored;
  if (f.kv_reserve_tokens && *f.kv_reserve_tokens < 0)
    fail(ErrorCode::kInvalidArgument, "--kv-reserve-tokens {} must be >= 0", *f.kv_reserve_tokens);
  if (f.decode_log_interval < 0)
    fail(ErrorCode::kInvalidArgument, "--decode-log-interval {} must be >= 0", f.decode_log_interval);
  if (f.gpu_memory_limit_gib) {
    const double gib = *f.gpu_memory_limit_gib;
    if (!(gib > 0.0 && gib < 1e6)) fail(ErrorCode::kInvalidArgument, "--gpu-memory-limit {} GiB must be > 0", gib);
    eo.gpu_memory_limit = std::max<int64_t>(1, static_cast<int64_t>(std::llround(gib * 1073741824.0)));
  }
  eo.moe = o;
  if (f.kv_reserve_tokens) eo.kv_reserve_tokens = *f.kv_reserve_tokens;
  eo.decode_log_interval = f.decode_log_interval;
}

}  // namespace ft::cli
