#include "engine/engine.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "backend/op_checks.h"
#include "kv/disk_page_store.h"
#include "model/blocks.h"
#include "moe/expert_parallel_experts.h"
#include "moe/host_memory.h"
#include "model/registry.h"
#include "util/error.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {

std::unique_ptr<Engine> Engine::load(const std::string& path, const EngineOptions& options) {
  return load(open_checkpoint(path), options);
}

std::unique_ptr<Engine> Engine::load(std::unique_ptr<Checkpoint> ckpt, const EngineOptions& options) {
  const DeviceChoice d = options.device;
  const bool cuda = d == DeviceChoice::kCuda || (d == DeviceChoice::kAuto && cuda_device_count() > 0);
  std::unique_ptr<Ops> ops = cuda ? make_cuda_ops(0) : std::make_unique<CpuOps>(options.threads);
  return std::make_unique<Engine>(std::move(ckpt), std::move(ops), options);
}

Engine::Engine(std::unique_ptr<Checkpoint> ckpt, std::unique_ptr<Ops> ops, const EngineOptions& options,
               dist::Collective* comm)
    : options_(options), comm_(comm), ckpt_(std::move(ckpt)), ops_(std::move(ops)) {
  check_options();  // before the weights load
  const dist::TpShard shard{comm_ ? comm_->rank() : 0, options_.tensor_parallel};
  model_ = load_model(*ckpt_, *ops_, shard, options_.progress);
  if (options_.expert_parallel) keep_owned_experts();
  for (const TensorInfo& t : ckpt_->tensors()) q8_forms_ = q8_forms_ || ops_->reads_int8_activations(t.dtype);
  const ModelConfig& c = model_->config();
  if (options_.kv_tokens <= 0) options_.kv_tokens = std::min<int64_t>(c.n_ctx_train > 0 ? c.n_ctx_train : 8192, 8192);
  const bool graphs = ops_->supports_graphs() && options_.cuda_graph_max_bs > 0;
  make_kv_cache(plan_kv_cache(options_, c, *ops_, /*spare_page=*/graphs));
  options_.max_logit_rows = std::min(options_.max_logit_rows, options_.max_step_tokens);
  if (c.n_vocab > ops_->max_sample_row())
    fail(ErrorCode::kUnsupported, "a vocabulary of {} tokens exceeds the {} backend's sampler ({} at most)", c.n_vocab,
         ops_->name(), ops_->max_sample_row());
  state_ = std::make_unique<ForwardState>(*ops_, c, options_.max_step_tokens);
  make_step_buffers();
  reserve_graph_inputs(graphs);
  plan_ = plan_memory(plan_inputs());
  // A forward never holds more tokens than the KV cache and one decode token a sequence. A rank group
  // keeps its first plan: each rank would decide alone (its own memory), and rank 0's scheduler
  // sends every rank the same steps.
  if (std::min(options_.streamed_step_tokens, options_.kv_tokens + options_.max_seqs) > options_.max_step_tokens &&
      plan_.moe && plan_.moe->count(MoeLayerMode::kCache) > 0 && !comm_)
    plan_streamed_steps(graphs);
  if (plan_.moe_inputs) build_moe();
  if (moe_ && !ep_ranges_.empty()) wrap_expert_parallel();
  if (plan_.host_mapped_bytes > 0)
    spdlog::info("engine: embedding tables ({}) in {}host memory (--embed-weights {})",
                 format_bytes(plan_.host_mapped_bytes), ops_->device() == Device::kCpu ? "" : "pinned ",
                 embed_placement_name(options_.embed_weights));
  if (graphs)
    graphs_.plan(*ops_, *kv_, options_.page_size, d_logits_,
                 [this](const BatchInfo& b, const BatchInfo* swa, const Tensor& ids, const Tensor& rows,
                        const Tensor& logits) { forward(b, swa, ids, rows, logits); });
  spdlog::debug("engine: {} model, {} layers, KV {} tokens in {} pages of {} ({:.1f} MiB), step buffers for {} tokens",
                c.arch, c.n_layer, options_.kv_tokens, kv_->pool().n_pages(), options_.page_size,
                static_cast<double>(kv_->bytes()) / (1 << 20), options_.max_step_tokens);
  if (moe_) {
    calibrate_fetch_cap();
    plan_.moe = moe_->plan();  // the calibrated fetch cap
  }
  options_.progress = nullptr;  // the caller's, for the construction only
  if (plan_.moe_inputs) plan_.moe_inputs->progress = nullptr;
}

