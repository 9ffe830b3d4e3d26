#pragma once
// EngineOptions: what an Engine is built with (the backend, the KV cache's size and type, the step
// limits, where the token embeddings live, the MoE plan's inputs), typed, with the names the command
// line spells them by and one validate() that holds every check of a value or a combination that
// needs no model. `ft run`, `ft serve` and `ft bench` bind their flags straight onto these fields
// (cli/engine_flags.h).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "moe/moe_plan.h"

namespace ft {

class ProgressSink;

/** The most --state-snapshots: far beyond any use (each is one request's whole recurrent state, 75 MiB
 *  for Qwen3-Next-80B), low enough that a typo is refused before memory is touched. */
constexpr int32_t kMaxStateSnapshots = 4096;
/** The most --tensor-parallel-size: ranks of one host (8 GPUs a node is the largest such machine). */
constexpr int32_t kMaxTensorParallel = 8;

/** --device: the backend Engine::load builds (auto: CUDA when a GPU is visible, else the CPU). */
enum class DeviceChoice : uint8_t { kAuto, kCpu, kCuda };
/** --kv-cache-dtype: auto (bf16 on CUDA, f32 on the CPU), f32, bf16, fp8 (E4M3) or q8_0. */
enum class KvCacheDtype : uint8_t { kAuto, kF32, kBf16, kFp8, kQ8_0 };
/** --embed-weights: where the token embedding table lives (auto: embeddings_on_host_auto). */
enum class EmbedPlacement : uint8_t { kAuto, kDevice, kHost };

/** The values as the flags spell them: "auto", "cpu", "cuda"; "auto", "f32", "bf16", "fp8", "q8_0";
 *  "auto", "device", "host". */
const char* device_choice_name(DeviceChoice d);
const char* kv_cache_dtype_name(KvCacheDtype t);
const char* embed_placement_name(EmbedPlacement p);
/** The value `name` spells (as the *_name functions write it), or nullopt for any other text. */
std::optional<DeviceChoice> device_choice_from_name(std::string_view name);
std::optional<KvCacheDtype> kv_cache_dtype_from_name(std::string_view name);
std::optional<EmbedPlacement> embed_placement_from_name(std::string_view name);

struct EngineOptions {
  int threads = 0;                   // CPU threads (0: all cores)
  int32_t page_size = 64;            // KV page size in tokens (--page-size)
  int64_t kv_tokens = 0;             // KV budget in tokens over all sequences (0: min(context length, 8192))
  /** What sets kv_tokens, named in a refusal's advice: "--kv-tokens" (ft serve's -c/--kv-tokens; the
   *  CLI names it as typed), or the flags a command derives it from (ft run: "-n/--max-tokens"). */
  std::string kv_tokens_flag = "--kv-tokens";
  /** What sets the expert cache's slots, named in a resize's refusal: "--moe-cache-slots", or POST
   *  /v1/admin/cache's "expert_slots" (Engine::resize_caches sets both names to the request's fields). */
  std::string expert_slots_flag = "--moe-cache-slots";
  /** --swa-kv-tokens: tokens of the sliding-window layers' pool (kv/kv_cache.h), at least what the
   *  running sequences' windows and one step need (the default, 0), at most kv_tokens; more keeps
   *  more conversations' last windows cached for prefix hits. */
  int64_t swa_kv_tokens = 0;
  /** --state-snapshots: recurrent-state slots (linear-attention models) kept for the prefix cache
   *  beyond one per running sequence: each holds the state at the last page boundary of a cached
   *  prompt, so a later request repeating that prompt starts from it (kv/prefix_cache.h). Ignored
   *  without recurrent layers. */
  int32_t state_snapshots = 8;  // at most kMaxStateSnapshots
  int64_t max_step_tokens = 8192;    // most tokens in one forward (>= --max-prefill-tokens)
  /** Most tokens in one forward where the memory plan streams routed experts at prefill (offload and
   *  hybrid cache layers, moe/moe_plan.h): a forward streams each such layer's uncached experts once,
   *  so a prompt cut into forwards of max_step_tokens streams them once a piece (an 8000-token prompt
   *  in forwards of 528 tokens: 8.5 s to its first token against 1.1 s in one, qwen3-30b-a3b bf16 at
   *  24 GiB, H100). Above max_step_tokens, the engine plans again with this many tokens a forward
   *  (at most kv_tokens + max_seqs) when the first plan streams (the expert cache gives up the bigger
   *  workspace's bytes), and plans once more with max_step_tokens when the bigger plan does not fit
   *  (an embedding table that plan moved to host memory stays there); 0 or not above
   *  max_step_tokens: no second plan; a rank group (tensor parallel) keeps its first plan. `ft serve`
   *  sets it when --max-prefill-tokens is not given. */
  int64_t streamed_step_tokens = 0;
  int64_t max_logit_rows = 256;      // most logit rows one forward returns
  int32_t max_seqs = 16;             // most sequences in one forward
  DeviceChoice device = DeviceChoice::kCpu;  // backend for Engine::load (--device; the CLI's default is auto)
  // MoE expert offload (engine/moe_runtime.h, moe/moe_plan.h); ignored for dense models.
  MoeOptions moe;                    // --moe-strategy, --moe-cache-*, --moe-cpu-layers, --moe-fetch-cap
  /** --kv-reserve-tokens: KV tokens the expert-cache sizing keeps free; < 0: the KV cache this engine
   *  allocates (kv_tokens), since KV beyond it could never be used. */
  int64_t kv_reserve_tokens = -1;
  int64_t gpu_memory_limit = 0;      // --gpu-memory-limit in bytes (0: the device's free memory; CPU: none)
  /** --host-memory-limit in bytes: host memory the MoE expert banks may take; layers beyond it go
   *  resident on the GPU (plan_moe). 0: measured at start (MemAvailable, the cgroup's limit, less a
   *  margin: usable_host_memory). */
  int64_t host_memory_limit = 0;
  /** Measures the host memory this process can still take, in bytes (-1: unknown), at start and
   *  while the expert banks fill (moe/host_memory.h HostMemoryProbe); empty: host_memory_room()
   *  (MemAvailable and the cgroup's room). Tests plant one that reports memory shrinking mid-load. */
  std::function<int64_t()> host_memory_probe;
  int64_t decode_log_interval = 0;   // --decode-log-interval: MoE counters every N decode steps (0: off)
  /** --cuda-graph-max-bs: decode steps of up to this many sequences are recorded once per padded
   *  batch size (1, 2, 4, 8, ..., this) and side of the backend's short key range
   *  (Ops::decode_short_kv_len), and replayed as graphs on backends that have them (CUDA); 0: every
   *  step eager. */
  int32_t cuda_graph_max_bs = 16;
  /** --kv-cache-dtype: auto (bf16 on CUDA, f32 on the CPU backend), f32, bf16 (CUDA only: half of
   *  f32's KV memory and decode attention bytes; keys and values rounded to bf16), fp8 or q8_0 (codes
   *  and scales, about half of bf16; quant/kv_quant.h; MLA on CUDA refused). */
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kAuto;
  /** How the command line asked for kv_cache_dtype when not as --kv-cache-dtype NAME, named by the
   *  KV dtype refusals (plan_kv_cache): "-ctk/-ctv f16 (= --kv-cache-dtype bf16: ...)". "": the flag. */
  std::string kv_cache_dtype_flag;
  /** --kv-host-gib: the host KV tier's bound in GiB (engine/kv_tiers.h): prefix-cache pages evicted
   *  from the device are kept in host memory and copied back on a later hit; 0: off. */
  double kv_host_gib = 0;
  /** --prompt-cache-dir: where cached prefixes' pages are written in the background and read back
   *  after a restart (kv/disk_page_store.h); "": off. --prompt-cache-gib bounds the files (LRU). */
  std::string prompt_cache_dir;
  double prompt_cache_gib = 16;
  /** --embed-weights: device, host or auto (embeddings_on_host_auto). */
  EmbedPlacement embed_weights = EmbedPlacement::kAuto;
  /** --tensor-parallel-size: ranks the model runs on (engine/rank_group.h: one engine a rank, rank 0
   *  schedules and sends each step to the others); attention heads and dense FFN columns split over
   *  them (dist/tensor_parallel.h). 1: one rank, nothing split. */
  int32_t tensor_parallel = 1;
  /** --expert-parallel on: the MoE layers' experts are split over the ranks instead of copied to each
   *  (owner-local: each rank holds, caches and computes only its block; moe/expert_parallel_experts.h). */
  bool expert_parallel = false;
  /** Sees the load's phases while the engine is built (load_model's "weights", then the MoE
   *  runtime's "expert banks" or "experts"); must outlive the construction only (the engine forgets
   *  it after). Null: none. */
  ProgressSink* progress = nullptr;

