#include "engine/memory_plan.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "backend/cuda_factory.h"
#include "backend/cuda_weight_types.h"
#include "backend/device.h"
#include "engine/engine.h"
#include "engine/kv_tiers.h"
#include "model/blocks.h"
#include "moe/host_memory.h"
#include "moe/expert_bank.h"
#include "quant/kv_quant.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {

bool embeddings_on_host_auto(const MoePlan& plan, const CacheSizeRequest& request, int64_t total_experts) {
  return (plan.strategy == MoeStrategy::kOffload || plan.strategy == MoeStrategy::kHybrid) &&
         request.mode == CacheSizeMode::kAuto && plan.cache.n_slots > 0 && plan.cache.n_slots < total_experts;
}

KvCacheConfig plan_kv_cache(const EngineOptions& options, const ModelConfig& config, const Ops& ops, bool spare_page) {
  // The flag as given (-ctk f16 says what it became), for the refusals below.
  const std::string want = !options.kv_cache_dtype_flag.empty()
                               ? options.kv_cache_dtype_flag
                               : fmt::format("--kv-cache-dtype {}", kv_cache_dtype_name(options.kv_cache_dtype));
  // auto: bf16 on CUDA whatever the activations (as llama.cpp's f16 and vLLM's auto keep a 16-bit KV
  // cache: half of f32's bytes, so twice the context or more expert slots in the same memory), but for
  // qwen4_exp's compressed-KV layers (attention_qsa keeps its pages in the activation dtype; deepseek_v4's
  // compress_kv and attention_compressed read F32 or BF16 pages whatever the activations); the CPU
  // backend keeps f32 pages (it has no bf16 KV).
  const bool activation_pages = config.arch == "qwen4_exp";
  const DType auto_dtype = ops.device() == Device::kCuda && !activation_pages ? DType::BF16 : ops.activation_dtype();
  DType kv_dtype = auto_dtype;
  switch (options.kv_cache_dtype) {
    case KvCacheDtype::kAuto: break;
    case KvCacheDtype::kF32: kv_dtype = DType::F32; break;
    case KvCacheDtype::kBf16: kv_dtype = DType::BF16; break;
    case KvCacheDtype::kFp8: kv_dtype = DType::F8_E4M3; break;
    case KvCacheDtype::kQ8_0: kv_dtype = DType::Q8_0; break;
  }
  if (kv_is_quantized(kv_dtype)) {
    const bool cuda = ops.device() == Device::kCuda;
    const char* auto_kv = auto_dtype == DType::BF16 ? "bf16 (auto)" : "f32 (auto)";
    if (ops.device() != Device::kCpu && !cuda)
      fail(ErrorCode::kUnsupported, "{} is not supported on the {} backend yet; use bf16 (auto)", want,
           ops.name());
    // CUDA reads quantized pages in its standard (GQA) attention kernels, full and sliding-window
    // (kv_write, attention.cu, attention_decode.cu), MLA's latent and RoPE-key pages in attention_mla's
    // CUDA-core kernel (attention_mla.cu), and the compressed-KV layers' (deepseek_v4, qwen4_exp) key
    // and value pages in compress_kv, attention_compressed and attention_qsa, as the CPU does. Their
    // value pages hold parts written apart (a compressor's kv and gate, V then the indexer's key) in
    // heads of ModelConfig::kv_v_head_dim, so each part has its own scales.
    // Scales are kept per head of the pages: a layer attending with more (narrower) heads than the
    // pages hold may need more scales a token than they have (kv_head_view).
    const int64_t page_scales = config.n_head_kv * kv_scales_per_head(kv_dtype, config.head_dim);
    for (size_t l = 0; l < config.layer_kv_heads.size() && l < config.layer_head_dim.size(); ++l) {
      const int64_t heads = config.layer_kv_heads[l], dim = config.layer_head_dim[l];
      if (heads * kv_scales_per_head(kv_dtype, dim) > page_scales)
        fail(ErrorCode::kUnsupported,
             "{}: {} layer {} attends with {} KV heads of {} over pages of {} heads of {} (sized for "
             "its widest layer), which hold {} scales a token and it needs {}; use {}",
             want, config.arch, l, heads, dim, config.n_head_kv, config.head_dim, page_scales,
             heads * kv_scales_per_head(kv_dtype, dim), auto_kv);
    }
  } else if (kv_dtype != DType::F32 && ops.device() == Device::kCpu) {
    fail(ErrorCode::kUnsupported, "{}: the CPU backend keeps the KV cache in f32, fp8 or q8_0", want);
  }
  check_kv_tiers(options, config, ops);
  KvCacheConfig kv = kv_layout(config);
  kv.page_size = options.page_size;
  kv.token_budget = options.kv_tokens;
  kv.dtype = kv_dtype;
  kv.entry_dtype = ops.activation_dtype();  // deepseek_v4's compressed entries: written once, read as activations
  kv.spare_pages = spare_page ? 1 : 0;
  if (kv.has_recurrent()) kv.n_state_slots = options.max_seqs + options.state_snapshots;
  // Sliding-window layers get their own pool: a sequence holds there only its window and the step's
  // new tokens (page-aligned), so all sequences of a step together need at most this.
  int32_t window = 0;
  for (int32_t w : kv.layer_window) window = std::max(window, w);
  if (window > 0)
    kv.swa_token_budget = std::max(options.swa_kv_tokens,
                                   options.max_seqs * (int64_t{window} + 2 * options.page_size) + options.max_step_tokens);
  return kv;
}