void Engine::plan_streamed_steps(bool graphs) {
  const int64_t before = options_.max_step_tokens;
  auto size_steps = [&](int64_t tokens) {
    options_.max_step_tokens = tokens;
    state_.reset();
    storage_.clear();
    // The sliding-window pool holds a step's tokens beside the windows (plan_kv_cache).
    if (!kv_ || kv_->swa_pool()) {  // null: a remake that failed (out of memory) before the fallback
      kv_.reset();
      make_kv_cache(plan_kv_cache(options_, model_->config(), *ops_, /*spare_page=*/graphs));
    }
    state_ = std::make_unique<ForwardState>(*ops_, model_->config(), tokens);
    make_step_buffers();
    reserve_graph_inputs(graphs);
  };
  const int64_t tokens = std::min(options_.streamed_step_tokens, options_.kv_tokens + options_.max_seqs);
  try {
    size_steps(tokens);
    plan_ = plan_memory(plan_inputs());
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    spdlog::warn("engine: forwards of {} tokens do not fit beside the streamed experts ({}); a forward keeps {} "
                 "tokens, so a longer prompt streams them once a piece", tokens, e.what(), before);
    size_steps(before);
    plan_ = plan_memory(plan_inputs());
    return;
  }
  spdlog::info("engine: the plan streams routed experts at prefill, so a forward takes up to {} tokens (not {}): a "
               "prompt's forward streams each layer's uncached experts once", options_.max_step_tokens, before);
}

void Engine::reserve_graph_inputs(bool graphs) {
  const int64_t graph_max = GraphRunner::max_batch(graphs, options_.cuda_graph_max_bs, options_.max_seqs,
                                                   options_.max_step_tokens, options_.max_logit_rows);
  if (graph_max > 0) graphs_.reserve_inputs(*ops_, graph_max, max_blocks_, kv_->swa_pool() != nullptr);
}

void Engine::check_options() const {
  options_.validate();
  const int group = comm_ ? comm_->group_size() : 1;
  if (group != options_.tensor_parallel)
    fail(ErrorCode::kInvalidArgument, "engine: --tensor-parallel-size {} needs a rank group of {} ranks, not {} "
         "(engine/rank_group.h runs one engine a rank)", options_.tensor_parallel, options_.tensor_parallel, group);
  // Refused before the weights are loaded (load_model reads the config again: a few KB).
  if (options_.embed_weights == EmbedPlacement::kHost && output_tied(WeightLoader(*ckpt_, *ops_), read_model_config(*ckpt_)))
    fail(ErrorCode::kInvalidArgument,
         "--embed-weights host: {} ties its token embedding table to the LM head, which reads all of it every "
         "step; use --embed-weights device or auto", ckpt_->path());
  // A prompt-cache folder that cannot be made or written is refused now, not after the load (KvTiers).
  if (!options_.prompt_cache_dir.empty()) DiskPageStore::check_folder(options_.prompt_cache_dir);
}

void Engine::make_kv_cache(const KvCacheConfig& kv_config) {
  try {
    kv_ = std::make_unique<KvCache>(*ops_, kv_config);
  } catch (const Error& e) {  // say which flags size what did not fit
    if (e.code() != ErrorCode::kOutOfMemory) throw;
    const std::string states =
        kv_config.has_recurrent()
            ? fmt::format(" and {} recurrent-state slots of {} ({} running + --state-snapshots {})",
                          kv_config.n_state_slots, format_bytes(kv_config.state_bytes_per_slot()), options_.max_seqs,
                          options_.state_snapshots)
            : std::string();
    fail(ErrorCode::kOutOfMemory, "the KV cache ({} tokens, --kv-tokens{}) does not fit: {}", kv_config.token_budget,
         states, e.what());
  }
  if (const PagePool* swa = kv_->swa_pool())
    spdlog::info("engine: sliding-window layers (window {}) keep KV for {} tokens, the others for {}",
                 kv_config.swa_window(), int64_t{swa->n_pages()} * swa->page_size(),
                 int64_t{kv_->pool().n_pages()} * kv_->pool().page_size());
  max_blocks_ = kv_->pool().n_pages();
}

