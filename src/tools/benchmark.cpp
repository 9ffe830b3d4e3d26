#include "tools/benchmark.h"

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "backend/device.h"
#include "tools/route_stats.h"
#include "engine/engine_runner.h"
#include "engine/sampler.h"
#include "engine/service.h"
#include "tools/synthetic_weights.h"
#include "moe/host_memory.h"
#include "moe/thread_pool.h"
#include "util/error.h"
#include "util/log.h"
#include "util/format.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool is_routed_expert(const std::string& name) {
  return contains(name, "_exps.") || (contains(name, ".experts.") && !contains(name, "shared_expert"));
}

bool is_embedding(const std::string& name) { return name == "token_embd.weight" || name == "model.embed_tokens.weight"; }

/** A table of Qwen4-Exp's hashed n-grams (one tensor, or its split_ngram_parts shards): a token gathers a
 *  few rows of it, like the token embedding. */
bool is_ngram_table(const std::string& name) { return name.find(".ngram_embedding.") != std::string::npos; }

/** Layer index of "blk.N.*" or "model.layers.N.*", -1 otherwise. */
int64_t layer_of(const std::string& name) {
  for (const char* prefix : {"blk.", "model.layers."}) {
    const size_t n = std::strlen(prefix);
    if (name.compare(0, n, prefix) == 0 && name.size() > n && std::isdigit(static_cast<unsigned char>(name[n])))
      return std::stoll(name.substr(n));
  }
  return -1;
}

int64_t max_batch(const BenchOptions& o) {
  return o.batches.empty() ? 0 : *std::max_element(o.batches.begin(), o.batches.end());
}

/** Fills report fields that depend only on the checkpoint. */
void weight_accounting(const Engine& engine, BenchReport& r) {
  const Checkpoint& ckpt = engine.checkpoint();
  const bool tied = !ckpt.find("output.weight") && !ckpt.find("lm_head.weight");
  std::map<int64_t, int64_t> expert_bytes;  // layer -> routed bytes
  std::map<int64_t, int64_t> ngram_rows;    // layer -> bytes of the n-gram rows a token reads there
  std::map<DType, int64_t> by_type;
  const nlohmann::json cfg = ckpt.metadata().value("config", nlohmann::json::object());
  const int64_t ngram_heads = (cfg.value("ngram_size", int64_t{3}) - 1) * cfg.value("heads_per_ngram", int64_t{8});
  for (const TensorInfo& t : ckpt.tensors()) {
    r.weight_bytes += t.bytes;
    by_type[t.dtype] += t.bytes;
    if (is_ngram_table(t.name) && !t.shape.empty() && t.shape[0] > 0) {
      r.ngram_table_bytes += t.bytes;
      ngram_rows[layer_of(t.name)] = ngram_heads * (t.bytes / t.shape[0]);  // shards of one table: the same rows
    } else if (is_routed_expert(t.name)) {
      r.routed_expert_bytes += t.bytes;
      expert_bytes[layer_of(t.name)] += t.bytes;
    } else if (is_embedding(t.name) && !tied) {
      r.embedding_row_bytes = t.shape.empty() ? 0 : t.bytes / t.shape[0];
      r.embedding_bytes += t.bytes;
    } else {
      r.dense_bytes += t.bytes;
    }
  }
  const int64_t E = std::max<int64_t>(engine.config().n_expert, 1);
  for (const auto& [layer, bytes] : expert_bytes) r.expert_bytes_all_layers += bytes / E;
  for (const auto& [layer, bytes] : ngram_rows) r.ngram_row_bytes += bytes;
  DType best = DType::F32;
  int64_t most = -1;
  for (const auto& [t, bytes] : by_type)
    if (bytes > most) most = bytes, best = t;
  r.weight_type = user_type_name(best);
}

}  // namespace