Error with_embed_weights_hint(const Error& e, const Model& model) {
  const int64_t movable = model.movable_embedding_bytes();
  if (e.code() != ErrorCode::kOutOfMemory || model.embeddings_tied() || model.host_mapped_bytes() > 0 || movable == 0)
    return e;
  return Error(e.code(), std::string(e.what()) +
                             fmt::format(" (or --embed-weights host: the embedding tables, {}, then stay in host memory)",
                                         format_bytes(movable)));
}

namespace {

PlacedMemory placed_memory(const MemoryPlanInputs& in) {
  PlacedMemory m;
  for (const TensorInfo& t : in.checkpoint.tensors()) m.weights += t.bytes;
  m.weights -= in.model.host_mapped_bytes();  // read from host memory (--embed-weights)
  m.weights -= in.model.unloaded_weight_bytes();  // the other ranks' slices and experts
  m.kv = in.kv.bytes();
  m.kv_per_token =
      m.kv / std::max<int64_t>((in.kv.pool().n_pages() + in.kv.config().spare_pages) * in.options.page_size, 1);
  m.buffers = in.buffer_bytes;
  m.workspace = in.ops.workspace_bytes(in.workspace);
  return m;
}

/** A model without experts under --gpu-memory-limit: throws kOutOfMemory, naming the sizes and how
 *  many KV tokens would fit, when `m` exceeds the limit. (MoE models are planned against it by
 *  plan_moe, from the same figures.) */
void check_dense_memory_limit(const PlacedMemory& m, const EngineOptions& o) {
  const int64_t buffers = m.buffers + m.workspace;  // step buffers and the backend's scratch
  const int64_t limit = o.gpu_memory_limit, need = m.weights + m.kv + buffers;
  if (limit <= 0 || need <= limit) return;
  const int64_t room = limit - m.weights - buffers;
  const std::string fix =
      m.weights > limit ? std::string("Raise --gpu-memory-limit (the weights alone do not fit)")
      : room < m.kv_per_token * o.page_size
          ? std::string("Raise --gpu-memory-limit or lower --max-prefill-tokens (the weights and buffers leave no "
                        "room for one KV page)")
          : fmt::format("Raise --gpu-memory-limit or lower {} (about {} fit)", o.kv_tokens_flag,
                        room / std::max<int64_t>(m.kv_per_token, 1));
  throw SizeRefusal(ErrorCode::kOutOfMemory,
                    fmt::format("--gpu-memory-limit {} cannot hold the model: {} of weights, {} of KV cache ({} "
                                "tokens, {}) and {} of buffers and workspaces for steps of {} tokens ({} missing). {}",
                                format_bytes(limit), format_bytes(m.weights), format_bytes(m.kv), o.kv_tokens,
                                o.kv_tokens_flag, format_bytes(buffers), o.max_step_tokens,
                                format_bytes(need - limit), fix),
                    m.weights > limit ? std::string() : o.kv_tokens_flag);
}

/** The routed experts' bytes of each layer of `host`, as stored (0: dense). */
std::vector<int64_t> layer_expert_bytes(const HostExpertBanks& host) {
  std::vector<int64_t> out(host.size(), 0);
  for (size_t l = 0; l < host.size(); ++l)
    for (const std::vector<Tensor>* v : {&host[l].gate, &host[l].up, &host[l].down})
      for (const Tensor& t : *v) out[l] += t.bytes();
  return out;
}

std::vector<int32_t> experts_per_layer(const HostExpertBanks& host) {
  std::vector<int32_t> n(host.size(), 0);
  for (size_t l = 0; l < host.size(); ++l) n[l] = host[l].n_expert();
  return n;
}

/** The device memory limit the MoE plan is held to: --gpu-memory-limit; on a resize (`previous`) the
 *  one the start measured, not what is free with the old banks and slots still held; the CPU backend
 *  without the flag has none; else the device's free memory now plus what the engine placed already
 *  (`placed`: dense weights, KV, buffers, gone from the free memory). */
int64_t moe_gpu_limit(const MemoryPlanInputs& in, int64_t placed) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max() / 4;
  if (in.options.gpu_memory_limit > 0) return in.options.gpu_memory_limit;
  if (in.previous && in.previous->budget) return in.previous->budget->gpu_memory_limit;
  if (in.ops.device() == Device::kCpu) return kNone;  // host memory: no limit unless one is given
  int device = 0;  // the backend's GPU (a rank group's rank r: device r); a wrapped backend reads device 0
  try {
    device = cuda_ops_device(in.ops);
  } catch (const Error&) {
  }
  const int64_t free_now = cuda_free_memory(device);
  if (free_now <= 0) {
    spdlog::warn("moe: cannot read the device's free memory; planning without a limit (set --gpu-memory-limit)");
    return kNone;
  }
  return free_now + placed;
}