void Engine::make_step_buffers() {
  auto make = [&](DType dt, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dt, shape, ops_->device());
    storage_.push_back(ops_->alloc(t.bytes()));
    t.data = storage_.back().data();
    return t;
  };
  const int64_t T = options_.max_step_tokens, S = options_.max_seqs, R = options_.max_logit_rows;
  d_ids_ = make(DType::I32, {T});
  d_pos_ = make(DType::I32, {T});
  d_seq_ = make(DType::I32, {T});
  d_start_ = make(DType::I32, {S + 1});
  d_tables_ = make(DType::I32, {S * max_blocks_});
  if (kv_->swa_pool()) d_swa_tables_ = make(DType::I32, {S * max_blocks_});
  if (kv_->state_pool()) d_slots_ = make(DType::I32, {S});
  d_rows_ = make(DType::I32, {R});
  d_logits_ = make(ops_->activation_dtype(), {R, model_->config().n_vocab});
  reserve_host_logits(std::min<int64_t>(R, options_.max_seqs) * model_->config().n_vocab * 4);  // a decode step's: never regrown
}

MemoryPlanInputs Engine::plan_inputs() {
  return {options_, *ops_, *ckpt_, *model_, *kv_, step_buffer_bytes(), workspace_shape()};
}

int64_t Engine::step_buffer_bytes() const {
  int64_t bytes = graphs_.device_bytes();
  for (const Buffer& b : storage_) bytes += b.bytes();
  for (const Buffer& b : state_->storage) bytes += b.bytes();
  return bytes;
}

void Engine::build_moe() {
  // Host memory taken by another process while the banks fill stops the fill (HostMemoryShrunk, its
  // banks freed). The layers still to copy can then go to the GPU as at start: the expert cache is
  // allocated after the banks, so the plan is made again with the host memory measured now (the GPU
  // limit the start measured), its resident layers charged before the cache is sized, and the
  // runtime built again. A checkpoint whose copied layers were released (a synthetic model) cannot
  // be read again, and a rank group plans together: those fail with the numbers.
  constexpr int kFillAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    try {
      moe_ = std::make_unique<MoeRuntime>(*ops_, *model_, *plan_.moe_inputs, *plan_.moe, *plan_.budget);
      break;
    } catch (const HostMemoryShrunk& e) {
      const char* why = ckpt_->releases_memory()
                            ? "the layers already copied gave their checkpoint memory back, so they cannot be read again"
                        : comm_                      ? "the ranks of a group plan their memory together"
                        : attempt >= kFillAttempts ? "host memory shrank on every attempt"
                                                     : nullptr;
      if (why)
        throw with_embed_weights_hint(
            Error(ErrorCode::kOutOfMemory, fmt::format("{} (not planned again: {})", e.what(), why)), *model_);
      const int64_t room = options_.host_memory_probe ? options_.host_memory_probe() : host_memory_room();
      MemoryPlanInputs in = plan_inputs();
      in.previous = &plan_;  // the device limit the start measured
      in.remeasured_host_limit = std::max<int64_t>(room - kHostMemoryMargin, 0);
      MemoryPlan p;
      try {
        p = plan_memory(in);
      } catch (const Error& pe) {
        throw Error(pe.code(), fmt::format("{}. Placing more layers' experts in device memory instead does not fit "
                                           "either: {}", e.what(), pe.what()));
      }
      spdlog::warn("engine: host memory shrank while the expert banks filled (before layer {}: {} needed, {} usable, "
                   "{} at start); planned again with {} of host memory for the banks: {}",
                   e.layer, format_bytes(e.need), format_bytes(e.room_now),
                   e.room_start >= 0 ? format_bytes(e.room_start) : std::string("not known"),
                   format_bytes(in.remeasured_host_limit), p.moe ? p.moe->summary() : std::string("no MoE plan"));
      plan_ = std::move(p);
    } catch (const Error& e) {
      throw with_embed_weights_hint(e, *model_);
    }
  }
  plan_.moe = moe_->plan();
  plan_.budget = moe_->budget();
}