void plan_bench_engine(const BenchOptions& o, EngineOptions& eo) {
  if (o.prompt_tokens < 1) fail(ErrorCode::kInvalidArgument, "--prompt-tokens {} must be >= 1", o.prompt_tokens);
  if (o.gen_tokens < 0) fail(ErrorCode::kInvalidArgument, "--gen-tokens {} must be >= 0", o.gen_tokens);
  if (o.warmup_steps < 0) fail(ErrorCode::kInvalidArgument, "--warmup-steps {} must be >= 0", o.warmup_steps);
  if (o.route_sample_steps < 0)
    fail(ErrorCode::kInvalidArgument, "--route-sample-steps {} must be >= 0", o.route_sample_steps);
  if (o.max_prefill_tokens < 1)
    fail(ErrorCode::kInvalidArgument, "--max-prefill-tokens {} must be >= 1", o.max_prefill_tokens);
  if (o.batches.empty()) fail(ErrorCode::kInvalidArgument, "--batch: no batch sizes given");
  for (int32_t b : o.batches)
    if (b < 1) fail(ErrorCode::kInvalidArgument, "--batch: batch size {} must be >= 1", b);
  const int64_t B = max_batch(o), page = std::max<int32_t>(eo.page_size, 1);
  const int64_t per_seq = o.prompt_tokens + o.gen_tokens + o.route_sample_steps + 1;
  const int64_t warm = o.prompt_tokens + o.warmup_steps + 1;  // the warm-up's sequences (run_bench)
  eo.kv_tokens = B * ((std::max(per_seq, warm) + page - 1) / page) * page;
  eo.kv_tokens_flag = "--batch, --prompt-tokens or --gen-tokens";
  eo.max_seqs = static_cast<int32_t>(B);
  eo.max_logit_rows = B;
  eo.max_step_tokens = std::max(B, std::min(o.max_prefill_tokens, B * o.prompt_tokens));
  // The bench's KV holds only its own sequences; the expert cache is sized as a server's would be,
  // with 8192 tokens of KV kept (the issue-7 benchmarks and llama.cpp's runs assume that much).
  if (eo.kv_reserve_tokens < 0) eo.kv_reserve_tokens = kBenchKvReserveTokens;
}

int64_t peak_host_rss() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  return 0;
}

void reset_peak_host_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";  // resets VmHWM to the current RSS; silently nothing where unsupported
}

namespace {

/** Parts per thread of the host probes' passes: the pool hands them out as workers come, so a late
 *  waker does not leave its share to one other thread. */
constexpr int64_t kPartsPerThread = 4;

/** The best rate (bytes / seconds of one pass) over `passes` timed passes, after an untimed warm-up,
 *  of fn(part) for every part in [0, parts) on a ThreadPool of `threads` workers. */
template <typename F>
double best_pool_rate(int threads, int64_t parts, double bytes, int passes, F&& fn) {
  ThreadPool pool(threads);
  double best = 0;
  for (int pass = 0; pass <= passes; ++pass) {
    const auto t0 = Clock::now();
    pool.run(parts, [&](int64_t part, int) { fn(part); });
    if (pass > 0) best = std::max(best, bytes / seconds_since(t0));
  }
  return best;
}

}  // namespace

double measure_copy_bandwidth(Ops& ops, int64_t bytes, int threads) {
  if (bytes < 1) fail(ErrorCode::kInvalidArgument, "copy bandwidth probe: {} bytes", bytes);
  const int reps = 5;
  double best = 0;
  if (ops.device() == Device::kCpu) {
    Buffer a = Buffer::host(bytes), b = Buffer::host(bytes);
    std::memset(a.data(), 1, static_cast<size_t>(bytes));
    std::memset(b.data(), 0, static_cast<size_t>(bytes));
    const int n = std::max(1, threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency()));
    const int64_t parts = kPartsPerThread * n;
    return best_pool_rate(n, parts, 2.0 * static_cast<double>(bytes), reps, [&](int64_t i) {
      const int64_t off = bytes * i / parts, len = bytes * (i + 1) / parts - off;
      std::memcpy(static_cast<uint8_t*>(b.data()) + off, static_cast<uint8_t*>(a.data()) + off, static_cast<size_t>(len));
    });
  }
  Buffer a = ops.alloc(bytes), b = ops.alloc(bytes);
  const Tensor src(a.data(), DType::U8, {bytes}, ops.device()), dst(b.data(), DType::U8, {bytes}, ops.device());
  ops.copy(src, dst);
  ops.synchronize();
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    ops.copy(src, dst);
    ops.synchronize();
    best = std::max(best, 2.0 * static_cast<double>(bytes) / seconds_since(t0));
  }
  return best;
}