/** The MoE planner's budget for `in`'s model as placed now (PlacedMemory): the routed experts and one
 *  cache slot's bytes (the experts' bias rows included), the dense weights, the KV pool and its reserve
 *  (--kv-reserve-tokens, else the pool: -c/--kv-tokens) and the limit (moe_gpu_limit). */
GpuMemoryBudget moe_budget(const MemoryPlanInputs& in) {
  const EngineOptions& o = in.options;
  const HostExpertBanks& host = in.model.host_experts();
  const PlacedMemory placed = placed_memory(in);
  GpuMemoryBudget b;
  // The experts' biases (gpt-oss): host copies the model made, on the GPU only once an ExpertCompute
  // holds them (every expert's, resident, under any strategy), and a row of each per cache slot
  // (moe/expert_slots.h SlotBiases): a slot has a row in each (bias kind, width) array.
  int64_t bias_bytes = 0;
  std::vector<std::pair<int, int64_t>> slot_rows;  // (bias kind, width)
  for (size_t l = 0; l < host.size(); ++l) {
    if (host[l].n_expert() == 0) continue;
    for (const std::vector<Tensor>* v : {&host[l].gate, &host[l].up, &host[l].down})
      for (const Tensor& t : *v) b.expert_bytes += t.bytes();
    const Tensor* biases[3] = {&host[l].gate_bias, &host[l].up_bias, &host[l].down_bias};
    for (int j = 0; j < 3; ++j) {
      if (biases[j]->empty()) continue;
      bias_bytes += biases[j]->bytes();
      const std::pair<int, int64_t> row{j, biases[j]->cols()};
      if (std::find(slot_rows.begin(), slot_rows.end(), row) == slot_rows.end()) slot_rows.push_back(row);
    }
    b.slot_bytes = std::max(b.slot_bytes, expert_layout(host[l], static_cast<int64_t>(l)).bytes);
    b.experts_per_layer = std::max(b.experts_per_layer, host[l].n_expert());
    b.total_experts += host[l].n_expert();
  }
  for (const auto& row : slot_rows) b.slot_bytes += row.second * 4;
  b.slot_layers = slot_layer_shapes(host);  // plan_moe sizes slots per record size
  const int64_t pool_tokens = int64_t{in.kv.pool().n_pages()} * o.page_size;
  b.kv_bytes_per_token = placed.kv_per_token;
  b.kv_reserve_tokens = o.kv_reserve_tokens >= 0 ? o.kv_reserve_tokens : pool_tokens;
  if (o.kv_reserve_tokens < 0)  // the reserve is the pool (ft serve; a resize's kv_tokens)
    b.kv_reserve_flag = o.kv_tokens_flag == "--kv-tokens" ? std::string("-c/--kv-tokens") : o.kv_tokens_flag;
  b.kv_page_tokens = o.page_size;
  // The KV pool placed counts against the reserve; KV beyond it is resident like the rest.
  const int64_t placed_kv = pool_tokens * placed.kv_per_token;
  const int64_t extra_kv = std::max<int64_t>(pool_tokens - b.kv_reserve_tokens, 0) * placed.kv_per_token;
  const int64_t others = placed.kv + placed.buffers - placed_kv + extra_kv;  // buffers, spare pages, extra KV
  b.resident_bytes = std::max<int64_t>(placed.weights - b.expert_bytes, 0) + others;
  // Tables the plan has yet to place (Model::place_deferred) are in the weights but not in the used memory.
  b.gpu_memory_limit = moe_gpu_limit(in, b.resident_bytes + placed_kv - extra_kv - in.model.unplaced_bytes());
  // Not placed yet, so not in the limit's free memory above.
  b.resident_bytes += bias_bytes + placed.workspace;
  return b;
}

/** Host memory the expert banks may take, measured now, and the log line that says so. */
struct MeasuredHost {
  int64_t usable = -1;  // < 0: no bound known
  std::string line;     // "host memory: MemAvailable ...; usable for expert banks ... (... margin)"
};

/** The host memory the banks may take: EngineOptions::host_memory_probe when set, less
 *  kHostMemoryMargin, else usable_host_memory() over MemAvailable and the cgroup. */
MeasuredHost measure_host(const MemoryPlanInputs& in) {
  MeasuredHost h;
  if (in.options.host_memory_probe) {
    const int64_t room = in.options.host_memory_probe();
    h.usable = room < 0 ? -1 : std::max<int64_t>(room - kHostMemoryMargin, 0);
    h.line = fmt::format("host memory: usable for expert banks {} ({} margin; measured by the engine's host-memory "
                         "probe)", room < 0 ? "unbounded" : format_bytes(h.usable), format_bytes(kHostMemoryMargin));
    return h;
  }
  // RLIMIT_MEMLOCK is read and shown but does not bound the banks: the CUDA backend pins them with
  // cudaHostRegister, which the NVIDIA driver pins outside the mlock accounting, so a container's
  // default limit (64 KiB to 8 MiB) would otherwise move every layer to the GPU.
  HostMemoryLimits m = read_host_memory_limits();
  m.memlock = memlock_limit();
  h.usable = usable_host_memory(m, /*pinned=*/false);
  h.line = describe_host_memory(m, in.ops.device() == Device::kCuda, h.usable);
  return h;
}