  /** Throws ft::Error(kInvalidArgument), naming the flag, for a value out of range or a combination
   *  that contradicts itself, whatever the model: step limits below 1, --cuda-graph-max-bs,
   *  --state-snapshots, --swa-kv-tokens, --kv-host-gib, --prompt-cache-gib, --gpu-memory-limit,
   *  --host-memory-limit, --tensor-parallel-size (1 to kMaxTensorParallel; above 1 with the KV tiers,
   *  which are not split yet), --expert-parallel without ranks to split over,
   *  --kv-reserve-tokens, --decode-log-interval out of range; and the MoE flags (validate_moe_options).
   *  Engine's constructor calls it first; `ft` calls it once its flags are parsed, before anything
   *  loads. Checks that need the model (cache slots per layer, --moe-cpu-layers' layers, a tied LM
   *  head with --embed-weights host, a KV dtype the backend lacks) stay where the model is known. */
  void validate() const;
};

/** The MoE options' checks (EngineOptions::validate): a cache size (slots >= 1, a rate in (0, 1])
 *  or a prefetch asked of fused or cpu, --moe-cpu-layers with them, --moe-fetch-cap (>= 0) and
 *  --moe-cpu-cost without hybrid, --moe-calibrate without a planner or beside a split it would time,
 *  --moe-prefetch-depth outside 1 to PrefetchTargets::kMax, without a cache or with prefetch off,
 *  --moe-bank-format ec12 with fused. Throws ft::Error(kInvalidArgument) naming the flags. */
void validate_moe_options(const MoeOptions& o);

}  // namespace ft