double measure_h2d_bandwidth(Ops& ops, int64_t bytes) {
  if (ops.device() == Device::kCpu) return 0;
  auto alloc = make_bank_allocator(ops);
  Buffer host = alloc->allocate(bytes);
  std::memset(host.data(), 1, static_cast<size_t>(bytes));
  alloc->pin(host);
  Buffer dev = ops.alloc(bytes);
  const Tensor src(host.data(), DType::U8, {bytes}), dst(dev.data(), DType::U8, {bytes}, ops.device());
  double best = 0;
  for (int i = 0; i < 4; ++i) {  // the first is the warm-up
    ops.synchronize();
    const auto t0 = Clock::now();
    ops.copy(src, dst);
    ops.synchronize();
    if (i > 0) best = std::max(best, static_cast<double>(bytes) / seconds_since(t0));
  }
  return best;
}

double measure_host_read_bandwidth(int64_t bytes, int threads) {
  if (bytes < (int64_t{1} << 20) || threads < 1)
    fail(ErrorCode::kInvalidArgument, "host read probe: {} bytes on {} threads (at least 1 MiB, 1 thread)", bytes, threads);
  const auto words = static_cast<size_t>(bytes / 8);
  std::vector<uint64_t> buf;
  try {
    buf.assign(words, 0x0101010101010101ull);  // touched: every page is resident before the passes
  } catch (const std::bad_alloc&) {
    fail(ErrorCode::kOutOfMemory, "host read probe: cannot allocate {}", format_bytes(bytes));
  }
  const int64_t parts = kPartsPerThread * threads, lines = static_cast<int64_t>(words / 8);
  std::vector<uint64_t> sums(static_cast<size_t>(parts) * 8, 0);  // a cache line per part
  const double best = best_pool_rate(threads, parts, static_cast<double>(lines * 64), 3, [&](int64_t p) {
    uint64_t a[8] = {};  // independent sums: loads, not one add chain, bound the loop
    for (int64_t i = lines * p / parts * 8; i < lines * (p + 1) / parts * 8; i += 8)
      for (int j = 0; j < 8; ++j) a[j] += buf[static_cast<size_t>(i + j)];
    uint64_t s = 0;
    for (uint64_t v : a) s += v;
    sums[static_cast<size_t>(p) * 8] = s;
  });
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  if (total == 0) fail(ErrorCode::kInternal, "host read probe: the buffer read as zeros");  // keeps the reads
  return best;
}

namespace {

/** Counts the tokens one bench request sampled and keeps its error. */
class BenchSink : public TokenSink {
 public:
  explicit BenchSink(bool keep) : keep_ids(keep) {}
  bool on_token(const SampledToken& t, bool) override {
    ++tokens;
    if (keep_ids) ids.push_back(t.id);
    return true;
  }
  void on_finish(const FinishInfo& info) override {
    if (info.reason == FinishReason::kError) error = info.error.empty() ? "the forward failed" : info.error;
  }
  int64_t tokens = 0;
  std::string error;
  bool keep_ids = false;
  std::vector<int32_t> ids;  // the sampled ids (keep_ids)
};

/** ft bench on the serving loop: B requests at a time on a synchronous EngineService (no worker
 *  thread), all admitted at once with their pages reserved, every prompt computed before the first
 *  decode step (SchedulerConfig::prefill_before_decode), so each decode step holds the whole batch. */
class BenchDriver {
 public:
  /** `engine` and `runner` must outlive the driver. */
  BenchDriver(Engine& engine, ModelRunner& runner, int32_t batch, bool keep_ids) : B_(batch), keep_ids_(keep_ids) {
    const EngineOptions& eo = engine.options();
    ServiceConfig sc;
    sc.worker_thread = false;
    sc.scheduler.max_running = batch;
    sc.scheduler.max_waiting = batch;
    // Prompts packed into forwards of at most max_step_tokens tokens (plan_bench_engine: --max-prefill-tokens).
    sc.scheduler.max_prefill_tokens =
        static_cast<int32_t>(std::min<int64_t>(eo.max_step_tokens, std::numeric_limits<int32_t>::max()));
    sc.scheduler.max_step_tokens = eo.max_step_tokens;
    sc.scheduler.max_logit_rows = eo.max_logit_rows;
    sc.scheduler.max_seq_len = std::numeric_limits<int64_t>::max();  // the pool is the limit
    sc.scheduler.prefix_cache = false;  // random prompts: nothing to share, every token computed
    sc.scheduler.reserve_at_admission = true;
    sc.scheduler.prefill_before_decode = true;
    service_ = std::make_unique<EngineService>(runner, engine.kv().pools(), sc);
  }