/** With --host-memory-limit given, logs it beside the host memory measured and warns when it is
 *  more: banks beyond the memory really there stop the fill, which then plans again. */
void log_given_host_limit(const MemoryPlanInputs& in) {
  const int64_t flag = in.options.host_memory_limit;
  const MeasuredHost m = measure_host(in);
  spdlog::info("host memory: --host-memory-limit {} for expert banks; measured: {}", format_bytes(flag),
               m.line.rfind("host memory: ", 0) == 0 ? m.line.substr(13) : m.line);
  if (m.usable >= 0 && flag > m.usable)
    spdlog::warn("--host-memory-limit {} is more than the {} of host memory measured usable for expert banks: banks "
                 "beyond what is there stop their fill, and the layers still to copy then go resident on the device "
                 "(or the start fails)", format_bytes(flag), format_bytes(m.usable));
}

/** o.moe with MoeOptions::host_bank_limit and host_limit_source set: after a fill stopped by host
 *  memory shrinking, the figure measured again (remeasured_host_limit; --host-memory-limit when
 *  smaller); else --host-memory-limit when given; on a resize (`previous`) the bound the start
 *  measured; none for a checkpoint that releases its anonymous memory into the banks; else the host
 *  memory measured now (EngineOptions::host_memory_probe when set, else usable_host_memory()), less
 *  kHostMemoryMargin. */
MoeOptions moe_plan_options(const MemoryPlanInputs& in) {
  MoeOptions o = in.options.moe;
  // Beside a GPU the host cores are free for experts: auto serves the planner (MoeOptions::auto_planner).
  if (in.ops.device() == Device::kCuda) o.auto_planner = true;
  const int64_t flag = in.options.host_memory_limit;
  if (in.remeasured_host_limit >= 0 && (flag <= 0 || in.remeasured_host_limit < flag)) {
    o.host_bank_limit = in.remeasured_host_limit;
    o.host_limit_source =
        fmt::format("host memory measured again while the banks filled, less {} margin", format_bytes(kHostMemoryMargin));
  } else if (in.options.host_memory_limit > 0) {
    o.host_bank_limit = in.options.host_memory_limit;
    o.host_limit_source = "--host-memory-limit";
  } else if (in.previous && in.previous->moe && in.previous->moe->host_bank_limit > 0) {
    o.host_bank_limit = in.previous->moe->host_bank_limit;
    o.host_limit_source = "the host memory measured at start";
  } else if (!in.checkpoint.releases_memory()) {
    const MeasuredHost m = measure_host(in);
    o.host_bank_limit = m.usable;
    o.host_limit_source = m.line;
  }
  return o;
}

/** The MoE plan for `in`'s model as placed now, its budget and what bounds its host banks. */
struct MadeMoePlan {
  MoePlan plan;
  GpuMemoryBudget budget;
  std::string host_limit_source;  // MoeOptions::host_limit_source
};

/** `b` (moe_budget's, with the KV pool as allocated) for a KV pool of `n` pages: the reserve where it is
 *  the pool (--kv-reserve-tokens unset), else the KV beyond the reserve in resident_bytes; and the
 *  block tables the step buffers hold (Engine::make_step_buffers: max_seqs int32 entries a page, twice
 *  with a sliding-window pool). */
GpuMemoryBudget budget_with_pool(const MemoryPlanInputs& in, const GpuMemoryBudget& b, int64_t n) {
  const EngineOptions& o = in.options;
  const int64_t page = o.page_size, pages = in.kv.pool().n_pages(), per = b.kv_bytes_per_token;
  GpuMemoryBudget t = b;
  if (o.kv_reserve_tokens < 0) {
    t.kv_reserve_tokens = n * page;
  } else {
    const int64_t extra = std::max<int64_t>(pages * page - b.kv_reserve_tokens, 0);
    t.resident_bytes += (std::max<int64_t>(n * page - b.kv_reserve_tokens, 0) - extra) * per;
  }
  t.resident_bytes += (n - pages) * int64_t{o.max_seqs} * 4 * (in.kv.swa_pool() ? 2 : 1);
  return t;
}

/** Plans `in`'s model under a budget and cache request: plan_moe's out-of-memory refusal as an Error,
 *  none when it fits (the plan then in `plan`). */
using TryPlan = std::function<std::optional<Error>(const GpuMemoryBudget&, const CacheSizeRequest&, MoePlan* plan)>;

/** `e` as a SizeRefusal of no one size. */
SizeRefusal as_refusal(const Error& e) { return SizeRefusal(e.code(), e.what(), ""); }

/** The most pages in [lo, hi) of a KV pool with which `req` plans (lo must), by bisection. */
int64_t most_pages(const MemoryPlanInputs& in, const GpuMemoryBudget& b, const TryPlan& plan,
                   const CacheSizeRequest& req, int64_t lo, int64_t hi) {
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (plan(budget_with_pool(in, b, mid), req, nullptr) ? hi : lo) = mid;
  }
  return lo;
}

