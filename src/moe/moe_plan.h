#pragma once
// MoE strategy planning: turns the flags (--moe-strategy, --moe-cache-*, --moe-cpu-layers, the
// hybrid fetch cap) and the memory budget into a MoePlan the engine consumes: where each layer's
// routed experts are computed and how big the expert cache is. Pure functions, no devices.
//   fused   every routed expert resident on the device (Ops::moe_experts over the bank)
//   offload experts in host banks, a GPU expert cache of slots (admission + gather)
//   hybrid  offload, misses over a per-layer fetch cap computed by the CPU at the same time
//   cpu     the GPU runs everything but routed experts, which the CPU computes from the banks
//   auto    fused when everything fits and no cache flag (--moe-cache-*, --moe-cpu-layers, --moe-prefetch on)
//           was given; else, beside a GPU (MoeOptions::auto_planner), the planner: hybrid whose
//           start-up calibration also times offload and keeps the faster; else offload
// Hybrid without --moe-fetch-cap splits each layer's misses between the copy path and the CPU by
// a cost model (FetchPolicy in moe/cache_admission.h), its CPU cost calibrated at start.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moe/cache_admission.h"
#include "moe/cache_sizing.h"
#include "moe/expert_bank.h"

namespace ft {

enum class MoeStrategy : uint8_t { kAuto, kFused, kOffload, kHybrid, kCpu };

/** "auto", "fused", "offload", "hybrid", "cpu". */
const char* moe_strategy_name(MoeStrategy s);
/** Parses a --moe-strategy value. Throws ft::Error(kInvalidArgument) naming the flag and the choices. */
MoeStrategy parse_moe_strategy(std::string_view s);

/** Where one layer's routed experts are computed. */
enum class MoeLayerMode : uint8_t {
  kDense,     // no routed experts
  kResident,  // resident on the compute device (fused)
  kCache,     // through the expert cache (offload, hybrid)
  kCpu,       // on the CPU from the banks (cpu, --moe-cpu-layers)
};

struct MoeOptions {
  MoeStrategy strategy = MoeStrategy::kAuto;
  CacheSizeRequest cache;     // --moe-cache-slots | --moe-cache-rate | --moe-cache-auto
  std::string cpu_layers;     // --moe-cpu-layers LIST|N|FRACTION ("" = none)
  int32_t fetch_cap = -1;     // hybrid: misses fetched per layer per step; < 0: calibrate at start
  /** --moe-cpu-cost: hybrid's planned split with these costs (FetchPolicy, kFetchCostUnit a fetch)
   *  instead of calibrating them; 0: not given. */
  int32_t cpu_cost = 0;
  int32_t cpu_token_cost = 0;
  /** auto, where a cache is needed: the planner (hybrid, with offload among the candidates of its
   *  start-up calibration) instead of offload. The engine sets it when a GPU computes beside the
   *  CPU; on the CPU backend the CPU's cores already run everything. */
  bool auto_planner = false;
  /** --moe-prefetch: fetch the next layer's predicted experts ahead. Auto: on for the offload and
   *  hybrid strategies (both measured faster with it on the H200). */
  enum class Prefetch { kAuto, kOn, kOff } prefetch = Prefetch::kAuto;
  /** --moe-prefetch-depth: how many cache layers ahead offload prefetches (1 to 4; hybrid uses 1). */
  int32_t prefetch_depth = 3;
  /** --moe-prefetch-depth was given: like --moe-prefetch on, it asks for an expert cache (auto). */
  bool prefetch_depth_given = false;
  /** --moe-cpu-int8: the CPU expert executor's int8 activations (CpuExpertExecutor). */
  bool cpu_int8 = true;
  /** --moe-cpu-bf16: the CPU expert executor's bf16 activations for BF16/EC12 experts (CpuExpertExecutor).
   *  Off here: on, the CPU's experts are within bf16 tolerance of the GPU's, no longer bit for bit. The
   *  CLI's default (auto) turns it on where the CPU has AMX-BF16 (cpu::has_amx_bf16). */
  bool cpu_bf16 = false;
  /** --moe-preload: fill the expert cache at start with a share of every cache layer's experts
   *  (OffloadedExperts::preload_cache), read over PCIe once while the server starts. */
  bool preload = true;
  /** --moe-prefill-cpu: the share of a streamed (prefill) layer's uncached experts the CPU computes
   *  instead of the copy path, in [0, 1]; < 0 (auto): from the planner's costs (hybrid's FetchPolicy
   *  at the step's tokens per expert), none for offload or a plain fetch cap. */
  double prefill_cpu_share = -1.0;
  /** --moe-bank-format: how the expert banks hold their records; unset (auto): kEc12 where
   *  ec12_bankable (BF16 experts), else kStored. */
  std::optional<BankFormat> bank_format;
  /** --moe-calibrate: time the start-up calibration's candidates again even where its file holds
   *  them (and rewrite the file). */
  bool recalibrate = false;
  /** The folder that keeps the start-up calibration (engine/calibration_cache.h), per machine, model
   *  and plan; "": none kept, every start calibrates (the library's default; `ft` passes
   *  default_cache_dir()). */
  std::string calibration_dir;
  /** Host memory the expert banks may take, in bytes (--host-memory-limit, else measured:
   *  usable_host_memory); < 0: no bound. Set by the engine. Banks beyond it move whole layers to
   *  the GPU (split_banks). */
  int64_t host_bank_limit = -1;
  /** Where host_bank_limit came from, for messages ("--host-memory-limit", "measured ..."). */
  std::string host_limit_source;
};

struct MoePlan {
  MoeStrategy strategy = MoeStrategy::kFused;  // resolved, never kAuto
  std::vector<MoeLayerMode> layers;            // per model layer
  std::vector<int32_t> fetch_cap;              // per model layer; -1: unlimited (kCache layers only)
  bool calibrate_fetch_cap = false;            // hybrid without an explicit cap: the engine calibrates the split
  int32_t cpu_cost = 0;                        // the kCache layers' planned split (FetchPolicy; 0: plain caps)
  int32_t cpu_token_cost = 0;                  // ... its cost of each further pair of an expert
  bool offload_candidate = false;              // auto's planner: the calibration may pick fetching every miss
  bool fetch_cap_provisional = false;          // set by the runtime: fetch_cap holds until that calibration
  CacheSize cache;                             // n_slots = 0 without a cache
  int64_t cache_experts = 0;                   // routed experts of the kCache layers (a cache of all of them never evicts)
  bool prefetch = false;                       // set by the runtime: some layer fetches the next one's experts ahead
  int32_t prefetch_depth = 0;                  // set by the runtime: cache layers ahead (0: no prefetch)
  std::string prefetch_note;                   // set by the runtime: why the depth is below the one asked for
  bool cpu_int8 = false;                       // set by the runtime: CPU experts dot Q4_K/Q6_K/MXFP4 with int8 activations
  bool cpu_bf16 = false;                       // set by the runtime: CPU experts dot BF16/EC12 with bf16 activations
  BankFormat bank_format = BankFormat::kStored;  // set by the runtime: the expert banks' form (no banks: kStored)
  int64_t host_bank_limit = -1;                // MoeOptions::host_bank_limit the plan was made with (< 0: none)
  int64_t host_bank_bytes = 0;                 // routed experts of the layers kept in host banks (kCache, kCpu), as stored
  int64_t gpu_bank_bytes = 0;                  // routed experts of kResident layers that host memory could not hold
  /** Every MoE layer went resident because host memory holds none of their banks (strategy became
   *  fused): the flags given that then do not apply ("--moe-strategy hybrid, --moe-cache-slots 300";
   *  "" when none was given) and the least host memory that keeps one layer's banks. */
  std::string unused_flags;
  int64_t least_layer_bytes = 0;