  /** Queues B requests of `n_prompt` random tokens that then run `decode_steps` decode steps, each
   *  fed random ids (draw(n) gives n ids: the prompts first, then each step's B ids). */
  template <typename Draw>
  void submit(int64_t n_prompt, int64_t decode_steps, const SamplingParams& sp, Draw&& draw) {
    sinks_.clear();
    std::vector<std::vector<int32_t>> prompts, fed(static_cast<size_t>(B_));
    for (int32_t b = 0; b < B_; ++b) prompts.push_back(draw(n_prompt));
    for (int64_t step = 0; step < decode_steps; ++step) {
      const std::vector<int32_t> ids = draw(B_);
      for (int32_t b = 0; b < B_; ++b) fed[static_cast<size_t>(b)].push_back(ids[static_cast<size_t>(b)]);
    }
    for (int32_t b = 0; b < B_; ++b) {
      GenerationRequest g;
      g.prompt = std::move(prompts[static_cast<size_t>(b)]);
      g.max_tokens = static_cast<int32_t>(1 + decode_steps);  // the prompt's token, then one a step
      g.sampling = sp;
      g.ignore_eos = true;
      g.feed_tokens = std::move(fed[static_cast<size_t>(b)]);
      sinks_.push_back(std::make_shared<BenchSink>(keep_ids_));
      g.sink = sinks_.back();
      try {
        service_->submit(std::move(g));
      } catch (const Error& e) {
        fail(e.code(), "bench: batch {}: {}", B_, e.what());
      }
    }
  }
  /** Runs steps until every prompt is computed (its first token sampled). */
  void prefill() {
    while (std::any_of(sinks_.begin(), sinks_.end(), [](const auto& s) { return s->tokens == 0; }))
      if (!service_->run_step()) fail(ErrorCode::kInternal, "bench: a prompt was left uncomputed");
    check(1);
  }
  /** Runs `steps` decode steps (each one token of every sequence). */
  void decode(int64_t steps) {
    const int64_t before = sinks_.empty() ? 0 : sinks_[0]->tokens;
    for (int64_t s = 0; s < steps; ++s)
      if (!service_->run_step()) fail(ErrorCode::kInternal, "bench: a decode step planned nothing");
    check(before + steps);
  }
  /** The ids each request of the last submit() sampled so far (with keep_ids). */
  std::vector<std::vector<int32_t>> sampled() const {
    std::vector<std::vector<int32_t>> v;
    for (const auto& s : sinks_) v.push_back(s->ids);
    return v;
  }
  /** Runs the requests' steps left until they finished. */
  void finish() {
    service_->run_until_idle();
    for (const auto& s : sinks_)
      if (!s->error.empty()) fail(ErrorCode::kInternal, "bench: batch {}: {}", B_, s->error);
  }

 private:
  /** Every sequence sampled `tokens` tokens (a step held the whole batch). */
  void check(int64_t tokens) const {
    for (const auto& s : sinks_) {
      if (!s->error.empty()) fail(ErrorCode::kInternal, "bench: batch {}: {}", B_, s->error);
      if (s->tokens != tokens)
        fail(ErrorCode::kInternal, "bench: batch {}: a sequence sampled {} tokens, {} expected", B_, s->tokens, tokens);
    }
  }