/** The refusal for a plan that does not fit `b` (plan_moe threw `refused`, kOutOfMemory) when the KV
 *  cache is larger than --kv-reserve-tokens: moe_budget counts the KV beyond the reserve in
 *  resident_bytes, so plan_moe's refusal would call it resident weights. When the plan fits with no
 *  KV beyond the reserve, the refusal names --kv-tokens (EngineOptions::kv_tokens_flag), its KV bytes
 *  and the most tokens (whole pages) that fit, found by bisection over the pool's pages; when it does
 *  not, it is plan_moe's refusal at the reserve (resident bytes without the extra KV) with what
 *  --kv-tokens adds. `refused` itself (as_refusal) where no KV lies beyond the reserve. */
SizeRefusal kv_beyond_reserve_refusal(const MemoryPlanInputs& in, const GpuMemoryBudget& b, const TryPlan& plan,
                                      const CacheSizeRequest& req, const Error& refused) {
  const EngineOptions& o = in.options;
  const int64_t page = o.page_size, pages = in.kv.pool().n_pages(), per = b.kv_bytes_per_token;
  const int64_t extra = std::max<int64_t>(pages * page - b.kv_reserve_tokens, 0);  // tokens
  if (o.kv_reserve_tokens < 0 || extra == 0 || per <= 0 || page <= 0) return as_refusal(refused);
  const int64_t lo = b.kv_reserve_tokens / page;  // no KV beyond the reserve
  // ft serve's "--kv-tokens 16384" (the CLI names it as typed: "-c (--kv-tokens) 16384"); ft run's
  // "a KV cache of 20017 tokens (from -n/--max-tokens)".
  const bool given = o.kv_tokens_flag == "--kv-tokens";
  const std::string cache = given ? fmt::format("--kv-tokens {}", o.kv_tokens)
                                  : fmt::format("a KV cache of {} tokens (from {})", pages * page, o.kv_tokens_flag);
  if (std::optional<Error> e = plan(budget_with_pool(in, b, lo), req, nullptr))
    return SizeRefusal(e->code(),
                       fmt::format("{} (and {} adds {} of KV for the {} tokens beyond --kv-reserve-tokens {})",
                                   e->what(), cache, format_bytes(extra * per), extra, b.kv_reserve_tokens),
                       "");
  const int64_t fit = most_pages(in, b, plan, req, lo, pages) * page;
  return SizeRefusal(
      ErrorCode::kOutOfMemory,
      fmt::format("{} needs {} of KV ({} of it for the {} tokens beyond --kv-reserve-tokens {}), more than "
                  "--gpu-memory-limit {} leaves beside {} of resident weights and buffers and the expert plan: {} of "
                  "KV too much. Lower {}: a KV cache of {} tokens fits (pages of {} tokens), or raise "
                  "--gpu-memory-limit",
                  cache, format_bytes(pages * page * per), format_bytes(extra * per), extra, b.kv_reserve_tokens,
                  format_bytes(b.gpu_memory_limit), format_bytes(b.resident_bytes - extra * per),
                  format_bytes((pages * page - fit) * per), o.kv_tokens_flag, fit, page),
      o.kv_tokens_flag);
}

/** A resize's refusal (`in.previous` set: POST /v1/admin/cache) for a plan that does not fit `b`
 *  (plan_moe threw `refused`), in the request's terms (EngineOptions::kv_tokens_flag and
 *  expert_slots_flag, which Engine::resize_caches sets to its fields) rather than the planner's start-up
 *  flags, with what would fit. When the KV fits beside the smallest expert cache but not the slots
 *  asked for (--moe-cache-slots mode): the most slots that fit, and with a changed KV pool the most
 *  KV tokens that keep the slots; the field blamed is the slots unless only the KV changed. When not
 *  even the smallest cache fits beside the KV: the most KV tokens that do (whole pages). `refused`
 *  itself (as_refusal) where neither applies (host memory, a pool of one page). */