void Engine::keep_owned_experts() {
  if (model_->host_experts().empty()) {
    if (comm_->rank() == 0)
      spdlog::info("engine: --expert-parallel: {} has no routed experts to split (its heads are split all the same)",
                   model_->config().arch);
    return;
  }
  // The other ranks' experts: this rank never reads them. A checkpoint in anonymous memory shared by
  // the ranks (formats/shared_checkpoint.h) frees a page once every rank released it, and the owner
  // releases its experts as its banks fill: the non-owners say so here.
  std::vector<std::pair<const uint8_t*, int64_t>> dropped;
  if (ckpt_->releases_memory())
    for (const ExpertBank& b : model_->host_experts())
      for (const std::vector<Tensor>* part : {&b.gate, &b.up, &b.down})
        for (const Tensor& t : *part) dropped.emplace_back(static_cast<const uint8_t*>(t.data), t.bytes());
  ep_ranges_ = model_->keep_owned_experts(comm_->rank(), comm_->group_size(), ep_n_expert_);
  if (dropped.empty()) return;
  std::vector<const uint8_t*> kept;
  for (const ExpertBank& b : model_->host_experts())
    for (const std::vector<Tensor>* part : {&b.gate, &b.up, &b.down})
      for (const Tensor& t : *part) kept.push_back(static_cast<const uint8_t*>(t.data));
  std::sort(kept.begin(), kept.end());
  std::sort(dropped.begin(), dropped.end());
  for (size_t i = 0; i < dropped.size();) {  // contiguous runs of the dropped experts at once
    if (std::binary_search(kept.begin(), kept.end(), dropped[i].first)) {
      ++i;
      continue;
    }
    const uint8_t* begin = dropped[i].first;
    const uint8_t* end = begin + dropped[i].second;
    for (++i; i < dropped.size() && dropped[i].first <= end &&
              !std::binary_search(kept.begin(), kept.end(), dropped[i].first);
         ++i)
      end = std::max(end, dropped[i].first + dropped[i].second);
    ckpt_->release(begin, end - begin);
  }
}

void Engine::wrap_expert_parallel() {
  moe_->wrap_experts([this](std::unique_ptr<ExpertCompute> inner) -> std::unique_ptr<ExpertCompute> {
    // The masked routes' buffers for the largest step, allocated now (a step never allocates).
    const int64_t max_ids = options_.max_step_tokens * model_->config().n_expert_used;
    return std::make_unique<ExpertParallelExperts>(*comm_, *ops_, ep_ranges_, ep_n_expert_, std::move(inner), max_ids);
  });
}

void Engine::reserve_host_logits(int64_t bytes) {
  // Pinned (Ops::alloc_host): the copy runs at the bus's speed, not through the driver's staging
  // buffer (qwen3-30b-a3b: 0.6 MB of F32 logits a row, every decode step). Grown geometrically up to
  // max_logit_rows, pinned up to kMaxPinned (whole-prompt logits can be hundreds of MB).
  constexpr int64_t kMaxPinned = int64_t{256} << 20;
  const int64_t cap = options_.max_logit_rows * model_->config().n_vocab * 4;
  const int64_t want = std::max(bytes, std::min(cap, 2 * h_logits_.bytes()));
  h_logits_ = Buffer();  // the old block first: pinned memory is a scarce kind
  if (want <= kMaxPinned) {
    try {
      h_logits_ = ops_->alloc_host(want);
      return;
    } catch (const Error& e) {  // no pinned memory left: pageable works, only slower
      if (e.code() != ErrorCode::kOutOfMemory) throw;
    }
  }
  h_logits_ = Buffer::host(want);
}

