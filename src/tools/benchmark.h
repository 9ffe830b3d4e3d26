#pragma once
// The measurements behind `ft bench`: prefill and decode throughput of a loaded Engine per batch
// size, the weight bytes a decode step reads (dense weights + the routed experts actually used)
// and the bandwidth that implies, compared with the device's measured copy bandwidth; peak memory.
//
// Per batch size B (B independent sequences, random token ids, like llama-bench), run as B requests on
// the serving loop (a synchronous EngineService: the scheduler's plans through EngineRunner, sampling on
// the backend), every prompt computed before the first decode step (SchedulerConfig::
// prefill_before_decode) and each decode step fed random ids (GenerationRequest::feed_tokens):
//   1. warm-up: B throw-away sequences (N prompt tokens, then warmup_steps decode steps), released
//      afterwards, so one-time costs (kernel selection, scratch sizing, CUDA-graph capture) stay out;
//   2. prefill: B prompts of N tokens, packed into forwards of at most max_prefill_tokens tokens
//      (one logit row per finished prompt), timed from a synchronized start to a synchronized end;
//   3. decode: G steps of B tokens each (one logit row per sequence, fed random ids), timed the same
//      way; ms per step = time / G, decode tokens/s = B * G / time;
//   4. routing sample: route_sample_steps more decode steps of the same requests with a RouteCounter
//      attached (untimed) give the mean distinct routed experts per MoE layer per step; without router weights, with
//      G = 0 or when the hook saw no MoE layer (a step replayed from a CUDA graph), the
//      uniform-routing expectation E (1 - (1 - k/E)^B) is used instead ("estimated").
// With routed experts behind an expert cache (offload, hybrid, cpu), the counters of the timed decode
// steps only (prefill and warm-up excluded): hit rate, bytes fetched host -> device per step, experts
// the CPU computed per step, and the ceiling those fetches imply: B x (measured pinned host -> device
// copy bandwidth) / (bytes fetched per step) tokens/s.
// Weight bytes per step = every tensor except routed experts and the embedding table (an untied
// embedding is read B rows at a time; a tied one is the LM head and counts whole), plus B embedding
// rows, plus distinct experts x the bytes of one expert summed over MoE layers. KV-cache reads are
// not counted. Achieved bandwidth = those bytes / step time; the fraction compares it with the copy
// bandwidth (2 x bytes / time of a large device-to-device copy, read + write, as DESIGN.md's 4.25 TB/s
// is measured; on the CPU a multithreaded memcpy).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/profiling_ops.h"
#include "engine/engine.h"
#include "engine/serving_engine.h"