SizeRefusal resize_refusal(const MemoryPlanInputs& in, const GpuMemoryBudget& b, const TryPlan& plan,
                           const CacheSizeRequest& req, const Error& refused) {
  const EngineOptions& o = in.options;
  const int64_t page = o.page_size, pages = in.kv.pool().n_pages(), per = b.kv_bytes_per_token;
  const std::string kv = fmt::format("{} {} ({} of KV in pages of {} tokens)", o.kv_tokens_flag, o.kv_tokens,
                                     format_bytes(pages * page * per), page);
  const CacheSizeRequest smallest{};  // auto: the most slots that fit, refused below the least legal cache
  MoePlan p;
  if (!plan(b, smallest, &p)) {
    if (req.mode != CacheSizeMode::kSlots) return as_refusal(refused);
    const bool kv_changed = in.previous->kv_pages != pages;
    const bool slots_changed = !in.previous->moe || in.previous->moe->cache.n_slots != req.slots;
    std::string keep;  // the KV that keeps the slots asked for
    if (kv_changed && !plan(budget_with_pool(in, b, 1), req, nullptr))
      keep = fmt::format("; or keep {} slots with {} {} or less", req.slots, o.kv_tokens_flag,
                         most_pages(in, b, plan, req, 1, pages) * page);
    return SizeRefusal(ErrorCode::kOutOfMemory,
                       fmt::format("{} {} does not fit: beside {} and {} of resident weights and buffers, "
                                   "--gpu-memory-limit {} holds at most {} expert slots ({}). Ask for {} or fewer{}",
                                   o.expert_slots_flag, req.slots, kv, format_bytes(b.resident_bytes),
                                   format_bytes(b.gpu_memory_limit), p.cache.n_slots, describe_cache_slots(p.cache),
                                   p.cache.n_slots, keep),
                       slots_changed || !kv_changed ? o.expert_slots_flag : o.kv_tokens_flag);
  }
  if (pages <= 1 || plan(budget_with_pool(in, b, 1), smallest, nullptr)) return as_refusal(refused);
  const int64_t fit_pages = most_pages(in, b, plan, smallest, 1, pages);
  return SizeRefusal(ErrorCode::kOutOfMemory,
                     fmt::format("{} does not fit: --gpu-memory-limit {} holds {} of resident weights and buffers and "
                                 "the smallest expert cache, and beside them {} {} or less (whole pages)",
                                 kv, format_bytes(b.gpu_memory_limit),
                                 format_bytes(budget_with_pool(in, b, fit_pages).resident_bytes), o.kv_tokens_flag,
                                 fit_pages * page),
                     o.kv_tokens_flag);
}

MadeMoePlan moe_plan(const MemoryPlanInputs& in) {
  MadeMoePlan m;
  m.budget = moe_budget(in);
  const MoeOptions opts = moe_plan_options(in);
  const HostExpertBanks& host = in.model.host_experts();
  const std::vector<int32_t> experts = experts_per_layer(host);
  const std::vector<int64_t> banks = layer_expert_bytes(host);
  try {
    m.plan = plan_moe(opts, experts, m.budget, banks);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    const TryPlan plan = [&](const GpuMemoryBudget& t, const CacheSizeRequest& req,
                             MoePlan* out) -> std::optional<Error> {
      MoeOptions with = opts;
      with.cache = req;
      try {
        MoePlan p = plan_moe(with, experts, t, banks);
        if (out) *out = std::move(p);
      } catch (const Error& refused) {
        if (refused.code() != ErrorCode::kOutOfMemory) throw;
        return refused;
      }
      return std::nullopt;
    };
    if (in.previous) throw resize_refusal(in, m.budget, plan, opts.cache, e);
    throw kv_beyond_reserve_refusal(in, m.budget, plan, opts.cache, e);
  }
  m.host_limit_source = opts.host_limit_source;
  return m;
}

/** Experts the plan runs on the GPU (resident or through the cache) must be of a dtype the CUDA
 *  kernels read; a cache size (--moe-cache-slots, --moe-cache-rate) needs a cache layer that
 *  --moe-cpu-layers left (kInvalidArgument naming both); --moe-fetch-cap counts a layer's distinct misses per step (all tokens of a batch
 *  together), so above a layer's expert count it can never apply. Throws kUnsupported naming the
 *  layer, the type and the CPU alternatives; kInvalidArgument for the cap. */
void check_moe_plan(const MemoryPlanInputs& in, const MoePlan& plan, const GpuMemoryBudget& b) {
  const HostExpertBanks& host = in.model.host_experts();
  for (size_t l = 0; in.ops.device() == Device::kCuda && l < plan.layers.size() && l < host.size(); ++l) {
    const MoeLayerMode mode = plan.layers[l];
    if ((mode != MoeLayerMode::kResident && mode != MoeLayerMode::kCache) || host[l].n_expert() == 0) continue;
    const ExpertLayout lay = expert_layout(host[l], static_cast<int64_t>(l));
    for (DType t : {lay.gate_type, lay.up_type, lay.down_type})
      if (!cuda_has_weight_kernel(t))
        fail(ErrorCode::kUnsupported,
             "MoE layer {}: the CUDA backend has no kernel for {} experts (it reads {}); --moe-strategy cpu computes "
             "them on the CPU, or run with --device cpu",
             l, dtype_name(t), cuda_weight_kernel_types());
  }
  // A cache size with no cache layer left would be ignored: --moe-cpu-layers took every MoE layer.
  const MoeOptions& mo = in.options.moe;
  int64_t moe_layers = 0;
  for (const ExpertBank& bank : host) moe_layers += bank.n_expert() > 0 ? 1 : 0;
  if (mo.cache.mode != CacheSizeMode::kAuto && !mo.cpu_layers.empty() && moe_layers > 0 &&
      plan.count(MoeLayerMode::kCpu) == moe_layers && plan.strategy != MoeStrategy::kCpu)
    fail(ErrorCode::kInvalidArgument,
         "{} sizes the expert cache, but --moe-cpu-layers {} puts every MoE layer ({}) on the CPU, so there is no "
         "expert cache: drop {}, or leave a MoE layer out of --moe-cpu-layers",
         mo.cache.mode == CacheSizeMode::kSlots ? fmt::format("--moe-cache-slots {}", mo.cache.slots)
                                                : fmt::format("--moe-cache-rate {:g}", mo.cache.rate),
         mo.cpu_layers, moe_layers,
         mo.cache.mode == CacheSizeMode::kSlots ? "--moe-cache-slots" : "--moe-cache-rate");
  const int32_t max_experts = b.experts_per_layer;
  if (in.options.moe.fetch_cap > max_experts)
    fail(ErrorCode::kInvalidArgument,
         "--moe-fetch-cap {} exceeds the {} experts of a layer (it counts a layer's distinct misses per step); use "
         "0..{}, or --moe-strategy offload to fetch every miss", in.options.moe.fetch_cap, max_experts, max_experts);
}