  /** Layer l's FetchPolicy: its fetch cap with the planned costs. */
  FetchPolicy fetch_policy(size_t l) const {
    FetchPolicy p(fetch_cap[l]);
    p.cpu_cost = cpu_cost, p.cpu_token_cost = cpu_token_cost;
    return p;
  }
  /** Layers in `mode`. */
  int64_t count(MoeLayerMode mode) const;
  /** One line for the log: strategy, slots and their memory, CPU layers, caps, prefetch. */
  std::string summary() const;
};

/** Where whole layers' expert banks go when host memory cannot hold them all. */
struct BankSplit {
  std::vector<int64_t> gpu_layers;  // layers whose routed experts go resident on the device instead, ascending
  int64_t host_bytes = 0;           // banks left in host memory
  int64_t gpu_bytes = 0;            // experts of gpu_layers
};

/** Splits expert banks of layer_bytes[l] bytes per layer (0: no banks) between host memory of
 *  `host_limit` bytes (< 0: unbounded, nothing moves) and `gpu_room` bytes of device memory (what
 *  is left after the resident weights, buffers and KV): while the host's banks exceed host_limit,
 *  the last layer with movable[l] set moves to the device (whole layers; the fewest that make the
 *  rest fit when layers are alike). `host_source` names where host_limit came from in messages.
 *  Throws ft::Error(kInvalidArgument) for vectors of different sizes, kOutOfMemory when the movable
 *  layers that must leave host memory do not fit gpu_room (or too few layers may move), naming the
 *  bytes needed and available on each side and what would fit: `fits` ("host memory of ... or ";
 *  "": the least host limit whose split fits gpu_room, computed here; plan_moe passes the least
 *  for which its whole plan, expert cache included, fits, and the cpu strategy's). */
BankSplit split_banks(const std::vector<int64_t>& layer_bytes, const std::vector<bool>& movable, int64_t host_limit,
                      int64_t gpu_room, const std::string& host_source, const std::string& fits = "");

/** `bytes` as a --host-memory-limit value in GiB, three significant digits rounded up ("0.633"). */
std::string host_limit_gib(int64_t bytes);

/** The model layers --moe-cpu-layers selects, ascending. `moe_layers`: the model's MoE layer ids,
 *  ascending. Forms: "" (none); N, a whole number: the first N MoE layers; FRACTION, a number
 *  with a '.', in [0, 1]: the first round(F * n_moe) MoE layers; LIST, ids and ranges with ',' and
 *  '-' ("0,3,8-11"; a single id needs a comma: "5,"): those layers. Throws ft::Error
 *  (kInvalidArgument) naming the flag for malformed input, N or F out of range, or a listed layer
 *  that has no routed experts. */
std::vector<int64_t> parse_moe_cpu_layers(const std::string& spec, const std::vector<int64_t>& moe_layers);

/** The plan for a model whose layer l has experts_per_layer[l] routed experts (0: dense), within
 *  `budget` (its experts_per_layer and total_experts are taken from the vector). With expert banks
 *  (not fused) and options.host_bank_limit >= 0, layers whose banks host memory cannot hold go
 *  resident on the device (split_banks over `bank_bytes`, each layer's routed experts as stored;
 *  empty: budget.expert_bytes shared by expert count; --moe-cpu-layers' layers stay), their bytes
 *  charged to the device before the expert cache is sized; when every layer goes, the strategy is
 *  fused and MoePlan::unused_flags names the flags given that no longer apply. A refusal where host
 *  memory forced layers resident names them, the least --host-memory-limit for which the plan fits
 *  (found by planning again) and suggests --moe-strategy cpu only where that plan fits. Throws
 *  ft::Error(kInvalidArgument) for contradictory flags (--moe-cpu-layers with fused, a model
 *  without MoE layers and a non-auto strategy), kOutOfMemory from plan_cache_size or when fused
 *  (or even cpu: dense weights + KV) does not fit. */
MoePlan plan_moe(const MoeOptions& options, const std::vector<int32_t>& experts_per_layer, GpuMemoryBudget budget,
                 const std::vector<int64_t>& bank_bytes = {});

}  // namespace ft
