#include "engine/engine_options.h"

#include "moe/expert_compute.h"
#include "util/error.h"

namespace ft {

namespace {

template <typename E, size_t N>
std::optional<E> from_name(std::string_view name, const E (&values)[N], const char* (*name_of)(E)) {
  for (E v : values)
    if (name == name_of(v)) return v;
  return std::nullopt;
}

}  // namespace

const char* device_choice_name(DeviceChoice d) {
  switch (d) {
    case DeviceChoice::kAuto: return "auto";
    case DeviceChoice::kCpu: return "cpu";
    case DeviceChoice::kCuda: return "cuda";
  }
  return "?";
}

const char* kv_cache_dtype_name(KvCacheDtype t) {
  switch (t) {
    case KvCacheDtype::kAuto: return "auto";
    case KvCacheDtype::kF32: return "f32";
    case KvCacheDtype::kBf16: return "bf16";
    case KvCacheDtype::kFp8: return "fp8";
    case KvCacheDtype::kQ8_0: return "q8_0";
  }
  return "?";
}

const char* embed_placement_name(EmbedPlacement p) {
  switch (p) {
    case EmbedPlacement::kAuto: return "auto";
    case EmbedPlacement::kDevice: return "device";
    case EmbedPlacement::kHost: return "host";
  }
  return "?";
}

std::optional<DeviceChoice> device_choice_from_name(std::string_view name) {
  static constexpr DeviceChoice kAll[] = {DeviceChoice::kAuto, DeviceChoice::kCpu, DeviceChoice::kCuda};
  return from_name(name, kAll, device_choice_name);
}

std::optional<KvCacheDtype> kv_cache_dtype_from_name(std::string_view name) {
  static constexpr KvCacheDtype kAll[] = {KvCacheDtype::kAuto, KvCacheDtype::kF32, KvCacheDtype::kBf16,
                                          KvCacheDtype::kFp8, KvCacheDtype::kQ8_0};
  return from_name(name, kAll, kv_cache_dtype_name);
}

std::optional<EmbedPlacement> embed_placement_from_name(std::string_view name) {
  static constexpr EmbedPlacement kAll[] = {EmbedPlacement::kAuto, EmbedPlacement::kDevice, EmbedPlacement::kHost};
  return from_name(name, kAll, embed_placement_name);
}

void validate_moe_options(const MoeOptions& o) {
  const char* strategy = moe_strategy_name(o.strategy);
  const bool no_cache = o.strategy == MoeStrategy::kFused || o.strategy == MoeStrategy::kCpu;
  const CacheSizeRequest& c = o.cache;
  if (c.mode != CacheSizeMode::kAuto && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-cache-{} needs --moe-strategy auto, offload or hybrid ({} has no expert cache)",
         c.mode == CacheSizeMode::kSlots ? "slots" : "rate", strategy);
  if (c.mode == CacheSizeMode::kSlots && c.slots < 1)  // the model's own minimum is checked once it is loaded (cache_sizing)
    fail(ErrorCode::kInvalidArgument, "--moe-cache-slots {} must be at least 2 x the experts of a MoE layer (the "
         "\"experts\" line of `ft inspect MODEL`; in each slot size of a mixed-type file), or leave the size to "
         "--moe-cache-auto", c.slots);
  if (c.mode == CacheSizeMode::kRate && !(c.rate > 0.0 && c.rate <= 1.0))
    fail(ErrorCode::kInvalidArgument, "--moe-cache-rate {} must be in (0, 1]", c.rate);
  if (!o.cpu_layers.empty() && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-layers needs --moe-strategy auto, offload or hybrid (not {})", strategy);
  if (o.fetch_cap >= 0 && o.strategy != MoeStrategy::kHybrid)
    fail(ErrorCode::kInvalidArgument, "--moe-fetch-cap needs --moe-strategy hybrid (not {})", strategy);
  if (o.cpu_cost > 0 && o.strategy != MoeStrategy::kHybrid)
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-cost needs --moe-strategy hybrid (not {})", strategy);
  if (o.recalibrate) {
    if (o.strategy != MoeStrategy::kAuto && o.strategy != MoeStrategy::kHybrid)
      fail(ErrorCode::kInvalidArgument, "--moe-calibrate needs --moe-strategy auto or hybrid ({} has no planner to "
           "calibrate)", strategy);
    if (o.fetch_cap >= 0 || o.cpu_cost > 0)
      fail(ErrorCode::kInvalidArgument, "--moe-calibrate with --moe-{}: that flag sets the split the calibration would "
           "time; give one", o.fetch_cap >= 0 ? "fetch-cap" : "cpu-cost");
  }
  if (o.prefetch == MoeOptions::Prefetch::kOn && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch on needs --moe-strategy auto, offload or hybrid ({} has no expert "
         "cache)", strategy);
  if (o.prefetch_depth < 1 || o.prefetch_depth > PrefetchTargets::kMax)
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth {} must be 1 to {}", o.prefetch_depth, PrefetchTargets::kMax);
  if (o.prefetch_depth_given && no_cache)
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth needs --moe-strategy auto, offload or hybrid ({} has no "
         "expert cache)", strategy);
  if (o.prefetch_depth_given && o.prefetch == MoeOptions::Prefetch::kOff)
    fail(ErrorCode::kInvalidArgument, "--moe-prefetch-depth with --moe-prefetch off: there is no prefetch to deepen");
  if (o.bank_format == BankFormat::kEc12 && o.strategy == MoeStrategy::kFused)
    fail(ErrorCode::kInvalidArgument, "--moe-bank-format ec12 needs expert banks: --moe-strategy offload, hybrid or "
         "cpu (fused keeps every expert on the device as the checkpoint stores it)");
}

void EngineOptions::validate() const {
  if (max_step_tokens < 1 || max_logit_rows < 1 || max_seqs < 1)
    fail(ErrorCode::kInvalidArgument, "engine: max_step_tokens {}, max_logit_rows {}, max_seqs {} must be >= 1",
         max_step_tokens, max_logit_rows, max_seqs);
  if (cuda_graph_max_bs < 0)
    fail(ErrorCode::kInvalidArgument, "engine: --cuda-graph-max-bs {} must be >= 0", cuda_graph_max_bs);
  if (state_snapshots < 0 || state_snapshots > kMaxStateSnapshots)
    fail(ErrorCode::kInvalidArgument, "--state-snapshots must be in [0, {}] (got {})", kMaxStateSnapshots,
         state_snapshots);
  if (swa_kv_tokens < 0) fail(ErrorCode::kInvalidArgument, "--swa-kv-tokens must be >= 0 (got {})", swa_kv_tokens);
  validate_moe_options(moe);
  if (kv_reserve_tokens < -1)
    fail(ErrorCode::kInvalidArgument, "--kv-reserve-tokens {} must be >= 0", kv_reserve_tokens);
  if (decode_log_interval < 0)
    fail(ErrorCode::kInvalidArgument, "--decode-log-interval {} must be >= 0", decode_log_interval);
  if (gpu_memory_limit < 0)
    fail(ErrorCode::kInvalidArgument, "--gpu-memory-limit must be > 0 (got {} bytes)", gpu_memory_limit);
  if (host_memory_limit < 0)
    fail(ErrorCode::kInvalidArgument, "--host-memory-limit must be > 0 (got {} bytes)", host_memory_limit);
  if (!(kv_host_gib >= 0) || kv_host_gib > 1e6)
    fail(ErrorCode::kInvalidArgument, "--kv-host-gib must be between 0 (off) and 1e6 GiB (got {})", kv_host_gib);
  if (!(prompt_cache_gib > 0) || prompt_cache_gib > 1e6)
    fail(ErrorCode::kInvalidArgument, "--prompt-cache-gib must be > 0 and at most 1e6 GiB (got {})", prompt_cache_gib);
  if (tensor_parallel < 1 || tensor_parallel > kMaxTensorParallel)
    fail(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} must be in [1, {}]", tensor_parallel, kMaxTensorParallel);
  if (expert_parallel && tensor_parallel < 2)
    fail(ErrorCode::kInvalidArgument, "--expert-parallel on splits the experts over the ranks of "
         "--tensor-parallel-size, which is {}: give --tensor-parallel-size 2 or more", tensor_parallel);
  if (tensor_parallel > 1 && (kv_host_gib > 0 || !prompt_cache_dir.empty()))
    fail(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} with {}: the KV tiers are not split over ranks yet; "
         "leave one of them out", tensor_parallel, kv_host_gib > 0 ? "--kv-host-gib" : "--prompt-cache-dir");
}

}  // namespace ft