/** MoeRuntime's options: the flags the runtime reads and the checkpoint's release hook. */
MoeRuntimeConfig moe_runtime_config(const MemoryPlanInputs& in) {
  const EngineOptions& o = in.options;
  MoeRuntimeConfig mc;
  mc.moe = o.moe;
  mc.max_tokens = o.max_step_tokens;
  // Graph-captured decode batches keep the expert cache; bigger steps stream whole layers.
  mc.stream_min_tokens = std::max<int64_t>(64, int64_t{o.cuda_graph_max_bs} + 1);
  mc.cpu_threads = o.threads;
  mc.decode_log_interval = o.decode_log_interval;
  mc.release_source = [ckpt = &in.checkpoint](const void* data, int64_t bytes) { ckpt->release(data, bytes); };
  mc.source_releases_memory = in.checkpoint.releases_memory();
  mc.progress = o.progress;
  mc.host_room = o.host_memory_probe;
  return mc;
}

}  // namespace

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const EngineOptions& o = in.options;
  // --gpu-memory-limit is checked once, by EngineOptions::validate (the engine calls it first).
  Model& model = in.model;
  const EmbedPlacement embed = o.embed_weights;
  bool moe = false;
  for (const ExpertBank& b : model.host_experts()) moe = moe || b.n_expert() > 0;
  MemoryPlan p;
  try {
    if (moe) {
      std::optional<MadeMoePlan> made;
      bool host = embed == EmbedPlacement::kHost;
      if (embed == EmbedPlacement::kAuto) {
        // The plan with the table on the device: a cache sized by what is left takes the table's bytes
        // as slots. A plan that does not fit that way may fit without the table.
        const MoeStrategy want = o.moe.strategy;
        try {
          made = moe_plan(in);
          host = embeddings_on_host_auto(made->plan, o.moe.cache, made->plan.cache_experts);
        } catch (const Error& e) {
          // cpu too: with host memory bounding its banks, the table's bytes hold layers gone resident.
          if (e.code() != ErrorCode::kOutOfMemory || want == MoeStrategy::kFused) throw;
          host = true;
        }
      }
      WeightLoader ld(in.checkpoint, in.ops);
      if (host && model.move_embeddings_to_host(ld)) made.reset();
      if (!made) made = moe_plan(in);
      check_moe_plan(in, made->plan, made->budget);
      if (!in.previous && made->plan.host_bank_limit >= 0 && o.host_memory_limit <= 0 &&
          made->plan.host_bank_bytes + made->plan.gpu_bank_bytes > 0)
        spdlog::info("{}", made->host_limit_source);  // measured: what bounds the banks
      else if (!in.previous && o.host_memory_limit > 0 && in.remeasured_host_limit < 0 &&
               o.moe.strategy != MoeStrategy::kFused)
        log_given_host_limit(in);  // given: the flag beside what is there
      if (!in.previous && !made->plan.unused_flags.empty())  // the flags asked for what host memory ruled out
        spdlog::warn("moe: {} do not apply: host memory ({}) holds less than one MoE layer's expert banks ({}), so "
                     "every MoE layer is resident on the device (fused); --host-memory-limit {} or more keeps one "
                     "layer's banks in host memory", made->plan.unused_flags,
                     format_bytes(made->plan.host_bank_limit) + (o.host_memory_limit > 0 ? ", --host-memory-limit"
                                                                                          : " measured usable"),
                     format_bytes(made->plan.least_layer_bytes), host_limit_gib(made->plan.least_layer_bytes));
      p.moe = std::move(made->plan);
      p.budget = std::move(made->budget);
      p.moe_inputs = moe_runtime_config(in);
    } else {
      plan_moe(o.moe, std::vector<int32_t>(static_cast<size_t>(model.config().n_layer), 0), {});  // rejects MoE-only flags
      if (embed == EmbedPlacement::kHost) {
        WeightLoader ld(in.checkpoint, in.ops);
        model.move_embeddings_to_host(ld);
      }
      check_dense_memory_limit(placed_memory(in), o);
    }
    WeightLoader ld(in.checkpoint, in.ops);
    model.place_deferred(ld, in.ops);  // the tables the plan keeps on the device, loaded as metadata
  } catch (const SizeRefusal& e) {  // a plan that does not fit says so; the flag that moves the table too
    const Error hinted = with_embed_weights_hint(e, model);
    throw SizeRefusal(hinted.code(), hinted.what(), e.field);
  } catch (const Error& e) {
    throw with_embed_weights_hint(e, model);
  }
  p.gpu_memory_limit = o.gpu_memory_limit;
  for (const TensorInfo& t : in.checkpoint.tensors()) p.weight_bytes += t.bytes;
  p.placed = placed_memory(in);
  p.kv = in.kv.config();
  p.kv_pages = in.kv.pool().n_pages();
  p.kv_tokens = int64_t{p.kv_pages} * o.page_size;
  p.kv_bytes = in.kv.bytes();
  p.kv_bytes_per_token = KvCache::bytes_per_token(in.kv.config());
  p.embed_weights = embed;
  p.host_mapped_bytes = model.host_mapped_bytes();
  p.kv_host_bytes = KvTiers::host_bytes(o);
  p.kv_host_gib = o.kv_host_gib;
  p.prompt_cache = !o.prompt_cache_dir.empty();
  return p;
}