namespace ft {

struct BenchOptions {
  int64_t prompt_tokens = 512;          // N (--prompt-tokens)
  int64_t gen_tokens = 128;             // G (--gen-tokens)
  std::vector<int32_t> batches = {1};   // --batch 1,8,32
  int64_t warmup_steps = 3;             // untimed decode steps per batch size (--warmup-steps)
  int64_t route_sample_steps = 4;       // untimed decode steps whose routing is measured
  int64_t max_prefill_tokens = 8192;    // tokens per prefill forward (--max-prefill-tokens)
  int64_t copy_bytes = 0;               // bandwidth-probe copy size (0: 1 GiB on CUDA, 256 MiB on CPU)
  int threads = 0;                      // CPU copy-probe threads (0: all cores)
  uint64_t seed = 0;                    // token ids
  int64_t device_free_before = -1;      // cuda_free_memory(0) before the engine was built (-1: unknown)
  /** A rank group on CUDA: cuda_free_memory(r) of rank r's device before the group was built, index r
   *  (empty: unknown; element 0 is device_free_before's). */
  std::vector<int64_t> rank_device_free_before;
  /** How every step samples its rows on the backend (--temperature, --top-k, --top-p, --min-p;
   *  default greedy); the draws are seeded by `seed`. */
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  /** Keep the ids the timed requests sampled (BenchBatch::sampled): for tests comparing runs. */
  bool keep_sampled = false;
};

/** One batch size's numbers. Rates are 0 when their time is 0. */
struct BenchBatch {
  int32_t batch = 0;
  int64_t prefill_tokens = 0;
  double prefill_seconds = 0;
  int64_t decode_steps = 0;
  int64_t graph_steps = 0;              // timed decode steps replayed from a CUDA graph (the rest ran eagerly)
  double decode_seconds = 0;
  double experts_per_layer = 0;         // mean distinct routed experts per MoE layer per decode step
  std::string experts_source;           // "measured", "estimated" or "dense"
  int64_t weight_bytes_per_step = 0;    // bytes of weights one decode step reads
  /** Per-op time of the timed decode steps when the engine's backend is a ProfilingOps (--profile-ops;
   *  steps then run eagerly, each op bracketed by synchronisations), by total time. */
  std::vector<OpProfileRow> decode_profile;
  std::vector<OpProfileRow> prefill_profile;  // the same for the timed prefill
  /** Expert-cache counters of the timed decode steps (offload, hybrid, cpu strategies). */
  bool moe_cache = false;
  MoeLayerStats moe;  // summed over layers; rank 0's with a rank group
  /** A rank group: each rank's counters (index = rank; moe is rank_moe[0]). Empty for one rank. */
  std::vector<MoeLayerStats> rank_moe;
  /** With BenchOptions::keep_sampled: each timed sequence's sampled ids (its prompt's, then one a decode
   *  and routing-sample step), index = sequence; not in the JSON. */
  std::vector<std::vector<int32_t>> sampled;
  double prefill_tokens_per_s() const { return prefill_seconds > 0 ? prefill_tokens / prefill_seconds : 0; }
  double decode_tokens_per_s() const {
    return decode_seconds > 0 ? static_cast<double>(batch) * decode_steps / decode_seconds : 0;
  }
  double ms_per_step() const { return decode_steps > 0 ? 1e3 * decode_seconds / decode_steps : 0; }
  /** Weight bytes read per second while decoding. */
  double achieved_bandwidth() const {
    return decode_seconds > 0 ? static_cast<double>(weight_bytes_per_step) * decode_steps / decode_seconds : 0;
  }
};

/** One rank of a rank group (ft bench -tp N): its own plan and device memory. */
struct BenchRank {
  int rank = 0;
  std::string moe_plan;         // its MoePlan::summary() ("" for a dense model)
  int64_t moe_cache_slots = 0;  // its expert-cache slots (0: no cache)
  int64_t device_memory = -1;   // bytes used on its device, -1 unknown (as BenchReport::device_memory)
};

struct BenchReport {
  std::string model;                    // checkpoint path (or synthetic:...)
  std::string arch;
  std::string device;                   // "cpu" or "cuda"
  std::string activation_dtype;
  std::string weight_type;              // dtype holding most of the weight bytes (user_type_name: fp8, nvfp4, Q4_K, ...)
  int64_t n_layer = 0, n_expert = 0, n_expert_used = 0;
  int64_t weight_bytes = 0;             // all tensors
  int64_t dense_bytes = 0;              // read every step (LM head included, embedding table excluded)
  int64_t routed_expert_bytes = 0;      // all routed experts
  int64_t expert_bytes_all_layers = 0;  // one expert in every MoE layer
  int64_t embedding_row_bytes = 0;
  int64_t embedding_bytes = 0;          // the token-embedding table (untied; a step reads B rows of it)
  int64_t ngram_table_bytes = 0;        // Qwen4-Exp's hashed n-gram tables (PLE layers; not dense)
  int64_t ngram_row_bytes = 0;          // the n-gram rows one token reads: (ngram_size - 1) x heads_per_ngram a table
  bool embeddings_on_host = false;      // --embed-weights placed it in host memory
  int64_t prompt_tokens = 0, gen_tokens = 0;
  double copy_bandwidth = 0;            // bytes/s (read + write)
  int64_t copy_bytes = 0;               // size of the probe copy
  double h2d_bandwidth = 0;             // bytes/s of a pinned host -> device copy (measured when experts are offloaded)
  double host_read_bandwidth = 0;       // bytes/s host cores read (measured on CUDA when the CPU computes experts)
  int host_read_threads = 0;            // ... on this many threads: the CPU expert executor's
  std::string moe_plan;                 // MoePlan::summary() of the engine (empty: dense model)
  std::string moe_bank_format;          // "ec12" or "stored" (--moe-bank-format's outcome); "" without expert banks
  std::string moe_strategy;             // the plan's resolved --moe-strategy; "" for a dense model
  int64_t moe_cache_slots = 0;          // expert-cache slots (0: no cache)
  int32_t moe_prefetch_depth = 0;       // cache layers prefetched ahead, as in use (0: no prefetch)
  std::string sampling;                 // how the steps sampled: "greedy" or "temperature 0.7, top-p 0.9"
  std::vector<BenchBatch> batches;
  int64_t peak_host_rss = 0;            // bytes (VmHWM)
  int64_t device_memory = -1;           // bytes used on the device, -1 unknown
  bool profiled = false;                // --profile-ops: every op ran between synchronisations (slower)
  std::string device_memory_note;
  /** A rank group (--tensor-parallel-size > 1): every rank's plan and memory, index = rank. The fields
   *  above that describe one engine (moe_plan, moe_strategy, moe_cache_slots, moe_prefetch_depth,
   *  device_memory, each batch's moe and graph_steps, the copy and h2d probes) are rank 0's; the weight
   *  bytes are the whole model's, counted once whichever ranks read them. Empty for one rank. */
  int32_t tensor_parallel = 1;
  bool expert_parallel = false;  // the experts split over the ranks (--expert-parallel on a MoE model)
  std::vector<BenchRank> ranks;
};

/** KV tokens a benchmark keeps free when sizing the expert cache unless --kv-reserve-tokens says
 *  otherwise: a server's default KV cache (min(context, 8192)). */
inline constexpr int64_t kBenchKvReserveTokens = 8192;

/** Engine options the benchmark needs: KV for max(batches) sequences of max(N + G + route samples,
 *  N + warmup_steps) + 1 tokens (whole pages each), max_seqs and max_logit_rows = max(batches), max_step_tokens =
 *  min(max_prefill_tokens, max(batches) * N) but at least max(batches), kv_reserve_tokens =
 *  kBenchKvReserveTokens where it is unset (< 0). Other fields are kept.
 *  Throws ft::Error(kInvalidArgument) for N < 1, G < 0, an empty batch list or a batch < 1. */
void plan_bench_engine(const BenchOptions& options, EngineOptions& eo);

/** Runs the benchmark on `engine` (sized by plan_bench_engine). Throws what Engine::step throws,
 *  kInvalidArgument for options the engine was not sized for. */
BenchReport run_bench(Engine& engine, const BenchOptions& options);

/** Runs the benchmark on what ServingEngine::load built: one engine as run_bench(engine, options);
 *  a rank group through its runner (every step on every rank, rank 0 sampling), timed on rank 0's
 *  thread (its last step of a phase ends after the ranks' last collective), the report's
 *  tensor_parallel, expert_parallel, ranks and each batch's rank_moe filled. Throws as run_bench(engine)
 *  does, and kInvalidArgument for a group whose rank 0 backend is a ProfilingOps (each rank's ops
 *  would have to be timed). */
BenchReport run_bench(ServingEngine& served, const BenchOptions& options);

/** Copy bandwidth of `ops`' device in bytes/s: 2 x bytes per copy of `bytes` (read + write), best of
 *  a few timed copies after a warm-up. CPU: memcpy split over `threads` threads (0: all cores).
 *  Throws kOutOfMemory when the buffers cannot be allocated. */
double measure_copy_bandwidth(Ops& ops, int64_t bytes, int threads);

/** Bytes/s of a `bytes` copy from pinned host memory to `ops`' device (the expert banks' path), best
 *  of a few after a warm-up; 0 on the CPU backend. Throws kOutOfMemory when the buffers cannot be
 *  allocated or pinned. */
double measure_h2d_bandwidth(Ops& ops, int64_t bytes);

/** Bytes/s that `threads` host threads read from a `bytes` buffer of host memory (each a slice,
 *  best of a few passes after a warm-up): the bound of the CPU expert executor and, shared with it,
 *  of the host -> device link's reads. Make `bytes` much larger than the last-level cache (the
 *  H200 machine's: 300 MiB). Throws kInvalidArgument for bytes < 1 MiB or threads < 1,
 *  kOutOfMemory when the buffer cannot be allocated. */
double measure_host_read_bandwidth(int64_t bytes, int threads);

/** Tokens/s a batch's decode allows when every byte it reads from host memory per step (copied into
 *  the expert cache, and read by the CPU expert executor) moves at the measured host read bandwidth:
 *  batch x host_read_bandwidth / ((fetched + CPU-read bytes) / step). The cpu and hybrid
 *  strategies' bound: both paths read the same host memory. 0 when the CPU read nothing, the
 *  bandwidth was not measured or there are no decode steps. */
double host_memory_ceiling(const BenchReport& r, const BenchBatch& b);

/** Peak resident set of this process in bytes (VmHWM of /proc/self/status; 0 when unknown). */
int64_t peak_host_rss();

/** Restarts the peak at the current resident set (Linux /proc/self/clear_refs "5"; no-op elsewhere). */
void reset_peak_host_rss();

/** The report as one JSON object. Keys: model, arch, device, activation_dtype, weight_type, n_layer,
 *  n_expert, n_expert_used, weight_bytes = dense_bytes + embedding_bytes + ngram_table_bytes + routed_expert_bytes,
 *  embeddings ("host" or "device": where --embed-weights placed the table), prompt_tokens,
 *  gen_tokens, copy_bandwidth_gbs, copy_bytes, h2d_bandwidth_gbs (null unless measured),
 *  host_read_bandwidth_gbs and host_read_threads (null unless measured), moe_plan (the
 *  MoE placement: strategy, cache slots, CPU layers, fetch cap; "" for a dense model), moe_bank_format
 *  ("ec12" or "stored"; null without expert banks: fused or dense), moe_strategy (resolved; null for
 *  a dense model), moe_cache_slots (0: no cache), moe_prefetch_depth (in use; 0: none), peak_host_rss_bytes, profiled, device_memory_bytes (null when
 *  unknown), device_memory_note, results: [{batch, prefill_tokens, prefill_s, prefill_tokens_per_s,
 *  decode_steps, graph_steps, decode_s, decode_tokens_per_s, ms_per_step, experts_per_layer, experts_source,
 *  weight_bytes_per_step, achieved_gbs, bandwidth_fraction, moe_cache (only with an expert cache:
 *  {hits, misses, cpu_misses (hybrid: misses computed on the CPU), hit_rate = hits / (hits + misses +
 *  cpu_misses) (null without lookups), fetched_bytes_per_step, cpu_experts_per_step, prefetched_per_step,
 *  cpu_ms_per_step (the CPU expert executor's working time), cpu_bytes_per_step (expert bytes it read),
 *  ceiling_tokens_per_s (null without a host -> device link, without fetches or without decode steps),
 *  host_ceiling_tokens_per_s (host_memory_ceiling; null where that is 0);
 *  the per-step fields are null without decode steps}),
 *  decode_profile: [{op, calls_per_step,
 *  us_per_step}] and prefill_profile: [{op, calls, us}] (only when profiled)}]. With a rank group only:
 *  ranks: {tensor_parallel, expert_parallel, note (which figures are rank 0's), per_rank: [{rank, moe_plan,
 *  moe_cache_slots, device_memory_bytes (null unknown)}]} and each moe_cache's ranks: [{rank, hits, misses,
 *  cpu_misses, hit_rate, fetched_bytes_per_step, cpu_experts_per_step}]. GB = 1e9 bytes. */
nlohmann::json bench_json(const BenchReport& report);

/** The report as a human-readable table (several lines, ending in a newline). */
std::string bench_table(const BenchReport& report);

}  // namespace ft
