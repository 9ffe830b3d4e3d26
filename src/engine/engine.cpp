#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "backend/op_checks.h"
#include "model/blocks.h"
#include "model/registry.h"
#include "util/error.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {

std::unique_ptr<Engine> Engine::load(const std::string& path, const EngineOptions& options) {
  return load(open_checkpoint(path), options);
}

std::unique_ptr<Engine> Engine::load(std::unique_ptr<Checkpoint> ckpt, const EngineOptions& options) {
  const std::string& d = options.device;
  if (d != "cpu" && d != "cuda" && d != "auto")
    fail(ErrorCode::kInvalidArgument, "device must be cpu, cuda or auto (got '{}')", d);
  const bool cuda = d == "cuda" || (d == "auto" && cuda_device_count() > 0);
  std::unique_ptr<Ops> ops = cuda ? make_cuda_ops(0) : std::make_unique<CpuOps>(options.threads);
  return std::make_unique<Engine>(std::move(ckpt), std::move(ops), options);
}

bool embeddings_on_host_auto(const MoePlan& plan, const CacheSizeRequest& request, int64_t total_experts) {
  return (plan.strategy == MoeStrategy::kOffload || plan.strategy == MoeStrategy::kHybrid) &&
         request.mode == CacheSizeMode::kAuto && plan.cache.n_slots > 0 && plan.cache.n_slots < total_experts;
}

