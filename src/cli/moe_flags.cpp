#include "cli/moe_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/flag_checks.h"
#include "backend/cpu/gemm_amx.h"
#include "cli/help_format.h"
#include "moe/cache_admission.h"
#include "util/error.h"

namespace ft::cli {
namespace {

/** An on|off flag setting `field` (any other value refused naming the flag); its default shown. */
void add_on_off_flag(CLI::App* cmd, const std::string& name, bool& field, const std::string& help,
                     const std::string& group) {
  cmd->add_option_function<std::string>(
         name,
         [&field, name](const std::string& v) {
           if (v != "on" && v != "off") refuse_flag_value("{} {} must be on or off", name, v);
           field = v == "on";
         },
         help)
      ->default_str(field ? "on" : "off")
      ->group(group);
}

}  // namespace

void add_moe_flags(CLI::App* cmd, EngineOptions& eo, CompatFlags& compat) {
  const char* g = kGroupMoe;
  MoeOptions& o = eo.moe;
  // --moe-backend, --moe-cache-size: the Python FreeToken engine's names, with the same meaning (its
  // cache size is also a count of expert slots over all layers).
  cmd->add_option_function<std::string>(
         "--moe-strategy,--moe-backend",
         [&o](const std::string& v) { as_usage_error([&] { o.strategy = parse_moe_strategy(v); }); },
         "auto (fused when every expert fits and none of --moe-cache-slots/-rate, --moe-cpu-layers, --moe-prefetch "
         "on, --moe-prefetch-depth is given; else, with a GPU, the planner: hybrid or offload, whichever its "
         "start-up calibration times faster; else offload), fused, offload, hybrid or cpu")
      ->default_str(moe_strategy_name(o.strategy))
      ->group(g);
  cmd->add_option_function<int64_t>(
         "--moe-cache-slots,--moe-cache-size", [&o](int64_t v) { o.cache = {CacheSizeMode::kSlots, v, 0.0}; },
         "Expert-cache slots over all MoE layers, each one expert of one layer (at least 2 x experts per layer)")
      ->group(g);
  cmd->add_option_function<double>(
         "--moe-cache-rate", [&o](double v) { o.cache = {CacheSizeMode::kRate, 0, v}; },
         "Expert-cache slots as a fraction of the routed experts that go through the cache (all of them unless "
         "--moe-cpu-layers), in (0, 1]")
      ->group(g);
  cmd->add_flag("--moe-cache-auto")->description("Every slot that fits the memory budget (the default)")->group(g);
  // llama.cpp's -cmoe/--cpu-moe and -ncmoe/--n-cpu-moe N (the MoE weights of the first N layers on
  // the CPU) mean --moe-strategy cpu and --moe-cpu-layers N here.
  cmd->add_flag("--cpu-moe", compat.cpu_moe, "-cmoe (llama.cpp): every expert on the CPU, as --moe-strategy cpu")->group(g);
  cmd->add_option("--moe-cpu-layers,--n-cpu-moe", o.cpu_layers,
                  "MoE layers whose experts run on the CPU under offload/hybrid: N (first N), FRACTION (0.25) or "
                  "LIST (0,3,8-11)")
      ->group(g);
  cmd->add_option_function<int32_t>(
         "--moe-fetch-cap",
         [&o](int32_t v) {
           if (v < 0) refuse_flag_value("--moe-fetch-cap {} must be >= 0", v);  // -1: not given
           o.fetch_cap = v;
         },
         "hybrid: experts fetched per layer per step (more run on the CPU)")
      ->group(g);
  cmd->add_option_function<std::vector<double>>(
         "--moe-cpu-cost",
         [&o](const std::vector<double>& cost) {
           const double c = cost.empty() ? 0.0 : cost[0], t = cost.size() > 1 ? cost[1] : 0.0;
           if (!(c > 0 && c <= 1000) || !(t >= 0 && t <= 1000))
             refuse_flag_value("--moe-cpu-cost {}: expected C in (0, 1000] and T in [0, 1000] (fetches)",
                               fmt::join(cost, ","));
           o.cpu_cost = std::max<int32_t>(1, static_cast<int32_t>(std::lround(c * kFetchCostUnit)));
           o.cpu_token_cost = static_cast<int32_t>(std::lround(t * kFetchCostUnit));
         },
         "hybrid: the planner's costs instead of its start-up calibration: C[,T], an expert's CPU time with one "
         "token and each further token's, in fetches of one expert over PCIe (misses split so both paths end "
         "soonest)")
      ->delimiter(',')
      ->expected(1, 2)
      ->group(g);
  cmd->add_flag("--moe-calibrate", o.recalibrate,
                "Time the planner's candidate splits again at start instead of reading the calibration file that a "
                "start on this machine with this model and plan wrote ($FT_CACHE_DIR, else $XDG_CACHE_HOME/freetoken, "
                "else ~/.cache/freetoken), and rewrite it")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--moe-prefetch",
         [&o](const std::string& v) {
           if (v != "on" && v != "off" && v != "auto") refuse_flag_value("--moe-prefetch {} must be auto, on or off", v);
           o.prefetch = v == "on" ? MoeOptions::Prefetch::kOn
                        : v == "off" ? MoeOptions::Prefetch::kOff : MoeOptions::Prefetch::kAuto;
         },
         "on: predict the next layer's experts (its router on this layer's input) and fetch them while "
         "this layer computes; auto: on for the offload and hybrid strategies")
      ->default_str("auto")
      ->group(g);
  cmd->add_option_function<int32_t>(
         "--moe-prefetch-depth",
         [&o](int32_t v) {
           o.prefetch_depth = v;
           o.prefetch_depth_given = true;
         },
         "offload: prefetch this many cache layers ahead, 1 to 4 (1: the next layer's experts; each more keeps "
         "the copies a layer deeper in the queue; 3, the default, measured fastest on the H200). Depth d needs "
         "2d x the experts per layer in slots (or every expert), else the deepest that fits runs. Hybrid "
         "prefetches 1 ahead")
      ->group(g);
  add_on_off_flag(cmd, "--moe-cpu-int8", o.cpu_int8,
                  "on: experts computed on the CPU (hybrid, cpu, --moe-cpu-layers) dot their Q4_K/Q6_K/MXFP4 weights "
                  "with an int8 form of the activations (AVX-512 VNNI; faster, ~1e-4 relative from fp32); off: fp32, "
                  "bit for bit the CPU backend's",
                  g);
  o.cpu_bf16 = cpu::cpu_reports_amx_bf16();  // auto, until the flag says otherwise
  cmd->add_option_function<std::string>(
         "--moe-cpu-bf16",
         [&o](const std::string& v) {
           if (v != "on" && v != "off" && v != "auto") refuse_flag_value("--moe-cpu-bf16 {} must be auto, on or off", v);
           o.cpu_bf16 = v == "on" || (v == "auto" && cpu::cpu_reports_amx_bf16());
         },
         "on: experts computed on the CPU (hybrid, cpu, --moe-cpu-layers) dot their BF16 weights with a bf16 form "
         "of the activations (AVX-512 BF16, and AMX tiles for an expert with 4 tokens or more: a cpu-strategy "
         "prefill 2.4x the fp32 path's on an H100 host; ~3e-3 relative from fp32); off: fp32, bit for bit the CPU "
         "backend's; auto: on where the CPU has AMX-BF16")
      ->default_str("auto")
      ->group(g);
  add_on_off_flag(cmd, "--moe-preload", o.preload,
                  "on: fill the expert cache at start (its slots outside the two staging regions of prefill) with a "
                  "share of every layer's experts, read over PCIe once and counted as prefetched, so the first decode "
                  "steps hit and a first prompt copies that share from the cache; off: it starts empty",
                  g);
  cmd->add_option_function<std::string>(
         "--moe-prefill-cpu",
         [&o](const std::string& v) {
           if (v == "auto") {
             o.prefill_cpu_share = -1.0;
             return;
           }
           char* end = nullptr;
           const double f = std::strtod(v.c_str(), &end);
           if (v.empty() || *end != '\0' || !(f >= 0.0 && f <= 1.0))
             refuse_flag_value("--moe-prefill-cpu '{}' must be auto or a share in [0, 1]", v);
           o.prefill_cpu_share = f;
         },
         "hybrid: the share of a prefill layer's uncached experts that the CPU computes while the rest stream over "
         "PCIe (0: every one streams); auto: from the planner's costs at the prompt's tokens per expert")
      ->default_str("auto")
      ->group(g);
  cmd->add_option_function<std::string>(
         "--moe-bank-format",
         [&o](const std::string& v) {
           if (v != "auto" && v != "stored" && v != "ec12")
             refuse_flag_value("--moe-bank-format '{}' must be auto, stored or ec12", v);
           if (v == "auto") o.bank_format.reset();
           else o.bank_format = v == "ec12" ? BankFormat::kEc12 : BankFormat::kStored;
         },
         "How host expert banks hold BF16 experts: ec12 (12 bits a value, lossless: ~25% fewer bytes over "
         "PCIe and from host memory, decoded on the way in), stored (as in the checkpoint), auto (ec12 "
         "where the experts are BF16 with dimensions that are multiples of 64). Offload, hybrid and cpu "
         "only; ec12 is refused with fused")
      ->default_str("auto")
      ->group(g);
  cmd->add_option_function<int64_t>(
         "--kv-reserve-tokens",
         [&eo](int64_t v) {
           if (v < 0) refuse_flag_value("--kv-reserve-tokens {} must be >= 0", v);  // -1: not given
           eo.kv_reserve_tokens = v;
         },
         "KV tokens kept free when sizing the expert cache (default: the KV cache allocated, --kv-tokens; "
         "ft bench: 8192, a server's default)")
      ->group(g);
  // GiB here, bytes in EngineOptions (whose 0 is "no limit": refused here, so it cannot mean that).
  cmd->add_option_function<double>(
         "--gpu-memory-limit",
         [&eo](double gib) {
           if (!(gib > 0.0 && gib < 1e6)) refuse_flag_value("--gpu-memory-limit {} GiB must be > 0", gib);
           eo.gpu_memory_limit = std::max<int64_t>(1, static_cast<int64_t>(std::llround(gib * 1073741824.0)));
         },
         "GiB of device memory to plan within (default: the device's free memory; no limit on CPU)")
      ->group(kGroupMemory);
  cmd->add_option_function<double>(
         "--host-memory-limit",
         [&eo](double gib) {
           if (!(gib > 0.0 && gib < 1e6)) refuse_flag_value("--host-memory-limit {} GiB must be > 0", gib);
           eo.host_memory_limit = std::max<int64_t>(1, static_cast<int64_t>(std::llround(gib * 1073741824.0)));
         },
         "GiB of host memory the MoE expert banks may take; whole layers whose banks do not fit go resident on the "
         "GPU, charged to its budget before the expert cache and KV (default: measured at start: MemAvailable and "
         "the cgroup's memory limit, less 1 GiB; measured again before each layer's fill, which plans again or "
         "stops when other processes took the memory)")
      ->group(kGroupMemory);
  cmd->add_option("--decode-log-interval", eo.decode_log_interval,
                  "Log expert-cache hits, misses, bytes and CPU experts every N decode steps (0: off)")
      ->capture_default_str()
      ->group(kGroupLogging);
}

void check_moe_flag_choices(const CLI::App& cmd, const EngineOptions& eo) {
  int given = 0;
  for (const char* flag : {"--moe-cache-slots", "--moe-cache-rate", "--moe-cache-auto"}) given += cmd.count(flag) > 0;
  if (given > 1)
    fail(ErrorCode::kInvalidArgument, "--moe-cache-slots, --moe-cache-rate and --moe-cache-auto are alternatives: give one");
  const MoeStrategy s = eo.moe.strategy;
  if (cmd.count("--moe-cache-auto") > 0 && (s == MoeStrategy::kFused || s == MoeStrategy::kCpu))
    fail(ErrorCode::kInvalidArgument, "--moe-cache-auto needs --moe-strategy auto, offload or hybrid ({} has no expert cache)",
         moe_strategy_name(s));
}

}  // namespace ft::cli
