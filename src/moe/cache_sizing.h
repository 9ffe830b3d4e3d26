#pragma once
// Expert-cache sizing: how many slots the GPU's expert cache gets (--moe-cache-slots N,
// --moe-cache-rate R, --moe-cache-auto), as a pure function of the memory budget. Within
// --gpu-memory-limit, the resident weights and --kv-reserve-tokens of KV are reserved first; the
// rest may go to slots. A cache needs at least 2 x experts-per-layer slots (prefill streams whole
// layers through two staging regions), and more slots than routed experts are never useful.
#include <cstdint>
#include <string>
#include <vector>

#include "moe/slot_classes.h"

namespace ft {

enum class CacheSizeMode : uint8_t {
  kAuto,   // --moe-cache-auto (default): every slot that fits, up to all experts
  kSlots,  // --moe-cache-slots N
  kRate,   // --moe-cache-rate R: ceil(R * all routed experts) slots
};

struct CacheSizeRequest {
  CacheSizeMode mode = CacheSizeMode::kAuto;
  int64_t slots = 0;  // kSlots
  double rate = 0.0;  // kRate, in (0, 1]
};

/** What the GPU must hold, in bytes. */
struct GpuMemoryBudget {
  int64_t gpu_memory_limit = 0;    // usable GPU memory (--gpu-memory-limit, else the device's free memory)
  int64_t resident_bytes = 0;      // dense weights + activations, workspaces, graphs
  int64_t kv_bytes_per_token = 0;  // KV of one token over all layers
  int64_t kv_reserve_tokens = 8192;  // --kv-reserve-tokens
  /** The flag that set kv_reserve_tokens, named in a refusal's advice: "--kv-reserve-tokens", or
   *  "-c/--kv-tokens" where the reserve is the KV pool itself (ft serve leaves it unset). */
  std::string kv_reserve_flag = "--kv-reserve-tokens";
  int64_t kv_page_tokens = 1;      // the KV page size: a value advised for the flag is whole pages
  int64_t slot_bytes = 0;          // one expert record (ExpertBanks::slot_bytes)
  /** Every MoE layer's record size and bias rows (moe/slot_classes.h; the memory plan fills it):
   *  plan_moe groups its cache layers' into slot_classes. Empty: one class of slot_bytes. */
  std::vector<SlotLayerShape> slot_layers;
  /** The cache layers' slot classes (plan_moe sets them from slot_layers). Empty: one class of
   *  slot_bytes, experts_per_layer and total_experts. */
  std::vector<SlotClass> slot_classes;
  int32_t experts_per_layer = 0;   // largest n_expert over MoE layers
  int64_t total_experts = 0;       // routed experts over all MoE layers (plan_moe sizes the cache with those of its layers)
  int64_t expert_bytes = 0;        // all routed experts resident (what `fused` needs)
  /** Set by plan_moe when host memory forced layers resident: what resident_bytes holds of them,
   *  inserted after "of resident weights and buffers" in a refusal (" (648 MiB of them the routed
   *  experts of layers 1-2 ...)"), and the advice put first ("--host-memory-limit to ... or raise "). */
  std::string resident_note;
  std::string host_advice;
  /** A refusal's last advice (plan_moe clears it when --moe-strategy cpu cannot fit either, or names
   *  the host memory that needs). */
  std::string cpu_advice = ", or run the routed experts on the CPU with --moe-strategy cpu";
};

struct CacheSize {
  int64_t n_slots = 0;
  int64_t pool_bytes = 0;     // the slots' bytes over all classes (one class: n_slots * slot_bytes)
  /** The slot classes with their share of n_slots (SlotClass::n_slots); one entry when the budget
   *  had none. */
  std::vector<SlotClass> classes;
  int64_t kv_bytes = 0;       // reserved KV
  int64_t free_bytes = 0;     // limit - resident - KV - pool
  bool experts_fit = false;   // every routed expert fits resident next to the dense weights and KV
  std::string note;           // how the count was adjusted ("" when as requested)
};

/** The cache size for `req` within `b`. With several slot classes the request counts slots over all
 *  of them (split_slots divides them), the smallest legal cache is each class's min_slots(), and
 *  auto takes the most slots whose classes' bytes fit. Throws ft::Error(kInvalidArgument) for a bad request or
 *  budget field (naming the flag: a rate outside (0, 1], slots below 2 x experts-per-layer, ...),
 *  kOutOfMemory when not even the smallest legal cache (or the requested one) fits, saying how
 *  much memory is missing and which flags would help (--gpu-memory-limit, --kv-reserve-tokens,
 *  --moe-cache-slots, and b's host_advice / cpu_advice: --host-memory-limit, --moe-strategy cpu). */
CacheSize plan_cache_size(const GpuMemoryBudget& b, const CacheSizeRequest& req);

/** The cache's slots for plan lines: "120 slots of 3.10 MiB", or with several classes "320 slots: 120
 *  of 3.10 MiB (layers 0-9), 200 of 2.00 MiB (layers 10-47)". */
std::string describe_cache_slots(const CacheSize& cache);

}  // namespace ft