WorkspaceShape Engine::workspace_shape() const {
  const ModelConfig& c = model_->config();
  WorkspaceShape s;
  s.tokens = options_.max_step_tokens;
  s.max_seqs = options_.max_seqs;
  s.logit_rows = options_.max_logit_rows;
  s.n_vocab = c.n_vocab;
  s.hidden = c.n_embd;
  s.max_matmul_k = std::max({c.n_embd, c.n_head * c.head_dim, c.n_head * c.v_head_dim, c.n_ff, c.n_ff_exp,
                             c.n_ff_shexp, c.lin_n_v_heads * c.lin_v_dim});
  if (c.n_expert > 0) {
    s.moe_top_k = static_cast<int32_t>(c.n_expert_used);
    s.moe_n_expert = static_cast<int32_t>(c.n_expert);
    s.moe_ffn = c.n_ff_exp;
  }
  s.n_head = c.n_head;
  s.head_dim = c.is_mla() ? c.kv_lora_rank : c.head_dim;
  s.max_kv_len = int64_t{kv_->pool().n_pages()} * options_.page_size;
  s.lin_v_heads = c.lin_n_v_heads;
  s.lin_k_dim = c.lin_k_dim;
  s.lin_v_dim = c.lin_v_dim;
  return s;
}

void Engine::drop_graphs() {
  ops_->synchronize();  // a replay may still be running
  graphs_.drop();
}

Engine::~Engine() = default;

void Engine::copy_states(std::span<const StateCopy> copies) {
  for (const StateCopy& c : copies) kv_->copy_state(*ops_, c);
}

std::span<const float> Engine::step(const StepBatch& batch) {
  std::lock_guard<std::mutex> lock(step_mu_);
  const ModelConfig& c = model_->config();
  copy_states(batch.copies_before);  // queued before the forward reads the slots
  const StepStart st = begin_step(batch.items);
  const int64_t R = st.rows;
  const int64_t logit_bytes = R * c.n_vocab * 4;
  if (h_logits_.bytes() < logit_bytes) reserve_host_logits(logit_bytes);
  if (R > 0) {
    ops_->copy(d_logits_.slice(0, R), Tensor(h_logits_.data(), DType::F32, {R, c.n_vocab}));
    graphs_.upload_done();  // the copy to the host waited for the stream
  }
  end_step(st);
  copy_states(batch.copies_after);
  return {R > 0 ? static_cast<const float*>(h_logits_.data()) : nullptr, static_cast<size_t>(R * c.n_vocab)};
}