  int32_t B_;
  bool keep_ids_;
  std::vector<std::shared_ptr<BenchSink>> sinks_;
  std::unique_ptr<EngineService> service_;
};

/** run_bench over `runner` (EngineRunner of `engine`, or a rank group's runner with `engine` its rank 0):
 *  see run_bench(ServingEngine&). */
BenchReport run_bench_on(Engine& engine, ModelRunner& runner, RankGroup* group, const BenchOptions& o) {
  const ModelConfig& c = engine.config();
  const EngineOptions& eo = engine.options();
  Ops& ops = engine.ops();
  BenchReport r;
  r.model = engine.checkpoint().path();
  r.arch = c.arch;
  r.device = ops.name();
  r.activation_dtype = dtype_name(ops.activation_dtype());
  r.n_layer = c.n_layer;
  r.n_expert = c.n_expert;
  r.n_expert_used = c.n_expert_used;
  r.prompt_tokens = o.prompt_tokens;
  r.gen_tokens = o.gen_tokens;
  weight_accounting(engine, r);
  const int64_t B_max = max_batch(o);
  if (B_max > eo.max_seqs || B_max > eo.max_logit_rows)
    fail(ErrorCode::kInvalidArgument, "bench: batch {} exceeds the engine's {} sequences / {} logit rows", B_max,
         eo.max_seqs, eo.max_logit_rows);

  const bool cuda = ops.device() == Device::kCuda;
  int64_t min_free = o.device_free_before;
  // A group's ranks 1.. on devices 1.. (rank_group.h): the lowest free memory seen on each.
  const int n_ranks = group ? group->size() : 1;
  std::vector<int64_t> rank_min_free(static_cast<size_t>(n_ranks), -1);
  for (size_t i = 1; i < rank_min_free.size() && i < o.rank_device_free_before.size(); ++i)
    rank_min_free[i] = o.rank_device_free_before[i];
  auto sample_device = [&] {
    if (cuda && o.device_free_before >= 0) min_free = std::min(min_free, cuda_free_memory(0));
    if (cuda)
      for (size_t i = 1; i < rank_min_free.size(); ++i)
        if (rank_min_free[i] >= 0) rank_min_free[i] = std::min(rank_min_free[i], cuda_free_memory(static_cast<int>(i)));
  };
  sample_device();
  r.copy_bytes = o.copy_bytes > 0 ? o.copy_bytes : (cuda ? int64_t{1} << 30 : int64_t{256} << 20);
  // The CPU probe's two buffers would dominate a small model's peak RSS: keep the peak before the
  // probe, then restart the high-water mark after it (Linux: "5" > /proc/self/clear_refs).
  const int64_t rss_before_probe = peak_host_rss();
  r.copy_bandwidth = measure_copy_bandwidth(ops, r.copy_bytes, o.threads);
  if (const MoePlan* plan = engine.moe_plan()) {
    r.moe_plan = plan->summary();
    r.moe_strategy = moe_strategy_name(plan->strategy);
    r.moe_cache_slots = plan->cache.n_slots;
    r.moe_prefetch_depth = plan->prefetch ? plan->prefetch_depth : 0;
    if (plan->strategy != MoeStrategy::kFused)
      r.moe_bank_format = bank_format_name(plan->bank_format);
  }
  r.embeddings_on_host = engine.host_mapped_weight_bytes() > 0;
  const std::optional<MoeReport> moe_start = engine.moe_report();
  if (moe_start && moe_start->cache_slots > 0) r.h2d_bandwidth = measure_h2d_bandwidth(ops, int64_t{256} << 20);
  // With a GPU, the CPU's experts and the link's copies read the same host memory: its read rate on
  // the executor's threads bounds hybrid and cpu (host_memory_ceiling). 2 GiB: well past the L3.
  if (cuda && moe_start && moe_start->cpu_threads > 0) {
    try {
      r.host_read_bandwidth = measure_host_read_bandwidth(int64_t{2} << 30, moe_start->cpu_threads);
      r.host_read_threads = moe_start->cpu_threads;
    } catch (const Error& e) {  // a host short of 2 GiB still benchmarks, without this ceiling
      spdlog::warn("bench: no host-memory ceiling: {}", e.what());
    }
  }
  reset_peak_host_rss();

  RouteCounter routes(engine);
  const int64_t N = o.prompt_tokens, G = o.gen_tokens, V = c.n_vocab;
  SynthRng rng(mix_seed(o.seed, 0xbe7c4));
  auto random_ids = [&](int64_t n) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(V));
    return ids;
  };
  // Every step samples its rows on the backend as a server step does (the service's loop), so the
  // timed step includes the sampler and its few bytes back instead of the logits. The sampled ids
  // are not fed back: each decode step's tokens are random (GenerationRequest::feed_tokens), as
  // llama-bench's.
  SamplingParams sp;
  sp.temperature = o.temperature;
  sp.top_k = o.top_k;
  sp.top_p = o.top_p;
  sp.min_p = o.min_p;
  sp.seed = o.seed;
  sp.validate();
  r.sampling = o.temperature <= 0.0f ? std::string("greedy") : fmt::format("temperature {}", o.temperature);
  if (o.temperature > 0.0f && o.top_k > 0) r.sampling += fmt::format(", top-k {}", o.top_k);
  if (o.temperature > 0.0f && o.top_p < 1.0f) r.sampling += fmt::format(", top-p {}", o.top_p);
  if (o.temperature > 0.0f && o.min_p > 0.0f) r.sampling += fmt::format(", min-p {}", o.min_p);
  // Each rank's expert-cache counters (a group's; rank 0's are `engine`'s).
  auto rank_reports = [&] {
    std::vector<std::optional<MoeReport>> v;
    for (int i = 0; i < n_ranks; ++i) v.push_back(group ? group->engine(i).moe_report() : engine.moe_report());
    return v;
  };

  for (int32_t B : o.batches) {
    BenchBatch res;
    const double E = static_cast<double>(c.n_expert), k = static_cast<double>(c.n_expert_used);
    const bool sample_routes = c.n_expert > 0 && routes.available() && o.route_sample_steps > 0 && G > 0;
    res.batch = B;
    BenchDriver driver(engine, runner, B, o.keep_sampled);
    // 1. warm-up on throw-away sequences, with prompts as long as the timed ones (llama-bench warms up
    //    with the test itself): the timed prefill then meets no first use of its shapes (scratch
    //    regions sized, cuBLAS plans and kernels loaded for its forwards).
    driver.submit(N, o.warmup_steps, sp, random_ids);
    driver.finish();
    ops.synchronize();
    // 2. timed prefill: every prompt computed (each sequence's first token sampled) before any decode.
    driver.submit(N, G + (sample_routes ? o.route_sample_steps : 0), sp, random_ids);
    auto* profiler = dynamic_cast<ProfilingOps*>(&ops);
    if (profiler) profiler->reset();
    ops.synchronize();
    auto t0 = Clock::now();
    driver.prefill();
    ops.synchronize();
    res.prefill_seconds = seconds_since(t0);
    if (profiler) res.prefill_profile = profiler->rows();
    res.prefill_tokens = B * N;
    sample_device();
    // 3. timed decode.
    const int64_t replays_before = engine.graph_replays();
    const std::optional<MoeReport> moe_before = engine.moe_report();  // synchronizes: before the clock
    const std::vector<std::optional<MoeReport>> ranks_before = group ? rank_reports() : decltype(rank_reports())();
    if (profiler) profiler->reset();
    t0 = Clock::now();
    driver.decode(G);
    ops.synchronize();
    res.decode_seconds = seconds_since(t0);
    if (moe_before) {
      res.moe_cache = true;
      res.moe = engine.moe_report()->total - moe_before->total;
    }
    if (group && moe_before) {
      const std::vector<std::optional<MoeReport>> after = rank_reports();
      for (size_t i = 0; i < after.size(); ++i)
        res.rank_moe.push_back(after[i] && ranks_before[i] ? after[i]->total - ranks_before[i]->total : MoeLayerStats());
    }
    res.decode_steps = G;
    res.graph_steps = engine.graph_replays() - replays_before;
    if (profiler) res.decode_profile = profiler->rows();
    sample_device();
    // 4. routing sample: the requests' last route_sample_steps decode steps.
    if (c.n_expert <= 0) {
      res.experts_source = "dense";
    } else {
      if (sample_routes) {
        routes.reset();
        routes.attach();
        driver.finish();
        routes.detach();
        if (routes.layer_steps() > 0) {
          res.experts_per_layer = routes.mean_distinct();
          res.experts_source = "measured";
        }
      }
      if (res.experts_source.empty()) {  // no routers, no samples, or the hook saw no MoE layer
        res.experts_per_layer = E * (1.0 - std::pow(1.0 - k / E, static_cast<double>(B)));
        res.experts_source = "estimated";
      }
    }
    driver.finish();
    if (o.keep_sampled) res.sampled = driver.sampled();
    res.weight_bytes_per_step = r.dense_bytes + B * (r.embedding_row_bytes + r.ngram_row_bytes) +
                                std::llround(res.experts_per_layer * static_cast<double>(r.expert_bytes_all_layers));
    if (res.decode_steps > 0)
      spdlog::info("bench batch {}: prefill {:.1f} tokens/s, decode {:.1f} tokens/s ({:.3f} ms/step)", B,
                   res.prefill_tokens_per_s(), res.decode_tokens_per_s(), res.ms_per_step());
    else
      spdlog::info("bench batch {}: prefill {:.1f} tokens/s (no decode steps)", B, res.prefill_tokens_per_s());
    r.batches.push_back(res);
  }
  r.peak_host_rss = std::max(rss_before_probe, peak_host_rss());
  r.profiled = dynamic_cast<ProfilingOps*>(&ops) != nullptr;
  if (!cuda) {
    r.device_memory_note = "on the CPU backend weights, KV and buffers are host memory, counted in the peak host RSS";
  } else if (o.device_free_before >= 0) {
    r.device_memory = std::max<int64_t>(0, o.device_free_before - min_free);
    r.device_memory_note = "free device memory before the engine was built minus the lowest free seen after load, "
                           "prefill and decode (cudaMemGetInfo; includes cuBLAS workspaces)";
  } else {
    r.device_memory_note = "not measured (no free-memory reading before load)";
  }
  if (group) {
    r.tensor_parallel = group->size();
    r.expert_parallel = group->experts_split();
    for (int i = 0; i < n_ranks; ++i) {
      BenchRank rk;
      rk.rank = i;
      Engine& e = group->engine(i);
      if (const MoePlan* plan = e.moe_plan()) {
        rk.moe_plan = plan->summary();
        rk.moe_cache_slots = plan->cache.n_slots;
      }
      if (i == 0) rk.device_memory = r.device_memory;
      else if (rank_min_free[static_cast<size_t>(i)] >= 0)
        rk.device_memory = std::max<int64_t>(0, o.rank_device_free_before[static_cast<size_t>(i)] -
                                                    rank_min_free[static_cast<size_t>(i)]);
      r.ranks.push_back(rk);
    }
  }
  return r;
}

}  // namespace

BenchReport run_bench(Engine& engine, const BenchOptions& o) {
  EngineRunner runner(engine);
  return run_bench_on(engine, runner, nullptr, o);
}

BenchReport run_bench(ServingEngine& served, const BenchOptions& o) {
  RankGroup* group = served.group();
  if (!group) return run_bench(served.engine(), o);
  if (dynamic_cast<ProfilingOps*>(&served.engine().ops()))
    fail(ErrorCode::kInvalidArgument, "bench: op profiles time one engine's ops, not a group of {} ranks", group->size());
  return run_bench_on(served.engine(), served.runner(), group, o);
}

}  // namespace ft