std::vector<MemoryRow> memory_rows(const MemoryPlan& p) {
  std::vector<MemoryRow> rows;
  auto add = [&](std::string name, int64_t device, int64_t host, std::string detail) {
    if (device > 0 || host > 0) rows.push_back({std::move(name), device, host, std::move(detail)});
  };
  const bool moe = p.moe && p.budget;
  const int64_t experts = moe ? p.budget->expert_bytes : 0;
  const bool resident = moe && p.moe->strategy == MoeStrategy::kFused;
  // placed.weights counts every routed expert as if resident (the budget takes them out again).
  add("dense weights", std::max<int64_t>(p.placed.weights - experts, 0), 0, "");
  if (moe && !resident && p.moe->gpu_bank_bytes > 0) {  // split: host memory holds only some layers' banks
    const int64_t n_res = p.moe->count(MoeLayerMode::kResident);
    const int64_t n_moe = static_cast<int64_t>(p.moe->layers.size()) - p.moe->count(MoeLayerMode::kDense);
    add("routed experts", p.moe->gpu_bank_bytes, experts - p.moe->gpu_bank_bytes,
        fmt::format("{} experts; {} of {} MoE layers resident (host memory holds {})", p.budget->total_experts, n_res,
                    n_moe, format_bytes(p.moe->host_bank_limit)));
  } else if (moe) {
    add("routed experts", resident ? experts : 0, resident ? 0 : experts,
        fmt::format("{} experts{}", p.budget->total_experts, resident ? "" : ", host banks"));
    if (p.moe->cache.n_slots > 0)
      add("expert slots", p.moe->cache.pool_bytes, 0, describe_cache_slots(p.moe->cache));
  }
  add("token embeddings", 0, p.host_mapped_bytes, "read over the bus (--embed-weights)");
  const DType kd = p.kv.dtype;  // as --kv-cache-dtype spells it
  const std::string kv_type = kd == DType::F8_E4M3 ? "fp8" : kd == DType::Q8_0 ? "q8_0" : kd == DType::BF16 ? "bf16" : "f32";
  const int64_t swa = KvCache::swa_pool_bytes(p.kv);  // the sliding windows: a fixed cost beside the tokens'
  add("KV cache", p.kv_bytes, 0,
      fmt::format("{} tokens, {} a token{}, {}", p.kv_tokens, format_bytes(p.kv_bytes_per_token),
                  swa > 0 ? fmt::format(" + {} of sliding windows", format_bytes(swa)) : std::string(), kv_type));
  if (p.kv_host_bytes > 0) {
    std::string what;
    if (p.kv_host_gib > 0) what = fmt::format("evicted prefix pages (--kv-host-gib {:g})", p.kv_host_gib);
    if (p.prompt_cache) what += std::string(what.empty() ? "" : ", ") + "prompt-cache writes queued and reads ahead";
    add("KV host tier", 0, p.kv_host_bytes, what + ", at most; taken as used");
  }
  add("step buffers", p.placed.buffers, 0, "");
  add("workspace", p.placed.workspace, 0, "the largest step's scratch");
  return rows;
}

int64_t memory_limit(const MemoryPlan& p) {
  if (p.budget && p.budget->gpu_memory_limit < std::numeric_limits<int64_t>::max() / 8) return p.budget->gpu_memory_limit;
  return p.gpu_memory_limit;
}

std::string memory_table(const MemoryPlan& p, const std::string& device) {
  const std::vector<MemoryRow> rows = memory_rows(p);
  std::string s = fmt::format("  {:<18} {:>11} {:>11}  \n", "", device, "host");
  int64_t dev = 0, host = 0;
  for (const MemoryRow& r : rows) {
    s += fmt::format("  {:<18} {:>11} {:>11}  {}\n", r.name, r.device > 0 ? format_bytes(r.device) : "-",
                     r.host > 0 ? format_bytes(r.host) : "-", r.detail);
    dev += r.device, host += r.host;
  }
  s += fmt::format("  {:<18} {:>11} {:>11}  CUDA graphs not counted\n", "total", format_bytes(dev), format_bytes(host));
  if (const int64_t limit = memory_limit(p); limit > 0)
    s += fmt::format("  {:<18} {:>11} {:>11}  {} left\n", "limit", format_bytes(limit), "",
                     dev <= limit ? format_bytes(limit - dev) : "-" + format_bytes(dev - limit));
  return s;
}

}  // namespace ft