Engine::Engine(std::unique_ptr<Checkpoint> ckpt, std::unique_ptr<Ops> ops, const EngineOptions& options)
    : options_(options), ckpt_(std::move(ckpt)), ops_(std::move(ops)) {
  if (options_.max_step_tokens < 1 || options_.max_logit_rows < 1 || options_.max_seqs < 1)
    fail(ErrorCode::kInvalidArgument, "engine: max_step_tokens {}, max_logit_rows {}, max_seqs {} must be >= 1",
         options_.max_step_tokens, options_.max_logit_rows, options_.max_seqs);
  if (options_.cuda_graph_max_bs < 0)
    fail(ErrorCode::kInvalidArgument, "engine: --cuda-graph-max-bs {} must be >= 0", options_.cuda_graph_max_bs);
  const std::string& embed = options_.embed_weights;
  if (embed != "auto" && embed != "device" && embed != "host")
    fail(ErrorCode::kInvalidArgument, "--embed-weights must be auto, device or host (got '{}')", embed);
  // Refused before the weights are loaded (load_model reads the config again: a few KB).
  if (embed == "host" && output_tied(WeightLoader(*ckpt_, *ops_), read_model_config(*ckpt_)))
    fail(ErrorCode::kInvalidArgument,
         "--embed-weights host: {} ties its token embedding table to the LM head, which reads all of it every "
         "step; use --embed-weights device or auto", ckpt_->path());
  model_ = load_model(*ckpt_, *ops_);
  const ModelConfig& c = model_->config();
  if (options_.kv_tokens <= 0) options_.kv_tokens = std::min<int64_t>(c.n_ctx_train > 0 ? c.n_ctx_train : 8192, 8192);
  const bool graphs = ops_->supports_graphs() && options_.cuda_graph_max_bs > 0;
  DType kv_dtype = ops_->activation_dtype();
  if (options_.kv_cache_dtype == "f32") kv_dtype = DType::F32;
  else if (options_.kv_cache_dtype == "bf16") kv_dtype = DType::BF16;
  else if (options_.kv_cache_dtype != "auto")
    fail(ErrorCode::kInvalidArgument, "--kv-cache-dtype must be auto, f32 or bf16 (got '{}')", options_.kv_cache_dtype);
  if (kv_dtype != DType::F32 && ops_->device() == Device::kCpu)
    fail(ErrorCode::kUnsupported, "--kv-cache-dtype {}: the CPU backend keeps the KV cache in f32", options_.kv_cache_dtype);
  KvCacheConfig kv_config = kv_layout(c);
  kv_config.page_size = options_.page_size;
  kv_config.token_budget = options_.kv_tokens;
  kv_config.dtype = kv_dtype;
  kv_config.spare_pages = graphs ? 1 : 0;
  if (options_.state_snapshots < 0 || options_.state_snapshots > kMaxStateSnapshots)
    fail(ErrorCode::kInvalidArgument, "--state-snapshots must be in [0, {}] (got {})", kMaxStateSnapshots,
         options_.state_snapshots);
  if (kv_config.has_recurrent()) kv_config.n_state_slots = options_.max_seqs + options_.state_snapshots;
  // Sliding-window layers get their own pool: a sequence holds there only its window and the step's
  // new tokens (page-aligned), so all sequences of a step together need at most this.
  int32_t window = 0;
  for (int32_t w : kv_config.layer_window) window = std::max(window, w);
  if (options_.swa_kv_tokens < 0)
    fail(ErrorCode::kInvalidArgument, "--swa-kv-tokens must be >= 0 (got {})", options_.swa_kv_tokens);
  if (window > 0)
    kv_config.swa_token_budget =
        std::max(options_.swa_kv_tokens,
                 options_.max_seqs * (int64_t{window} + 2 * options_.page_size) + options_.max_step_tokens);
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
  options_.max_logit_rows = std::min(options_.max_logit_rows, options_.max_step_tokens);
  if (c.n_vocab > ops_->max_sample_row())
    fail(ErrorCode::kUnsupported, "a vocabulary of {} tokens exceeds the {} backend's sampler ({} at most)", c.n_vocab,
         ops_->name(), ops_->max_sample_row());
  state_ = std::make_unique<ForwardState>(*ops_, c, options_.max_step_tokens);
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
  d_logits_ = make(ops_->activation_dtype(), {R, c.n_vocab});
  reserve_host_logits(std::min<int64_t>(R, options_.max_seqs) * c.n_vocab * 4);  // a decode step's: never regrown
  // Decode graphs read their inputs from one device block, uploaded in one copy per step from pinned
  // host memory (layout: GraphInputs).
  const int64_t graph_max = graphs ? std::min<int64_t>({options_.cuda_graph_max_bs, options_.max_seqs, T, R}) : 0;
  if (graph_max > 0) {
    graph_in_ = GraphInputs(graph_max, max_blocks_, kv_->swa_pool() != nullptr);
    d_graph_in_ = make(DType::I32, {graph_in_.count});
    h_graph_in_ = ops_->alloc_host(graph_in_.count * 4);
  }
  bool moe = false;
  for (const ExpertBank& b : model_->host_experts()) moe = moe || b.n_expert() > 0;
  auto moe_config = [&] {
    const PlacedMemory placed = placed_memory();
    MoeRuntimeConfig mc;
    mc.moe = options_.moe;
    mc.gpu_memory_limit = options_.gpu_memory_limit;
    mc.kv_bytes_per_token = placed.kv_per_token;
    mc.placed_kv_tokens = kv_->pool().n_pages() * options_.page_size;
    mc.kv_reserve_tokens = options_.kv_reserve_tokens >= 0 ? options_.kv_reserve_tokens : mc.placed_kv_tokens;
    mc.placed_bytes = placed.kv + placed.buffers;
    mc.workspace_bytes = placed.workspace;
    mc.weight_bytes = placed.weights;
    mc.max_tokens = T;
    // Graph-captured decode batches keep the expert cache; bigger steps stream whole layers.
    mc.stream_min_tokens = std::max<int64_t>(64, int64_t{options_.cuda_graph_max_bs} + 1);
    mc.cpu_threads = options_.threads;
    mc.decode_log_interval = options_.decode_log_interval;
    mc.release_source = [ckpt = ckpt_.get()](const void* data, int64_t bytes) { ckpt->release(data, bytes); };
    mc.source_releases_memory = ckpt_->releases_memory();
    return mc;
  };
  // A plan that does not fit says so; when the table on the device is what it lacks, the flag that
  // moves it is named too.
  auto with_embed_hint = [&](const Error& e) {
    if (e.code() != ErrorCode::kOutOfMemory || model_->embeddings_tied() || model_->host_mapped_bytes() > 0) return e;
    return Error(e.code(), std::string(e.what()) +
                               " (or --embed-weights host: the token embedding table then stays in host memory)");
  };
  try {
    if (moe) {
      MoeRuntimeConfig mc = moe_config();
      bool host = embed == "host";
      if (embed == "auto") {
        // The plan with the table on the device: a cache sized by what is left takes the table's bytes
        // as slots. A plan that does not fit that way may fit without the table.
        const MoeStrategy want = options_.moe.strategy;
        try {
          const MoePlan preview = MoeRuntime::preview_plan(*ops_, *model_, mc);
          host = embeddings_on_host_auto(preview, options_.moe.cache, preview.cache_experts);
        } catch (const Error& e) {
          if (e.code() != ErrorCode::kOutOfMemory || want == MoeStrategy::kFused || want == MoeStrategy::kCpu) throw;
          host = true;
        }
      }
      WeightLoader ld(*ckpt_, *ops_);
      if (host && model_->move_embeddings_to_host(ld)) mc = moe_config();
      moe_ = std::make_unique<MoeRuntime>(*ops_, *model_, mc);
    } else {
      plan_moe(options_.moe, std::vector<int32_t>(static_cast<size_t>(c.n_layer), 0), {});  // rejects MoE-only flags
      if (embed == "host") {
        WeightLoader ld(*ckpt_, *ops_);
        model_->move_embeddings_to_host(ld);
      }
      check_dense_memory_limit(placed_memory());
    }
  } catch (const Error& e) {
    throw with_embed_hint(e);
  }
  if (model_->host_mapped_bytes() > 0)
    spdlog::info("engine: token embeddings ({}) in {}host memory (--embed-weights {})",
                 format_bytes(model_->host_mapped_bytes()), ops_->device() == Device::kCpu ? "" : "pinned ", embed);
  if (graphs) {
    pad_page_ = kv_->pool().n_pages();  // the spare page
    if (kv_->swa_pool()) swa_pad_page_ = kv_->swa_pool()->n_pages();
    if (kv_->state_pool()) pad_state_slot_ = kv_->state_pool()->n_pages();
    for (int64_t b = 1; b < graph_max; b *= 2) graph_sizes_.push_back(static_cast<int32_t>(b));
    graph_sizes_.push_back(static_cast<int32_t>(graph_max));
    // One graph per size and key-range bound: the backend's short-range form, then the whole capacity.
    const int32_t capacity = max_blocks_ * options_.page_size, short_len = ops_->decode_short_kv_len();
    if (short_len > 0 && short_len < capacity) graph_kv_lens_.push_back(short_len);
    graph_kv_lens_.push_back(capacity);
    for (int32_t b : graph_sizes_) {
      for (int32_t kv_len : graph_kv_lens_) {
        auto gs = std::make_unique<GraphStep>();
        gs->bs = b;
        BatchInfo& bi = gs->batch;
        bi.n_tokens = bi.n_seqs = b;
        bi.max_blocks = max_blocks_;
        bi.max_kv_len = kv_len;  // the bound, not the step's: launch shapes never change
        auto in = [&](int64_t off, std::initializer_list<int64_t> shape) {
          return Tensor(d_graph_in_.ptr<int32_t>() + off, DType::I32, shape, d_graph_in_.device);
        };
        bi.positions = in(graph_in_.pos, {b});
        bi.seq_index = in(graph_in_.seq, {b});
        bi.seq_start = in(graph_in_.start, {b + 1});
        bi.block_tables = in(graph_in_.tables, {b, max_blocks_});
        bi.n_valid = in(graph_in_.valid, {1});
        if (kv_->state_pool()) bi.state_slots = in(graph_in_.slots, {b});
        gs->swa_batch = bi;
        gs->swa_batch.block_tables = in(graph_in_.swa_tables, {b, max_blocks_});
        gs->ids = in(graph_in_.ids, {b});
        gs->rows = in(graph_in_.rows, {b});
        gs->logits = d_logits_.slice(0, b);
        graph_steps_.push_back(std::move(gs));
      }
    }
  }
  spdlog::debug("engine: {} model, {} layers, KV {} tokens in {} pages of {} ({:.1f} MiB), step buffers for {} tokens",
                c.arch, c.n_layer, options_.kv_tokens, kv_->pool().n_pages(), options_.page_size,
                static_cast<double>(kv_->bytes()) / (1 << 20), T);
  if (moe_) calibrate_fetch_cap();
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

Engine::PlacedMemory Engine::placed_memory() const {
  PlacedMemory m;
  for (const TensorInfo& t : ckpt_->tensors()) m.weights += t.bytes;
  m.weights -= model_->host_mapped_bytes();  // read from host memory (--embed-weights)
  m.kv = kv_->bytes();
  m.kv_per_token = m.kv / std::max<int64_t>((kv_->pool().n_pages() + kv_->config().spare_pages) * options_.page_size, 1);
  for (const Buffer& b : storage_) m.buffers += b.bytes();
  for (const Buffer& b : state_->storage) m.buffers += b.bytes();
  m.workspace = ops_->workspace_bytes(workspace_shape());
  return m;
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

void Engine::check_dense_memory_limit(const PlacedMemory& m) const {
  const int64_t buffers = m.buffers + m.workspace;  // step buffers and the backend's scratch
  const int64_t limit = options_.gpu_memory_limit, need = m.weights + m.kv + buffers;
  if (limit <= 0 || need <= limit) return;
  const int64_t room = limit - m.weights - buffers;
  const std::string fix =
      m.weights > limit ? std::string("Raise --gpu-memory-limit (the weights alone do not fit)")
      : room < m.kv_per_token * options_.page_size
          ? std::string("Raise --gpu-memory-limit or lower --max-prefill-tokens (the weights and buffers leave no "
                        "room for one KV page)")
          : fmt::format("Raise --gpu-memory-limit or lower --kv-tokens (about {} fit)",
                        room / std::max<int64_t>(m.kv_per_token, 1));
  fail(ErrorCode::kOutOfMemory,
       "--gpu-memory-limit {} cannot hold the model: {} of weights, {} of KV cache ({} tokens, --kv-tokens) and {} "
       "of buffers and workspaces for steps of {} tokens ({} missing). {}",
       format_bytes(limit), format_bytes(m.weights), format_bytes(m.kv), options_.kv_tokens, format_bytes(buffers),
       options_.max_step_tokens, format_bytes(need - limit), fix);
}

void Engine::calibrate_fetch_cap() {
  const std::vector<int32_t> caps = moe_->fetch_cap_candidates();
  if (caps.empty()) return;
  // Per cap one warm-up and up to 6 timed steps; the cache is cold at start and a cold cache favours
  // large caps, so first up to 32 steps at the default cap: as much as the KV pool holds (measured on
  // the H200: 4 timed steps and no settling picked 4 where 3 decodes 17% faster).
  const int64_t prompt = std::min<int64_t>(16, options_.max_step_tokens), warm = 1;
  const int64_t n_vocab = model_->config().n_vocab, n_caps = static_cast<int64_t>(caps.size());
  const int64_t room = int64_t{kv_->pool().n_free()} * kv_->pool().page_size();
  const int64_t per_cap = std::clamp<int64_t>((room - prompt) / n_caps, warm + 1, warm + 6);
  const int64_t timed = per_cap - warm, needed = prompt + n_caps * per_cap;
  const int64_t settle = std::clamp<int64_t>(room - needed, 0, 32);
  const int32_t fallback = moe_->default_fetch_cap();
  BlockTable seq;
  const KvPools pools = kv_->pools();
  if (!seq.reserve(*pools.full, needed + settle)) {
    spdlog::warn("moe: no KV room to calibrate the hybrid fetch cap; using {} (half of top-k)", fallback);
    return;
  }
  moe_->begin_calibration();
  try {
    uint64_t rng = 0x9e3779b97f4a7c15ull;  // random token ids: routes like real traffic's, any model
    auto token = [&] {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<int32_t>((rng >> 33) % static_cast<uint64_t>(n_vocab));
    };
    std::vector<int32_t> ids(static_cast<size_t>(prompt));
    for (int32_t& id : ids) id = token();
    auto run = [&](int64_t start, const int32_t* tokens, int64_t n) {  // sliding-window pages as it goes
      if (!seq.advance(pools, start, start + n))
        fail(ErrorCode::kOutOfMemory, "the sliding-window KV pool or the recurrent-state slots are full");
      step({{&seq.pages(), start, tokens, n, 1, &seq.swa_pages(), seq.state_slot()}});
    };
    run(0, ids.data(), prompt);
    int64_t pos = prompt;
    auto decode = [&] {
      const int32_t id = token();
      run(pos++, &id, 1);
    };
    for (int64_t i = 0; i < settle; ++i) decode();
    std::vector<double> seconds;
    std::string timings;
    for (int32_t cap : caps) {
      moe_->set_fetch_cap(cap);
      drop_graphs();  // recorded steps hold the cap they were recorded with
      for (int64_t i = 0; i < warm; ++i) decode();
      ops_->synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < timed; ++i) decode();
      ops_->synchronize();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(timed);
      timings += fmt::format(" {}:{:.2f}", cap, 1e3 * s);
      seconds.push_back(s);
    }
    const int32_t best = MoeRuntime::choose_fetch_cap(caps, seconds);
    seq.release(pools);
    moe_->set_fetch_cap(best);
    drop_graphs();
    moe_->end_calibration();
    spdlog::info("moe: hybrid fetch cap {} per layer per step, calibrated (cap:ms per decode step{})", best, timings);
  } catch (const std::exception& e) {  // the engine still works: keep the default cap
    seq.release(pools);
    moe_->set_fetch_cap(fallback);
    drop_graphs();
    moe_->end_calibration();
    spdlog::warn("moe: the hybrid fetch-cap calibration failed ({}); using {} (half of top-k)", e.what(), fallback);
  }
}

void Engine::drop_graphs() {
  ops_->synchronize();  // a replay may still be running
  for (auto& gs : graph_steps_) gs->graph.reset();
}

Engine::~Engine() = default;

std::span<const float> Engine::step(const std::vector<StepItem>& items) {
  std::lock_guard<std::mutex> lock(step_mu_);
  const ModelConfig& c = model_->config();
  const StepStart st = begin_step(items);
  const int64_t R = st.rows;
  const int64_t logit_bytes = R * c.n_vocab * 4;
  if (h_logits_.bytes() < logit_bytes) reserve_host_logits(logit_bytes);
  if (R > 0) {
    ops_->copy(d_logits_.slice(0, R), Tensor(h_logits_.data(), DType::F32, {R, c.n_vocab}));
    graph_in_busy_ = false;  // the copy to the host waited for the stream
  }
  end_step(st);
  return {R > 0 ? static_cast<const float*>(h_logits_.data()) : nullptr, static_cast<size_t>(R * c.n_vocab)};
}

std::span<const SampleResult> Engine::step_sample(const std::vector<StepItem>& items,
                                                  std::span<const SampleRow> rows, std::span<const LogitEdit> edits,
                                                  std::span<const uint32_t> masks) {
  std::lock_guard<std::mutex> lock(step_mu_);
  const ModelConfig& c = model_->config();
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
  const StepStart st = begin_step(items, [this, &staged](int64_t R) {
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
  graph_in_busy_ = false;  // the copy to the host waited for the stream
  end_step(st);
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
  const ModelConfig& c = model_->config();
  const int64_t S = static_cast<int64_t>(items.size()), page = kv_->config().page_size;
  if (S < 1 || S > options_.max_seqs)
    fail(ErrorCode::kInvalidArgument, "engine step: {} sequences (1..{} allowed)", S, options_.max_seqs);
  h_ids_.clear();
  h_pos_.clear();
  h_seq_.clear();
  h_rows_.clear();
  h_slots_.clear();
  h_start_.assign(1, 0);
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
    const int64_t base = static_cast<int64_t>(h_ids_.size());
    for (int64_t i = 0; i < it.n; ++i) {
      const int32_t id = it.tokens[i];
      if (id < 0 || id >= c.n_vocab)
        fail(ErrorCode::kInvalidArgument, "token id {} is outside the vocabulary (0..{})", id, c.n_vocab - 1);
      h_ids_.push_back(id);
      h_pos_.push_back(static_cast<int32_t>(it.start + i));
      h_seq_.push_back(static_cast<int32_t>(s));
    }
    for (int64_t r = it.n - it.n_logits; r < it.n; ++r) h_rows_.push_back(static_cast<int32_t>(base + r));
    h_start_.push_back(static_cast<int32_t>(h_ids_.size()));
    if (kv_->state_pool()) h_slots_.push_back(it.state_slot);
  }
  const int64_t T = static_cast<int64_t>(h_ids_.size()), R = static_cast<int64_t>(h_rows_.size());
  if (T > options_.max_step_tokens)
    fail(ErrorCode::kInvalidArgument, "engine step: {} tokens exceed the planned {} per step", T,
         options_.max_step_tokens);
  if (R > options_.max_logit_rows)
    fail(ErrorCode::kInvalidArgument, "engine step: {} logit rows exceed the planned {}", R, options_.max_logit_rows);
  h_tables_.assign(static_cast<size_t>(S * mb), 0);
  for (int64_t s = 0; s < S; ++s) {
    const auto& pages = *items[static_cast<size_t>(s)].pages;
    std::copy(pages.begin(), pages.end(), h_tables_.begin() + s * mb);
  }
  const bool decode = std::any_of(items.begin(), items.end(), [](const StepItem& it) { return it.n == 1; });
  if (before_forward) before_forward(R);
  if (moe_) moe_->before_step(decode);
  if (GraphStep* gs = graph_step_for(items)) {
    run_graph_step(*gs, items);
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
    for (int32_t p : h_pos_) batch.max_kv_len = std::max(batch.max_kv_len, p + 1);
    batch.positions = upload(h_pos_, d_pos_, {T});
    batch.seq_index = upload(h_seq_, d_seq_, {T});
    batch.seq_start = upload(h_start_, d_start_, {S + 1});
    batch.block_tables = upload(h_tables_, d_tables_, {S, mb});
    if (kv_->state_pool()) batch.state_slots = upload(h_slots_, d_slots_, {S});
    BatchInfo swa_batch = batch;
    if (kv_->swa_pool()) {
      stage_swa_tables(items, S, mb);
      swa_batch.block_tables = upload(h_swa_tables_, d_swa_tables_, {S, mb});
    }
    forward(batch, kv_->swa_pool() ? &swa_batch : nullptr, upload(h_ids_, d_ids_, {T}),
            R > 0 ? upload(h_rows_, d_rows_, {R}) : Tensor(), R > 0 ? d_logits_.slice(0, R) : Tensor());
  }
  return {R, decode};
}

void Engine::end_step(const StepStart& st) {
  if (moe_) {  // after the step's work: CPU shares it queued are done, their counters final
    moe_->experts().check();
    moe_->after_step(st.decode);
  }
}

void Engine::forward(const BatchInfo& batch, const BatchInfo* swa_batch, const Tensor& ids, const Tensor& rows,
                     const Tensor& logits) {
  ForwardContext ctx{*ops_, batch, ids, rows, logits, *kv_, moe_ ? &moe_->experts() : nullptr, *state_,
                     dump_ ? &dump_ : nullptr, swa_batch};
  model_->forward(ctx);
}

void Engine::stage_swa_tables(const std::vector<StepItem>& items, int64_t rows, int64_t mb) {
  h_swa_tables_.assign(static_cast<size_t>(rows * mb), 0);
  for (int64_t s = 0; s < rows; ++s) {
    int32_t* row = h_swa_tables_.data() + s * mb;
    if (s >= static_cast<int64_t>(items.size())) {
      row[0] = swa_pad_page_;  // a graph's padding row
      continue;
    }
    const std::vector<int32_t>& pages = *items[static_cast<size_t>(s)].swa_pages;
    for (size_t j = 0; j < pages.size(); ++j) row[j] = std::max(pages[j], 0);
  }
}

Engine::GraphStep* Engine::graph_step_for(const std::vector<StepItem>& items) {
  if (graph_sizes_.empty() || dump_) return nullptr;
  for (const StepItem& it : items)
    if (it.n != 1 || it.n_logits != 1) return nullptr;
  const auto S = static_cast<int32_t>(items.size());
  const auto at = std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), S);
  if (at == graph_sizes_.end()) return nullptr;
  int64_t kv_len = 0;  // the step's longest key range
  for (const StepItem& it : items) kv_len = std::max(kv_len, it.start + 1);
  const auto len = std::lower_bound(graph_kv_lens_.begin(), graph_kv_lens_.end(), kv_len);
  if (len == graph_kv_lens_.end()) return nullptr;  // past the pool (the step's checks refused it already)
  const size_t i = static_cast<size_t>(at - graph_sizes_.begin()) * graph_kv_lens_.size() +
                   static_cast<size_t>(len - graph_kv_lens_.begin());
  GraphStep* gs = graph_steps_[i].get();
  return gs->failed ? nullptr : gs;
}