std::span<const SampleResult> Engine::step_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                                  std::span<const LogitEdit> edits, std::span<const uint32_t> masks) {
  std::lock_guard<std::mutex> lock(step_mu_);
  const ModelConfig& c = model_->config();
  copy_states(batch.copies_before);  // queued before the forward reads the slots
  const auto n_edits = static_cast<int64_t>(edits.size());
  op_checks::sample_edits("engine step", rows.data(), static_cast<int64_t>(rows.size()), edits.data(), n_edits,
                          c.n_vocab);
  const int64_t n_masks = op_checks::sample_mask_count(
      "engine step", Tensor(const_cast<uint32_t*>(masks.data()), DType::U8, {static_cast<int64_t>(masks.size_bytes())}),
      c.n_vocab);
  op_checks::sample_mask_rows("engine step", rows.data(), static_cast<int64_t>(rows.size()), n_masks);
  // Inputs: R rows then the edits, staged in pinned memory and uploaded in one copy queued after the
  // step's checks and before its forward (off the path from the forward's last kernel to the results);
  // the results come back in one copy (a few hundred bytes a row instead of the logits' 4 * n_vocab).
  struct Staged {  // one capture, so the hook stays within std::function's inline storage (no allocation)
    std::span<const SampleRow> rows;
    std::span<const LogitEdit> edits;
    std::span<const uint32_t> masks;
    Tensor d_rows, d_edits, d_masks, d_out;
  };
  Staged staged{rows, edits, masks, {}, {}, {}, {}};
  const StepStart st = begin_step(batch.items, [this, &staged](int64_t R) {
    const std::span<const SampleRow> rows = staged.rows;
    const std::span<const LogitEdit> edits = staged.edits;
    const std::span<const uint32_t> masks = staged.masks;
    if (static_cast<int64_t>(rows.size()) != R)
      fail(ErrorCode::kInvalidArgument, "engine step: {} sampling rows for {} logit rows", rows.size(), R);
    if (R == 0) return;
    reserve_sample_buffers(static_cast<int64_t>(edits.size()), static_cast<int64_t>(masks.size()));
    if (sample_busy_) ops_->synchronize();  // a step that threw may have left its upload in flight
    sample_busy_ = true;
    // [rows | edits | masks], the masks 16-byte aligned.
    auto* in = static_cast<uint8_t*>(h_sample_in_.data());
    const auto row_bytes = static_cast<int64_t>(rows.size_bytes());
    const int64_t edit_end = row_bytes + static_cast<int64_t>(edits.size_bytes());
    const int64_t mask_at = (edit_end + 15) / 16 * 16;
    const int64_t in_bytes = masks.empty() ? edit_end : mask_at + static_cast<int64_t>(masks.size_bytes());
    std::memcpy(in, rows.data(), rows.size_bytes());
    if (!edits.empty()) std::memcpy(in + row_bytes, edits.data(), edits.size_bytes());
    if (!masks.empty()) std::memcpy(in + mask_at, masks.data(), masks.size_bytes());
    auto* dev = static_cast<uint8_t*>(d_sample_.data());
    const Device where = ops_->device();
    ops_->copy(Tensor(in, DType::U8, {in_bytes}), Tensor(dev, DType::U8, {in_bytes}, where));
    staged.d_rows = Tensor(dev, DType::U8, {row_bytes}, where);
    if (!edits.empty()) staged.d_edits = Tensor(dev + row_bytes, DType::U8, {edit_end - row_bytes}, where);
    if (!masks.empty()) staged.d_masks = Tensor(dev + mask_at, DType::U8, {in_bytes - mask_at}, where);
    staged.d_out = Tensor(dev + sample_out_offset_, DType::U8, {R * static_cast<int64_t>(sizeof(SampleResult))}, where);
  });
  const int64_t R = st.rows;
  if (R == 0) {
    end_step(st);
    copy_states(batch.copies_after);
    return {};
  }
  Tensor logits = d_logits_.slice(0, R);
  if (logits.dtype != DType::F32) {  // BF16 activations: the sampler reads F32
    if (d_logits_f32_.bytes() < R * c.n_vocab * 4) d_logits_f32_ = ops_->alloc(R * c.n_vocab * 4);
    Tensor f32(d_logits_f32_.data(), DType::F32, {R, c.n_vocab}, ops_->device());
    ops_->copy(logits, f32);
    logits = f32;
  }
  ops_->sample(logits, staged.d_rows, staged.d_edits, staged.d_out, rows.data(), staged.d_masks);
  ops_->copy(staged.d_out, Tensor(h_sample_out_.data(), DType::U8, {staged.d_out.bytes()}));
  sample_busy_ = false;
  graphs_.upload_done();  // the copy to the host waited for the stream
  end_step(st);
  copy_states(batch.copies_after);
  return {static_cast<const SampleResult*>(h_sample_out_.data()), static_cast<size_t>(R)};
}

void Engine::reserve_sample_buffers(int64_t n_edits, int64_t mask_words) {
  if (d_sample_.data() && n_edits <= sample_edit_cap_ && mask_words <= sample_mask_cap_) return;
  ops_->synchronize();  // the old buffers may still be in use
  if (n_edits > sample_edit_cap_) sample_edit_cap_ = std::max<int64_t>({n_edits, 2 * sample_edit_cap_, 4096});
  if (mask_words > sample_mask_cap_) sample_mask_cap_ = std::max<int64_t>(mask_words, 2 * sample_mask_cap_);
  const int64_t R = options_.max_logit_rows;
  const int64_t in_bytes = (R * static_cast<int64_t>(sizeof(SampleRow)) +
                            sample_edit_cap_ * static_cast<int64_t>(sizeof(LogitEdit)) + 15) / 16 * 16 +
                           sample_mask_cap_ * 4;
  sample_out_offset_ = (in_bytes + 255) / 256 * 256;
  d_sample_ = Buffer();
  h_sample_in_ = Buffer();
  d_sample_ = ops_->alloc(sample_out_offset_ + R * static_cast<int64_t>(sizeof(SampleResult)));
  h_sample_in_ = ops_->alloc_host(in_bytes);
  if (!h_sample_out_.data()) h_sample_out_ = ops_->alloc_host(R * static_cast<int64_t>(sizeof(SampleResult)));
}

