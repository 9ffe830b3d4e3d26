#pragma once
// The engine's memory plan (issue 32): how the KV cache is sized, what the engine placed on its
// backend's device (weights less those read from host memory, KV cache, step buffers, the backend's
// scratch), where the token embedding table lives (--embed-weights), the limits (--gpu-memory-limit or
// the device's free memory, the host memory for expert banks) and, for a MoE model, the budget and the
// plan (moe/moe_plan.h plan_moe) that MoeRuntime (engine/moe_runtime.h) then builds. One function,
// plan_memory, and one object, MemoryPlan: Engine::memory_plan(), printed by `ft serve`'s start-up
// banner and read by /v1/stats and POST /v1/admin/cache.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "engine/engine_options.h"
#include "engine/moe_runtime.h"
#include "formats/checkpoint.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "util/error.h"

namespace ft {

/** What the engine placed on its backend's device, in bytes: the checkpoint's weights (less those
 *  read from host memory), the KV cache (and per token slot, spare pages included), the step and
 *  forward buffers, and the backend's scratch that the largest step will allocate. */
struct PlacedMemory {
  int64_t weights = 0, kv = 0, kv_per_token = 0, buffers = 0;
  int64_t workspace = 0;  // Ops::workspace_bytes(workspace_shape()): not allocated at load
};

/** Whether --embed-weights auto puts the token embedding table (and the per-layer tables that move with
 *  it, such as Qwen4-Exp's n-gram tables) in host memory the backend reads over
 *  the bus (Model::move_embeddings_to_host; a decode step reads one row per token: one bus read, microseconds;
 *  an 8k prompt 8k rows, ~0.6 ms at 55 GB/s for qwen3-30b-a3b's 4 KiB rows), given `plan`, made with
 *  the table on the device: yes when it has an expert cache (offload, hybrid) sized by the memory left
 *  (`request` is --moe-cache-auto) that holds fewer than `total_experts` (MoePlan::cache_experts: the
 *  routed experts of its cache layers), so the table's bytes become
 *  slots (llama.cpp keeps this table on the host always). The engine also moves it when a plan fits
 *  only without it (then possibly fused; cpu too, whose layers host memory could not hold go resident).
 *  Otherwise fused, cpu and dense models keep it; "host" moves it for any
 *  model whose LM head is not tied to it, "device" never. The CPU backend reads the table where it is
 *  and only its budget changes, so that --gpu-memory-limit emulates a GPU's plan. */
bool embeddings_on_host_auto(const MoePlan& plan, const CacheSizeRequest& request, int64_t total_experts);

/** The KV cache's layout for a model of `config` under `options` (kv_tokens already resolved): page
 *  size, token budget (--kv-tokens), dtype (--kv-cache-dtype; auto: bf16 on CUDA but for compressed-KV layers, which keep the activation dtype; f32 on the CPU),
 *  one spare page for graph padding rows when `spare_page`, recurrent-state slots (max_seqs +
 *  --state-snapshots) and the sliding-window pool's budget (at least what max_seqs windows and one step
 *  need, --swa-kv-tokens); `options` must pass EngineOptions::validate. Throws kUnsupported for bf16
 *  on the CPU backend, for fp8 / q8_0 (quantized pages with scales, quant/kv_quant.h) on a backend
 *  other than the CPU and CUDA, and for a layer whose heads need more scales a token than the pages
 *  hold. */
KvCacheConfig plan_kv_cache(const EngineOptions& options, const ModelConfig& config, const Ops& ops, bool spare_page);

/** The engine's memory plan. Sizes in bytes. */
struct MemoryPlan {
  int64_t gpu_memory_limit = 0;     // --gpu-memory-limit (0: the device's free memory; CPU backend: none)
  int64_t weight_bytes = 0;         // every tensor of the checkpoint as stored (mapped from the file)
  PlacedMemory placed;              // on the device, after the embedding placement
  KvCacheConfig kv;                 // the KV cache as allocated (plan_kv_cache)
  int32_t kv_pages = 0;             // pages of the KV pool (spare pages not counted)
  int64_t kv_tokens = 0;            // tokens the pool holds: kv_pages x page size (--kv-tokens in whole pages)
  int64_t kv_bytes = 0;             // KvCache::bytes: every layer's K and V, sliding-window pool and states included
  int64_t kv_bytes_per_token = 0;   // KvCache::bytes_per_token: the full pool's K and V of one token (MLA: latent + RoPE key;
                                    // the sliding-window pool's layers are a fixed cost, KvCache::swa_pool_bytes)
  EmbedPlacement embed_weights = EmbedPlacement::kAuto;  // --embed-weights
  int64_t host_mapped_bytes = 0;    // weights the backend reads from host memory (Model::move_embeddings_to_host's tables; 0: none)
  int64_t kv_host_bytes = 0;        // the most host memory the KV tiers take (KvTiers::host_bytes; 0: none)
  double kv_host_gib = 0;           // --kv-host-gib
  bool prompt_cache = false;        // --prompt-cache-dir given
  std::optional<MoeRuntimeConfig> moe_inputs;  // MoE models: the options MoeRuntime builds the plan with
  std::optional<MoePlan> moe;                  // MoE models: the plan (MoeRuntime adds what it runs: prefetch, calibrated cap)
  std::optional<GpuMemoryBudget> budget;       // the budget it was made for (limit resolved)
};

/** A refusal of one size, the KV cache's tokens or the expert cache's slots: `field` is the name its
 *  message gives it (EngineOptions::kv_tokens_flag or expert_slots_flag: a flag, or the field of POST
 *  /v1/admin/cache, whose 400 names it as `param`). */
class SizeRefusal : public Error {
 public:
  SizeRefusal(ErrorCode code, const std::string& message, std::string field_name)
      : Error(code, message), field(std::move(field_name)) {}
  std::string field;
};

/** What plan_memory reads: the engine's options, backend, checkpoint, loaded model (its embedding
 *  table may move to host memory) and allocated KV cache, the bytes of its step and forward buffers,
 *  and the shapes that size the backend's scratch. */
struct MemoryPlanInputs {
  const EngineOptions& options;
  Ops& ops;
  Checkpoint& checkpoint;
  Model& model;
  const KvCache& kv;
  int64_t buffer_bytes = 0;
  WorkspaceShape workspace;
  /** On a resize (POST /v1/admin/cache): the plan in use, whose measured limits (the device's free
   *  memory, the host memory for the banks) are kept, not measured again with its banks and slots
   *  still held. Null at start. */
  const MemoryPlan* previous = nullptr;
  /** After the expert banks' fill stopped because host memory shrank (HostMemoryShrunk): host
   *  memory measured again, with the failed fill's banks freed, less kHostMemoryMargin; it bounds the
   *  banks instead of the start's figure (and of a larger --host-memory-limit). -1: none. */
  int64_t remeasured_host_limit = -1;
};

/** One row of the memory plan's table (memory_rows): bytes on the backend's device and in host
 *  memory the plan put there. */
struct MemoryRow {
  std::string name;  // "dense weights", "routed experts", "expert slots", "token embeddings", "KV cache", ...
  int64_t device = 0;
  int64_t host = 0;
  std::string detail;  // counts behind the bytes ("1,952 slots of 9.4 MiB", "16,384 tokens")
};

/** The plan's rows, in order: dense weights (everything resident but the routed experts), routed
 *  experts (resident under fused, else their host banks), the expert cache's slots, token embeddings
 *  when read from host memory, the KV cache, the KV host tier (its host memory at most: the
 *  --kv-host-gib bound, the prompt cache's write queue and read-ahead and a margin), step buffers, the backend's workspace. Rows of 0 bytes
 *  on both sides are left out. The memory the CUDA graphs take is not known here and not counted. */
std::vector<MemoryRow> memory_rows(const MemoryPlan& p);

/** The limit the rows' device bytes are held to: the MoE budget's (--gpu-memory-limit, else the
 *  device's free memory when the plan was made), else --gpu-memory-limit; 0 when there is none. */
int64_t memory_limit(const MemoryPlan& p);

/** The table `ft serve` prints at start: a header, one line per memory_rows row with its device and
 *  host bytes, then the totals and, with a limit, the limit and the margin left. `device` names the
 *  device column ("GPU", or "device" for the CPU backend, whose device is host memory too). */
std::string memory_table(const MemoryPlan& p, const std::string& device);

/** Plans the engine's memory once the model, the KV cache and the step buffers are placed (the options
 *  validated by EngineOptions::validate). The one place the limits are resolved and held to:
 *  decides the token embedding table's place (--embed-weights; auto: embeddings_on_host_auto over
 *  the MoE plan with the table on the device, or host when the plan fits only so) and moves it; for a
 *  MoE model makes the budget (--gpu-memory-limit, else the device's free memory plus what is placed;
 *  the KV reserve: --kv-reserve-tokens, else the KV pool; --host-memory-limit, else measured) and the
 *  plan (plan_moe, which sizes the expert cache against the budget), refusing experts the CUDA kernels
 *  do not read and a --moe-fetch-cap above a layer's experts; for a dense model refuses MoE-only flags
 *  (plan_moe) and a model that does not fit --gpu-memory-limit (kOutOfMemory naming the sizes and how
 *  many KV tokens would fit). An out-of-memory error names --embed-weights host when that would help
 *  (with_embed_weights_hint). At start it logs the host memory measured for the banks (`host memory:`;
 *  with --host-memory-limit, the limit beside it and a warning when the limit is more) and warns when
 *  host memory made every MoE layer resident while flags asked for banks (MoePlan::unused_flags). */
MemoryPlan plan_memory(const MemoryPlanInputs& in);

/** `e`, with " (or --embed-weights host: ...)" appended, naming the bytes that would leave the device,
 *  when it is kOutOfMemory and `model` has embedding tables that can move (Model::movable_embedding_bytes:
 *  the token table unless tied, per-layer tables such as Qwen4-Exp's n-gram tables) still on the
 *  device, and its token table is not tied to the LM head (--embed-weights host is refused then). */
Error with_embed_weights_hint(const Error& e, const Model& model);

}  // namespace ft