void Engine::run_graph_step(GraphStep& gs, const std::vector<StepItem>& items) {
  const int32_t b = gs.bs;
  const auto S = static_cast<int32_t>(items.size());
  for (int32_t s = S; s < b; ++s) {  // padding rows: token 0 at position 0 of the spare page
    h_ids_.push_back(0);
    h_pos_.push_back(0);
    h_seq_.push_back(s);
    h_rows_.push_back(s);
    h_start_.push_back(s + 1);
    if (kv_->state_pool()) h_slots_.push_back(pad_state_slot_);
  }
  h_tables_.assign(static_cast<size_t>(b) * max_blocks_, 0);
  for (int32_t s = 0; s < b; ++s) {
    int32_t* row = h_tables_.data() + static_cast<int64_t>(s) * max_blocks_;
    if (s < S) {
      const std::vector<int32_t>& pages = *items[static_cast<size_t>(s)].pages;
      std::copy(pages.begin(), pages.end(), row);
    } else {
      row[0] = pad_page_;
    }
  }
  // Staged in pinned memory at the graph's offsets, then one copy up to the end of the used tables.
  // The copy of the step before has completed when that step waited for its logits, copied after it;
  // one that threw before then may still be reading the block.
  if (graph_in_busy_) ops_->synchronize();
  graph_in_busy_ = true;
  auto* in = static_cast<int32_t*>(h_graph_in_.data());
  auto put = [&](const std::vector<int32_t>& v, int64_t off) { std::copy(v.begin(), v.end(), in + off); };
  put(h_ids_, graph_in_.ids);
  put(h_pos_, graph_in_.pos);
  put(h_seq_, graph_in_.seq);
  put(h_start_, graph_in_.start);
  put(h_rows_, graph_in_.rows);
  in[graph_in_.valid] = S;
  put(h_slots_, graph_in_.slots);
  put(h_tables_, graph_in_.tables);
  if (kv_->swa_pool()) {
    stage_swa_tables(items, b, max_blocks_);
    put(h_swa_tables_, graph_in_.swa_tables);
  }
  const int64_t used = graph_in_.tables + static_cast<int64_t>(h_tables_.size());
  ops_->copy(Tensor(in, DType::I32, {used}), Tensor(d_graph_in_.ptr<int32_t>(), DType::I32, {used}, d_graph_in_.device));
  if (gs.graph && gs.graph->valid()) {
    gs.graph->launch();
    ++graph_replays_;
    return;
  }
  gs.graph.reset();
  // Eager first: this step's result, and every one-time scratch region sized before recording.
  const bool swa = kv_->swa_pool() != nullptr;
  forward(gs.batch, swa ? &gs.swa_batch : nullptr, gs.ids, gs.rows, gs.logits);
  try {
    GraphStep* g = &gs;
    gs.graph = ops_->capture([this, g, swa] { forward(g->batch, swa ? &g->swa_batch : nullptr, g->ids, g->rows, g->logits); });
  } catch (const Error& e) {  // this step's result came from the eager run; later ones stay eager
    spdlog::warn("engine: decode batch size {} with key ranges up to {} runs eagerly (graph recording failed: {})", b,
                 gs.batch.max_kv_len, e.what());
    gs.failed = true;
  }
}

std::optional<MoeReport> Engine::moe_report() {
  std::lock_guard<std::mutex> lock(step_mu_);
  return moe_ ? moe_->report() : std::nullopt;
}

}  // namespace ft