Engine::StepStart Engine::begin_step(const std::vector<StepItem>& items,
                                     const std::function<void(int64_t rows)>& before_forward) {
  const auto start = std::chrono::steady_clock::now();
  const ModelConfig& c = model_->config();
  const int64_t S = static_cast<int64_t>(items.size()), page = kv_->config().page_size;
  if (S < 1 || S > options_.max_seqs)
    fail(ErrorCode::kInvalidArgument, "engine step: {} sequences (1..{} allowed)", S, options_.max_seqs);
  h_.ids.clear();
  h_.pos.clear();
  h_.seq.clear();
  h_.rows.clear();
  h_.slots.clear();
  h_.start.assign(1, 0);
  int64_t mb = 1;
  for (const StepItem& it : items) {
    if (!it.pages || it.n < 1 || it.start < 0)
      fail(ErrorCode::kInvalidArgument, "engine step: an item has no pages, {} tokens or start {}", it.n, it.start);
    const int64_t need = (it.start + it.n + page - 1) / page;
    if (static_cast<int64_t>(it.pages->size()) < need)
      fail(ErrorCode::kInvalidArgument, "engine step: positions up to {} need {} pages, the block table has {}",
           it.start + it.n, need, it.pages->size());
    mb = std::max<int64_t>(mb, static_cast<int64_t>(it.pages->size()));
    if (const PagePool* swa = kv_->swa_pool()) {  // the window's sliding-window pages must be held
      if (!it.swa_pages || static_cast<int64_t>(it.swa_pages->size()) < need)
        fail(ErrorCode::kInvalidArgument,
             "engine step: the model's sliding-window layers need a block table of {} pages in their pool, the item "
             "has {}", need, it.swa_pages ? it.swa_pages->size() : 0);
      const int64_t window = kv_->config().swa_window(), first = std::max<int64_t>(0, it.start - window + 1) / page;
      for (int64_t j = first; j < need; ++j) {
        const int32_t p = (*it.swa_pages)[static_cast<size_t>(j)];
        if (p < 0 || p >= swa->n_pages())
          fail(ErrorCode::kInvalidArgument, "engine step: sliding-window page {} of positions {}.. is {} (pool of {})",
               j, j * page, p, swa->n_pages());
      }
    }
    if (const PagePool* states = kv_->state_pool(); states && (it.state_slot < 0 || it.state_slot >= states->n_pages()))
      fail(ErrorCode::kInvalidArgument, "engine step: the model's recurrent layers need a state slot in [0, {}), the item "
           "has {}", states->n_pages(), it.state_slot);
    if (it.n_logits != 0 && it.n_logits != 1 && it.n_logits != it.n)
      fail(ErrorCode::kInvalidArgument, "engine step: n_logits {} must be 0, 1 or the item's {} tokens", it.n_logits,
           it.n);
  }
  if (mb > max_blocks_) fail(ErrorCode::kInvalidArgument, "engine step: a block table has {} pages, pool {}", mb, max_blocks_);
  for (int64_t s = 0; s < S; ++s) {
    const StepItem& it = items[static_cast<size_t>(s)];
    const int64_t base = static_cast<int64_t>(h_.ids.size());
    for (int64_t i = 0; i < it.n; ++i) {
      const int32_t id = it.tokens[i];
      if (id < 0 || id >= c.n_vocab)
        fail(ErrorCode::kInvalidArgument, "token id {} is outside the vocabulary (0..{})", id, c.n_vocab - 1);
      h_.ids.push_back(id);
      h_.pos.push_back(static_cast<int32_t>(it.start + i));
      h_.seq.push_back(static_cast<int32_t>(s));
    }
    for (int64_t r = it.n - it.n_logits; r < it.n; ++r) h_.rows.push_back(static_cast<int32_t>(base + r));
    h_.start.push_back(static_cast<int32_t>(h_.ids.size()));
    if (kv_->state_pool()) h_.slots.push_back(it.state_slot);
  }
  const int64_t T = static_cast<int64_t>(h_.ids.size()), R = static_cast<int64_t>(h_.rows.size());
  if (T > options_.max_step_tokens)
    fail(ErrorCode::kInvalidArgument, "engine step: {} tokens exceed the planned {} per step", T,
         options_.max_step_tokens);
  if (R > options_.max_logit_rows)
    fail(ErrorCode::kInvalidArgument, "engine step: {} logit rows exceed the planned {}", R, options_.max_logit_rows);
  h_.tables.assign(static_cast<size_t>(S * mb), 0);
  for (int64_t s = 0; s < S; ++s) {
    const auto& pages = *items[static_cast<size_t>(s)].pages;
    std::copy(pages.begin(), pages.end(), h_.tables.begin() + s * mb);
  }
  const bool decode = std::any_of(items.begin(), items.end(), [](const StepItem& it) { return it.n == 1; });
  if (before_forward) before_forward(R);
  if (moe_) moe_->before_step(decode);
  if (GraphRunner::Step* gs = dump_ ? nullptr : graphs_.step_for(items)) {  // a dump hook runs eagerly
    graphs_.run(*gs, items, h_);
  } else {
    auto upload = [&](std::vector<int32_t>& host, const Tensor& dev, std::initializer_list<int64_t> shape) {
      Tensor h(host.data(), DType::I32, shape);
      Tensor d(dev.data, DType::I32, shape, dev.device);
      ops_->copy(h, d);
      return d;
    };
    BatchInfo batch;
    batch.n_tokens = static_cast<int32_t>(T);
    batch.n_seqs = static_cast<int32_t>(S);
    batch.max_blocks = static_cast<int32_t>(mb);
    for (int32_t p : h_.pos) batch.max_kv_len = std::max(batch.max_kv_len, p + 1);
    batch.positions = upload(h_.pos, d_pos_, {T});
    batch.seq_index = upload(h_.seq, d_seq_, {T});
    batch.seq_start = upload(h_.start, d_start_, {S + 1});
    batch.block_tables = upload(h_.tables, d_tables_, {S, mb});
    if (kv_->state_pool()) batch.state_slots = upload(h_.slots, d_slots_, {S});
    BatchInfo swa_batch = batch;
    if (!kv_ || kv_->swa_pool()) {  // null: a remake that failed (out of memory) before the fallback
      stage_swa_tables(items, S, mb, /*pad_page=*/0, h_.swa_tables);
      swa_batch.block_tables = upload(h_.swa_tables, d_swa_tables_, {S, mb});
    }
    forward(batch, kv_->swa_pool() ? &swa_batch : nullptr, upload(h_.ids, d_ids_, {T}),
            R > 0 ? upload(h_.rows, d_rows_, {R}) : Tensor(), R > 0 ? d_logits_.slice(0, R) : Tensor());
  }
  const bool all_decode = std::all_of(items.begin(), items.end(), [](const StepItem& it) { return it.n == 1; });
  return {R, decode, all_decode, S, start};
}

void Engine::end_step(const StepStart& st) {
  if (moe_) {  // after the step's work: CPU shares it queued are done, their counters final
    moe_->experts().check();
    if (st.all_decode && st.rows > 0)  // the results' copy to the host waited for the step's work
      moe_->record_decode_step(st.seqs, std::chrono::duration<double>(std::chrono::steady_clock::now() - st.start).count());
    moe_->after_step(st.decode);
  }
}

void Engine::forward(const BatchInfo& batch, const BatchInfo* swa_batch, const Tensor& ids, const Tensor& rows,
                     const Tensor& logits) {
  ForwardContext ctx{*ops_, batch, ids, rows, logits, *kv_, moe_ ? &moe_->experts() : nullptr, *state_,
                     dump_ ? &dump_ : nullptr, swa_batch};
  ctx.q8_forms = q8_forms_;
  if (options_.tensor_parallel > 1) ctx.tp = comm_;
  model_->forward(ctx);
}

std::optional<MoeReport> Engine::moe_report() {
  std::lock_guard<std::mutex> lock(step_mu_);
  return moe_ ? moe_->report() : std::nullopt;
}

}  // namespace ft
