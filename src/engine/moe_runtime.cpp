#include "engine/moe_runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "moe/cpu_expert_executor.h"
#include "moe/expert_bank.h"
#include "moe/split_experts.h"
#include "moe/thread_pool.h"
#include "util/error.h"
#include "util/log.h"
#include "util/format.h"

namespace ft {

double moe_hit_rate(const MoeLayerStats& s) {
  const int64_t n = s.lookups();
  return n > 0 ? static_cast<double>(s.hits) / static_cast<double>(n) : 0.0;
}

const char* moe_layer_mode_name(MoeLayerMode m) {
  switch (m) {
    case MoeLayerMode::kDense: return "dense";
    case MoeLayerMode::kResident: return "resident";
    case MoeLayerMode::kCache: return "cache";
    case MoeLayerMode::kCpu: return "cpu";
  }
  return "?";
}

MoeRuntime::MoeRuntime(Ops& ops, const Model& model, const MoeRuntimeConfig& config, MoePlan plan,
                       GpuMemoryBudget budget)
    : plan_(std::move(plan)), budget_(std::move(budget)), log_interval_(config.decode_log_interval) {
  // The flags, the limits and the plan were checked once, by EngineOptions::validate and plan_memory.
  const HostExpertBanks& host = model.host_experts();
  const ModelConfig& c = model.config();
  n_expert_used_ = static_cast<int32_t>(c.n_expert_used);
  if (plan_.calibrate_fetch_cap) {
    // Until the engine's start-up calibration (Engine::calibrate_fetch_cap) picks one: half of top-k.
    const int32_t cap = default_fetch_candidate().policy.cap;
    for (size_t l = 0; l < plan_.layers.size(); ++l)
      if (plan_.layers[l] == MoeLayerMode::kCache) plan_.fetch_cap[l] = cap;
    plan_.calibrate_fetch_cap = false;
    plan_.fetch_cap_provisional = calibrate_ = true;
  }
  MoeRuntimeOptions ro;
  ro.max_tokens = config.max_tokens;
  ro.stream_min_tokens = config.stream_min_tokens;
  // auto: on wherever there is a cache; measured on the H200 at skew 0, hybrid with the calibrated
  // cap went 27.2 -> 30.5 tok/s with it (bench/RESULTS.md).
  ro.prefetch = config.moe.prefetch == MoeOptions::Prefetch::kOn ||
                (config.moe.prefetch == MoeOptions::Prefetch::kAuto &&
                 (plan_.strategy == MoeStrategy::kOffload || plan_.strategy == MoeStrategy::kHybrid));
  ro.prefetch_depth = config.moe.prefetch_depth;
  ro.n_expert_used = static_cast<int32_t>(c.n_expert_used);
  ro.cpu_threads = config.cpu_threads;
  ro.cpu_int8 = config.moe.cpu_int8;
  ro.cpu_bf16 = config.moe.cpu_bf16;
  ro.preload = config.moe.preload;
  ro.prefill_cpu_share = config.moe.prefill_cpu_share;
  ro.bank_format = config.moe.bank_format;
  // With a GPU the executor runs on a dispatcher thread (moe/host_exchange.h) while the engine's thread
  // launches and waits on the steps: one core stays with it. All cores for the executor put a 17th
  // busy thread on 16 cores, and a layer waits for its descheduled worker (H200 machine, qwen3-30b-a3b
  // bf16, hybrid at skew 0: 16.2 tok/s with 16 threads, 42.6 with 15).
  if (ro.cpu_threads <= 0 && ops.device() == Device::kCuda) ro.cpu_threads = std::max(1, physical_core_count() - 1);
  // With a GPU, the host cores are the CPU executor's between MoE layers (the GPU runs the rest of each
  // layer), so its workers poll for the next layer's job instead of sleeping: a futex wake-up per
  // layer and worker costs tens of microseconds (ThreadPool). A decode layer arrives every ~0.3-0.9 ms
  // (qwen3 MoE models, hybrid and cpu strategies, H200); workers sleep after 2 ms without one. On the
  // CPU backend the same cores run the rest of the layer, so they must not be held.
  // FT_MOE_CPU_SPIN_US (microseconds, 0 = sleep at once) overrides it, for comparisons.
  ro.cpu_spin_us = ops.device() == Device::kCuda ? 2000 : 0;
  if (const char* e = std::getenv("FT_MOE_CPU_SPIN_US")) {
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (end == e || *end != '\0' || v < 0 || v > 1000000)
      fail(ErrorCode::kInvalidArgument, "FT_MOE_CPU_SPIN_US={}: expected microseconds in 0..1000000", e);
    ro.cpu_spin_us = static_cast<int>(v);
  }
  ro.source_releases_memory = config.release_source && config.source_releases_memory;
  ro.progress = config.progress;
  ro.host_room = config.host_room;
  if (config.release_source)  // each contiguous run of expert matrices at once (a GGUF [E, F, H] tensor)
    ro.bank_layer_filled = [&host, release = config.release_source](int64_t l) {
      const ExpertBank& b = host[static_cast<size_t>(l)];
      std::vector<std::pair<const uint8_t*, int64_t>> runs;
      for (const std::vector<Tensor>* part : {&b.gate, &b.up, &b.down})
        for (const Tensor& t : *part) runs.emplace_back(static_cast<const uint8_t*>(t.data), t.bytes());
      std::sort(runs.begin(), runs.end());
      for (size_t i = 0; i < runs.size();) {
        const uint8_t* begin = runs[i].first;
        const uint8_t* end = begin + runs[i].second;
        for (++i; i < runs.size() && runs[i].first <= end; ++i) end = std::max(end, runs[i].first + runs[i].second);
        release(begin, end - begin);
      }
    };
  experts_ = make_expert_compute(ops, host, plan_, ro);
  offloaded_ = dynamic_cast<OffloadedExperts*>(experts_.get());
  if (auto* split = dynamic_cast<SplitExperts*>(experts_.get())) offloaded_ = &split->offloaded();
  if (offloaded_) logged_ = offloaded_->stats();
  plan_.prefetch = offloaded_ && offloaded_->prefetches();
  plan_.prefetch_depth = plan_.prefetch ? offloaded_->prefetch_depth() : 0;
  if (plan_.prefetch) plan_.prefetch_note = offloaded_->prefetch_depth_note();
  // What runs, so the bench's moe_plan records it: on, and some expert's weights take that path
  // (bf16: the host banks hold BF16; EC12 codes them).
  const CpuExpertExecutor::WeightForms forms = CpuExpertExecutor::weight_forms(host);
  plan_.cpu_int8 = ro.cpu_int8 && forms.int8;
  plan_.cpu_bf16 = ro.cpu_bf16 && forms.bf16;
  if (offloaded_) plan_.bank_format = offloaded_->banks().format();
  if (calibrate_ && offloaded_) {
    // The planner's per-token CPU cost: one expert with 1 and with 16 tokens on this machine's
    // executor (memory-bound at few tokens, so a further token costs a small share of the first).
    const int64_t n = std::min<int64_t>(16, config.max_tokens);
    offloaded_->time_cpu_expert(n, 1);  // wakes the workers and warms the caches
    const double t1 = offloaded_->time_cpu_expert(1, 3), tn = n > 1 ? offloaded_->time_cpu_expert(n, 3) : t1;
    token_share_ = n > 1 && t1 > 0 ? std::clamp((tn / t1 - 1.0) / static_cast<double>(n - 1), 0.0, 1.0) : 0.0;
    // And a prefill's expert (64 tokens), for the share of a streamed layer the CPU takes: AMX tiles
    // make its further tokens far cheaper than a decode batch's.
    const int64_t np = 64;
    const double tp = config.max_tokens >= np && n > 1 ? offloaded_->time_cpu_expert(np, 3) : 0.0;
    if (tp > 0) offloaded_->set_cpu_time_curve({{1, t1}, {n, tn}, {np, tp}});
    spdlog::info("moe: a CPU expert takes {:.3f} ms for 1 token, {:.3f} ms for {} (a further token {:.1f}% of the "
                 "first){}", 1e3 * t1, 1e3 * tn, n, 100.0 * token_share_,
                 tp > 0 ? fmt::format(", {:.3f} ms for {}", 1e3 * tp, np) : std::string());
  }
  if (config.moe.bank_format && !offloaded_)
    spdlog::warn("--moe-bank-format: the {} strategy keeps every expert on the device, so there are no expert banks "
                 "for it to shape", moe_strategy_name(plan_.strategy));
  if (config.moe.prefetch == MoeOptions::Prefetch::kOn && !plan_.prefetch)
    spdlog::warn("--moe-prefetch on: no layer can prefetch in this plan (it needs a cache layer followed by another "
                 "cache layer, and at least 2 x experts-per-layer cache slots)");
  spdlog::info("{}", plan_.summary());
  if (log_interval_ > 0 && !offloaded_)
    spdlog::warn("--decode-log-interval {}: the {} strategy keeps every expert on the device, so there are no "
                 "expert-cache counters to log", log_interval_, moe_strategy_name(plan_.strategy));
  if (ops.device() == Device::kCpu && (plan_.strategy == MoeStrategy::kOffload || plan_.strategy == MoeStrategy::kHybrid))
    spdlog::warn("moe: on the CPU backend the {} strategy emulates a GPU's expert cache in host memory, to test it; "
                 "every expert is already in host memory here, so the cache's copies only add work (auto picks fused "
                 "without --gpu-memory-limit)", plan_.strategy == MoeStrategy::kOffload ? "offload" : "hybrid");
}

std::vector<MoeRuntime::FetchCandidate> MoeRuntime::fetch_candidates() const {
  std::vector<FetchCandidate> out;
  if (!calibrate_ || !offloaded_) return out;
  // Ascending CPU cost: each fetches more than the one before, so ties keep the fewer fetches. At
  // one token a step (every expert one pair) cost c fetches about m * c / (1 + c) of m misses: from
  // ~10% to ~80% of them, the range the fixed caps 1..k covered at top-k 8. Steps of sqrt(2) from
  // 0.125 to 2, where the best split of a uniform route lies: gpt-oss-120b at 24 GiB on the H100
  // (session 42) timed 22.3 / 18.1 / 22.6 ms a step at 0.5 / 1 / 2; qwen3-30b-a3b bf16 (H100,
  // session 46) 20.3 / 23.1 / 26.9 at 0.25 / 0.5 / 0.7, its best at the lowest point then.
  for (double c : {0.125, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 4.0}) {
    FetchPolicy p;
    p.cpu_cost = static_cast<int32_t>(std::lround(c * kFetchCostUnit));
    p.cpu_token_cost = static_cast<int32_t>(std::lround(c * token_share_ * kFetchCostUnit));
    out.push_back({fmt::format("cpu {:g}", c), p});
  }
  // Fetching every miss (offload's policy, and its deeper prefetch): faster where routes repeat
  // enough that the cache hits most of them (H200, qwen3-30b-a3b bf16 at 24 GiB, Zipf 1.0: offload
  // 96.3 tok/s, hybrid 85.0; uniform: offload 29.0, hybrid 48.2).
  if (plan_.offload_candidate) out.push_back({"offload", FetchPolicy(-1)});
  return out;
}

size_t MoeRuntime::choose_fetch_candidate(const std::vector<double>& seconds) {
  if (seconds.empty()) fail(ErrorCode::kInvalidArgument, "fetch calibration: no timings");
  const double fastest = *std::min_element(seconds.begin(), seconds.end());
  for (size_t i = 0; i < seconds.size(); ++i)
    if (seconds[i] <= fastest * (1.0 + kFetchTie)) return i;
  return 0;  // unreachable: the fastest itself qualifies
}

void MoeRuntime::set_fetch_policy(const FetchCandidate& c) {
  if (!offloaded_ || (plan_.strategy != MoeStrategy::kHybrid && plan_.strategy != MoeStrategy::kOffload))
    fail(ErrorCode::kInvalidArgument, "moe: a fetch policy needs the hybrid strategy");
  offloaded_->set_fetch_policy(c.policy);
  for (size_t l = 0; l < plan_.layers.size(); ++l)
    if (plan_.layers[l] == MoeLayerMode::kCache) plan_.fetch_cap[l] = c.policy.cap;
  plan_.cpu_cost = c.policy.cpu_cost;
  plan_.cpu_token_cost = c.policy.cpu_token_cost;
  plan_.strategy = c.policy.fetches_all() ? MoeStrategy::kOffload : MoeStrategy::kHybrid;
  plan_.prefetch = offloaded_->prefetches();
  plan_.prefetch_depth = plan_.prefetch ? offloaded_->prefetch_depth() : 0;
  plan_.prefetch_note = plan_.prefetch ? offloaded_->prefetch_depth_note() : std::string();
  plan_.fetch_cap_provisional = false;
}

void MoeRuntime::begin_calibration() {
  calibrating_ = true;
  if (offloaded_) calibration_start_ = offloaded_->stats();
}

void MoeRuntime::end_calibration() {
  calibrating_ = false;
  decode_steps_ = 0;
  step_times_.clear();
  window_steps_ = {};
  window_batch_ = 0.0;
  if (!offloaded_) return;
  // Only the calibration's steps: the preload before it stays counted (as prefetched).
  baseline_ = offloaded_->stats();
  for (size_t l = 0; l < baseline_.size() && l < calibration_start_.size(); ++l)
    baseline_[l] = baseline_[l] - calibration_start_[l];
  logged_ = counters();
}

std::vector<MoeLayerStats> MoeRuntime::counters() {
  std::vector<MoeLayerStats> st = offloaded_->stats();
  for (size_t l = 0; l < baseline_.size() && l < st.size(); ++l) st[l] = st[l] - baseline_[l];
  return st;
}

void MoeRuntime::wrap_experts(
    const std::function<std::unique_ptr<ExpertCompute>(std::unique_ptr<ExpertCompute>)>& wrap) {
  std::unique_ptr<ExpertCompute> wrapped = wrap(std::move(experts_));
  if (!wrapped) fail(ErrorCode::kInvalidArgument, "MoeRuntime::wrap_experts: the wrapper gave no expert compute");
  experts_ = std::move(wrapped);
}

std::optional<MoeReport> MoeRuntime::report() {
  if (!offloaded_) return std::nullopt;
  const std::vector<MoeLayerStats> st = counters();
  MoeReport r;
  r.strategy = plan_.strategy;
  r.cache_slots = plan_.count(MoeLayerMode::kCache) > 0 ? plan_.cache.n_slots : 0;
  r.slot_bytes = 0;
  if (r.cache_slots > 0) {
    r.slot_classes = plan_.cache.classes;
    for (const SlotClass& c : r.slot_classes) r.slot_bytes = std::max(r.slot_bytes, c.slot_bytes());
    if (r.slot_classes.empty()) r.slot_bytes = budget_.slot_bytes;
  }
  r.prefetch = plan_.prefetch;
  r.prefetch_depth = plan_.prefetch_depth;
  r.cpu_threads = offloaded_->cpu_threads();
  r.bank_format = offloaded_->banks().format();
  for (size_t l = 0; l < plan_.layers.size() && r.fetch_cap < 0; ++l)
    if (plan_.layers[l] == MoeLayerMode::kCache) r.fetch_cap = plan_.fetch_cap[l];
  r.cpu_cost = plan_.cpu_cost;
  r.cpu_token_cost = plan_.cpu_token_cost;
  for (size_t l = 0; l < plan_.layers.size(); ++l)
    if (plan_.layers[l] != MoeLayerMode::kDense) r.layers.push_back({static_cast<int64_t>(l), plan_.layers[l], st[l]});
  r.total = total_moe_stats(st);
  r.calibration = calibration_;
  r.calibration_cached = calibration_cached_;
  r.calibration_file = calibration_file_;
  r.step_time = step_time();
  return r;
}

void MoeRuntime::record_decode_step(int64_t batch, double seconds) {
  if (calibrating_ || batch < 1) return;
  DecodeStepTimes& t = step_times_[batch];
  ++t.steps;
  t.seconds += seconds;
  ++window_steps_.steps;
  window_steps_.seconds += seconds;
  window_batch_ += static_cast<double>(batch);
}

StepTimeReport MoeRuntime::step_time() const {
  StepTimeReport r;
  r.measured = step_times_;
  // The engine has no cost model to predict a step from the counters: it measures no host-to-device
  // bandwidth or GPU time per expert at run time, only the calibration's whole decode steps.
  const char* no_model = "and the engine has no cost model to predict a step from the counters (no measured "
                         "host-to-device bandwidth or GPU time per expert)";
  if (calibration_) {
    const auto& ms = calibration_->ms_per_step;
    const auto it = std::find_if(ms.begin(), ms.end(), [&](const auto& e) { return e.first == calibration_->choice; });
    if (it != ms.end()) {
      r.predicted_ms = it->second;
      r.predicted_batch = 1;  // Engine::time_fetch_candidates decodes one sequence, one token a step
      r.predicted_from = "calibration: " + calibration_->choice;
    } else {
      r.no_prediction = fmt::format("the calibration has no time for its choice '{}'", calibration_->choice);
    }
  } else if (calibrate_) {
    r.no_prediction = fmt::format("no calibration is in use ({}), {}",
                                  no_calibration_.empty() ? "none has run" : no_calibration_, no_model);
  } else if (plan_.strategy == MoeStrategy::kHybrid) {
    r.no_prediction = fmt::format("no calibration runs when the fetch policy is given (--moe-fetch-cap), {}", no_model);
  } else {
    r.no_prediction = fmt::format("no calibration runs for the {} strategy (it times hybrid's fetch policies), {}",
                                  moe_strategy_name(plan_.strategy), no_model);
  }
  return r;
}

void MoeRuntime::set_calibration(FetchCalibration c, bool cached, std::string file) {
  calibration_ = std::move(c);
  calibration_cached_ = cached;
  calibration_file_ = std::move(file);
}

void MoeRuntime::before_step(bool decode) {
  if (!offloaded_ || log_interval_ <= 0 || calibrating_ || decode || decode_steps_ % log_interval_ == 0) return;
  before_ = counters();  // a prefill-only step inside a window (CUDA: a synchronisation, only while logging)
}

void MoeRuntime::after_step(bool decode) {
  if (!offloaded_ || log_interval_ <= 0 || calibrating_) return;
  if (!decode) {  // a prefill-only step stays out of the window it falls in
    if (decode_steps_ % log_interval_ == 0) {
      logged_ = counters();
    } else if (before_.size() == logged_.size()) {
      const std::vector<MoeLayerStats> now = counters();
      for (size_t l = 0; l < logged_.size(); ++l) logged_[l] = logged_[l] + (now[l] - before_[l]);
    }
    before_.clear();
    return;
  }
  if (++decode_steps_ % log_interval_ != 0) return;
  const std::vector<MoeLayerStats> now = counters();
  // The window's decode steps (mixed steps are not timed) against the prediction.
  std::string step = ", no step of only decode tokens to time";
  if (window_steps_.steps > 0) {
    const StepTimeReport p = step_time();
    step = fmt::format(", step {:.2f} ms at batch {:.3g} ({})", window_steps_.mean_ms(),
                       window_batch_ / static_cast<double>(window_steps_.steps),
                       p.predicted_ms ? fmt::format("planned {:.2f} ms at batch {}", *p.predicted_ms, p.predicted_batch)
                                      : std::string("planned: none"));
  }
  window_steps_ = {};
  window_batch_ = 0.0;
  spdlog::info("{}{}", format_moe_stats(now, logged_, log_interval_), step);
  std::string per_layer = "moe per layer (hits/misses/fetched/CPU experts):";
  for (size_t l = 0; l < now.size(); ++l) {
    if (plan_.layers[l] == MoeLayerMode::kDense) continue;
    const MoeLayerStats d = now[l] - logged_[l];
    per_layer += fmt::format(" L{} {}/{}/{}/{}{}", l, d.hits, d.misses, format_bytes(d.bytes), d.cpu_experts,
                             plan_.layers[l] == MoeLayerMode::kCpu ? "(cpu)" : "");
  }
  spdlog::info("{}", per_layer);
  logged_ = now;
}

}  // namespace ft
