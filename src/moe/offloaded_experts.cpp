#include "moe/offloaded_experts.h"

#include "moe/classed_expert_slots.h"
#include "moe/split_experts.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "backend/cpu/q8_rows.h"
#include "backend/cpu/simd.h"
#include "util/error.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {

OffloadedExperts::OffloadedExperts(Ops& ops, const HostExpertBanks& host, const MoePlan& plan,
                                   const MoeRuntimeOptions& options)
    : ops_(ops), plan_(plan), opt_(options) {
  if (plan.layers.size() != host.size())
    fail(ErrorCode::kInvalidArgument, "moe runtime: the plan has {} layers, the model {}", plan.layers.size(),
         host.size());
  if (opt_.max_tokens < 1 || opt_.n_expert_used < 1)
    fail(ErrorCode::kInvalidArgument, "moe runtime: max_tokens {} and n_expert_used {} must be >= 1", opt_.max_tokens,
         opt_.n_expert_used);
  bool any = false;
  for (size_t l = 0; l < host.size(); ++l) {
    const MoeLayerMode m = plan.layers[l];
    if ((m == MoeLayerMode::kDense) != (host[l].n_expert() == 0))
      fail(ErrorCode::kInvalidArgument, "moe runtime: layer {} is {} in the plan but has {} experts", l,
           m == MoeLayerMode::kDense ? "dense" : "MoE", host[l].n_expert());
    if (m == MoeLayerMode::kResident)
      fail(ErrorCode::kInvalidArgument, "moe runtime: layer {}: resident experts are served by ResidentExperts", l);
    any = any || m != MoeLayerMode::kDense;
  }
  if (!any) fail(ErrorCode::kInvalidArgument, "moe runtime: the model has no routed experts");
  alloc_ = make_bank_allocator(ops);
  const BankFormat format = opt_.bank_format.value_or(ec12_bankable(host) ? BankFormat::kEc12 : BankFormat::kStored);
  banks_ = std::make_unique<ExpertBanks>(host, *alloc_, opt_.bank_threads, opt_.bank_layer_filled,
                                         opt_.source_releases_memory, format, opt_.progress, opt_.host_room);
  opt_.bank_layer_filled = nullptr;  // it may refer to the caller's state
  opt_.progress = nullptr;
  const int64_t pairs = opt_.max_tokens * opt_.n_expert_used;
  if (pairs > INT32_MAX) fail(ErrorCode::kInvalidArgument, "moe runtime: {} routed pairs per step is too many", pairs);
  if (plan.count(MoeLayerMode::kCache) > 0) {
    if (plan.cache.n_slots > INT32_MAX || plan.cache.n_slots < 1)
      fail(ErrorCode::kInvalidArgument, "moe runtime: {} cache slots", plan.cache.n_slots);
    const auto n_slots = static_cast<int32_t>(plan.cache.n_slots), max_pairs = static_cast<int32_t>(pairs);
    // Slots per record size when the plan has the cache layers' classes (the engine's plans); a plan
    // without them (made from a bare budget) gets one pool of the banks' largest records.
    const bool by_class = !plan.cache.classes.empty() && !plan.cache.classes.front().layers.empty();
    slots_ = by_class ? make_classed_expert_slots(ops, *banks_, plan.cache.classes, max_pairs)
                      : make_expert_slots(ops, *banks_, n_slots, max_pairs);
    slot_ids_ = alloc(DType::I32, {pairs});
    cpu_ids_ = alloc(DType::I32, {pairs});
  }
  const bool needs_cpu = plan.count(MoeLayerMode::kCpu) > 0 || plan.strategy == MoeStrategy::kHybrid;
  if (needs_cpu) {
    cpu_ = std::make_unique<CpuExpertExecutor>(opt_.cpu_threads, opt_.cpu_spin_us, opt_.cpu_int8, opt_.cpu_bf16);
    // What the flags change for this model's experts: a form of the activations the CPU has but no
    // expert meets is said to be unused, not "on" (weight_forms asks the CPU too, so it comes after).
    const CpuExpertExecutor::WeightForms forms = CpuExpertExecutor::weight_forms(host);
    spdlog::info("moe: CPU experts on {} threads (of {} physical cores), SIMD {}, int8 activations for Q4_K/Q6_K/MXFP4 {}, "
                 "bf16 activations for BF16 experts {}",
                 cpu_->n_threads(), physical_core_count(), cpu::simd_level(),
                 !opt_.cpu_int8                  ? "off"
                 : !cpu::has_q8_dot(DType::Q4_K) ? "on but unavailable (no AVX-512 VNNI)"
                 : !forms.int8                   ? "unused (no such experts)"
                                                 : "on",
                 !opt_.cpu_bf16          ? "off"
                 : !cpu::has_bf16_dot()  ? "on but unavailable (no AVX-512 BF16)"
                 : !forms.bf16           ? "unused (no such experts)"
                 : cpu_->amx()           ? "on (AMX tiles for an expert with 4 tokens or more)"
                                         : "on");
    int64_t H = 0;
    for (int64_t l = 0; l < banks_->n_layers(); ++l)
      if (banks_->n_expert(l) > 0) H = std::max(H, banks_->layout(l).n_embd);
    xbuf_ = std::make_unique<ExchangeBuffers>(*alloc_, opt_.max_tokens, H, opt_.n_expert_used);
    // The dispatcher polls as long as the executor's workers do (the gap between a step's layers).
    dispatcher_ = std::make_unique<ExchangeDispatcher>(
        *xbuf_, [this](const ExchangeRequest& r) { serve(r); }, opt_.cpu_spin_us);
    exchange_ = make_exchange_device(ops, *xbuf_, *dispatcher_);
  }
  cpu_experts_ = std::vector<std::atomic<int64_t>>(host.size());
  cpu_ns_ = std::vector<std::atomic<int64_t>>(host.size());
  cpu_bytes_ = std::vector<std::atomic<int64_t>>(host.size());
  next_cache_layer_.assign(host.size(), -1);
  for (int32_t l = static_cast<int32_t>(host.size()) - 2, next = -1; l >= 0; --l) {
    if (plan.layers[static_cast<size_t>(l + 1)] == MoeLayerMode::kCache) next = l + 1;
    next_cache_layer_[static_cast<size_t>(l)] = next;
  }
  for (size_t l = 0; l < host.size() && first_cache_layer_ < 0; ++l)
    if (plan.layers[l] == MoeLayerMode::kCache) first_cache_layer_ = static_cast<int32_t>(l);
  choose_prefetch_depth();
  if (slots_) {  // the slots outside the staging regions, over the cache layers' experts
    int64_t experts = 0;
    for (size_t l = 0; l < host.size(); ++l)
      if (plan.layers[l] == MoeLayerMode::kCache) experts += banks_->n_expert(static_cast<int64_t>(l));
    const int64_t outside = slots_->n_slots() - int64_t{slots_->n_regions()} * banks_->max_experts();
    if (experts > 0) uncached_share_ = std::clamp(1.0 - static_cast<double>(outside) / static_cast<double>(experts), 0.0, 1.0);
  }
  if (opt_.preload && slots_) preload_cache();
}

void OffloadedExperts::preload_cache() {
  // The pools: one per slot class, or one over every cache layer; each less its two staging regions
  // (the last slots; the preload's empty victims are the lowest), which the first prefill reclaims.
  const int32_t regions = slots_->n_regions() > 0 ? 2 : 0;
  std::vector<std::pair<std::vector<int64_t>, int64_t>> pools;
  for (const SlotClass& c : plan_.cache.classes)
    if (!c.layers.empty()) pools.emplace_back(c.layers, c.n_slots - regions * c.max_experts);
  if (pools.empty()) {
    std::vector<int64_t> layers;
    for (size_t l = 0; l < plan_.layers.size(); ++l)
      if (plan_.layers[l] == MoeLayerMode::kCache) layers.push_back(static_cast<int64_t>(l));
    pools.emplace_back(layers, plan_.cache.n_slots - regions * banks_->max_experts());
  }
  const int64_t chunk = opt_.max_tokens * opt_.n_expert_used;  // a prefetch's most ids
  std::vector<int32_t> ids(static_cast<size_t>(chunk));
  int64_t loaded = 0;
  for (const auto& [layers, n_slots] : pools) {
    const auto n = static_cast<int64_t>(layers.size());
    for (int64_t i = 0; i < n; ++i) {
      const int64_t l = layers[static_cast<size_t>(i)];
      const int64_t m = std::min<int64_t>(banks_->n_expert(l), n_slots / n + (i < n_slots % n ? 1 : 0));
      for (int64_t first = 0; first < m; first += chunk) {
        const int64_t c = std::min(chunk, m - first);
        for (int64_t j = 0; j < c; ++j) ids[static_cast<size_t>(j)] = static_cast<int32_t>(first + j);
        Tensor dev(slot_ids_.data, DType::I32, {c, 1}, slot_ids_.device);
        ops_.copy(Tensor(ids.data(), DType::I32, {c, 1}), dev);
        slots_->prefetch(static_cast<int32_t>(l), dev, FetchPolicy(-1));
        ops_.synchronize();  // the host ids are reused by the next copy
      }
      loaded += m;
    }
  }
  slots_->finish_prefetches();
  ops_.synchronize();
  spdlog::info("moe: expert cache preloaded with {} experts ({} slots; the two staging regions of prefill left empty)",
               loaded, plan_.cache.n_slots);
}

OffloadedExperts::~OffloadedExperts() {
  if (!exchange_) return;
  try {
    ops_.synchronize();
  } catch (const std::exception& e) {
    spdlog::warn("moe runtime: waiting for queued work at shutdown: {}", e.what());
  }
}

Tensor OffloadedExperts::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor t(nullptr, dtype, shape, ops_.device());
  storage_.push_back(ops_.alloc(t.bytes()));
  t.data = storage_.back().data();
  return t;
}

namespace {

/** The first rows x cols elements of a flat buffer as [rows, cols]. */
Tensor head(const Tensor& flat, int64_t rows, int64_t cols) {
  return Tensor(flat.data, flat.dtype, {rows, cols}, flat.device);
}

}  // namespace

void OffloadedExperts::compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
                               const ActQ8* x_q8) {
  if (layer < 0 || layer >= static_cast<int64_t>(plan_.layers.size()) ||
      plan_.layers[static_cast<size_t>(layer)] == MoeLayerMode::kDense)
    fail(ErrorCode::kInvalidArgument, "expert compute: layer {} has no routed experts", layer);
  const int64_t T = x.rows(), k = ids.cols();
  if (T > opt_.max_tokens)
    fail(ErrorCode::kInvalidArgument, "expert compute: {} tokens exceed the planned {} per step", T, opt_.max_tokens);
  if (ids.ndim != 2 || ids.rows() != T || k != opt_.n_expert_used)
    fail(ErrorCode::kInvalidArgument, "expert compute: ids {} must be [{}, {}]", ids.str(), T, opt_.n_expert_used);
  const PrefetchTargets hints = hints_;
  hints_ = PrefetchTargets();  // hints are for the compute() right after them only
  if (slots_ && slots_->n_regions() > 0 && T >= opt_.stream_min_tokens &&
      plan_.layers[static_cast<size_t>(layer)] == MoeLayerMode::kCache)
    return run_streamed(layer, x, ids, weights, out, x_q8);
  if (plan_.layers[static_cast<size_t>(layer)] == MoeLayerMode::kCpu) {
    exchange_->post(static_cast<int32_t>(layer), x, ids, weights);
    return exchange_->collect(out, false);
  }
  drain_streams();  // admission may pick victims in a region a copy still writes
  FetchPolicy policy = plan_.fetch_policy(static_cast<size_t>(layer));
  const bool shares = !policy.fetches_all();  // hybrid: some misses may go to the CPU
  const bool was_prefetched = prefetched_layer_ == layer;
  prefetched_layer_ = -1;
  // Hybrid with prefetch: the layer's fetches were made ahead (the policy's share, overlapped); what
  // the guess missed runs on the CPU rather than waiting on PCIe.
  if (shares && was_prefetched) policy = FetchPolicy(0);
  Tensor sid = head(slot_ids_, T, k), cid = shares ? head(cpu_ids_, T, k) : Tensor();
  for (int i = 0; i < hints.n; ++i)
    if (hint_ids_[i].rows() != T || hint_ids_[i].cols() != k)
      fail(ErrorCode::kInvalidArgument, "expert compute: predicted ids {} must be [{}, {}]", hint_ids_[i].str(), T, k);
  auto prefetch_next = [&] {
    for (int i = 0; i < hints.n; ++i) {
      const auto target = static_cast<int32_t>(hints.layer[i]);
      slots_->prefetch(target, hint_ids_[i], plan_.fetch_policy(static_cast<size_t>(target)));
      prefetched_layer_ = target;
    }
  };
  // Offload: the next layer's prefetch goes first, so its copies queue right behind this layer's
  // on the side stream and the link does not idle while this layer admits and computes (H200,
  // skew 1.0: 79.6% -> 81.7% of the ceiling). Hybrid: after this layer's own gather (measured when
  // the host still waited once per layer, session 5: starting it first kept the link busy through
  // the exchange copies, 23.6 -> 19.7 tok/s; not measured again since the exchange moved into the
  // step).
  const bool prefetch_first = !shares;
  if (prefetch_first) prefetch_next();
  // Hybrid: the CPU's inputs go to the host right after the admission, so the CPU computes its
  // experts while the GPU gathers and computes its own.
  slots_->admit_routes(static_cast<int32_t>(layer), ids, policy, sid, cid);
  if (shares) exchange_->post(static_cast<int32_t>(layer), x, cid, weights);
  slots_->gather_misses();
  if (!prefetch_first) prefetch_next();
  ops_.moe_experts({false}, x, sid, weights, slots_->slot_bank(static_cast<int32_t>(layer)), out, x_q8);
  if (shares) exchange_->collect(out, true);
}

int32_t OffloadedExperts::stream_cpu_share(int32_t layer, int64_t T, int64_t H) const {
  if (!exchange_) return 0;
  if (opt_.prefill_cpu_share >= 0)
    return static_cast<int32_t>(std::lround(std::min(opt_.prefill_cpu_share, 1.0) * 65536.0));
  const FetchPolicy p = plan_.fetch_policy(static_cast<size_t>(layer));
  if (p.fetches_all() || p.cpu_cost <= 0) return 0;
  const auto E = static_cast<double>(std::max<int64_t>(1, banks_->n_expert(layer)));
  const double m = static_cast<double>(T) * static_cast<double>(opt_.n_expert_used) / E;
  double c = 0.0;  // an expert's CPU time in fetches
  if (cpu_curve_.size() >= 2) {  // the measured curve: the segment holding m, or the last one's slope
    size_t i = 1;
    while (i + 1 < cpu_curve_.size() && static_cast<double>(cpu_curve_[i].first) < m) ++i;
    const auto [n0, t0] = cpu_curve_[i - 1];
    const auto [n1, t1] = cpu_curve_[i];
    const double t = t0 + (t1 - t0) * (m - static_cast<double>(n0)) / static_cast<double>(n1 - n0);
    c = p.cpu_cost / static_cast<double>(kFetchCostUnit) * std::max(t, cpu_curve_[0].second) / cpu_curve_[0].second;
  } else {
    c = (p.cpu_cost + std::max(0.0, m - 1.0) * p.cpu_token_cost) / kFetchCostUnit;
  }
  const double U = std::max(1.0, E * uncached_share_);
  const double o = static_cast<double>(T * H * 4) / static_cast<double>(banks_->record_bytes(layer));
  const double s = std::min(1.0, (U + o) / (U * (1.0 + c)));
  if (s * U * c >= U) return 0;  // the CPU's share would end after the link's whole layer
  return static_cast<int32_t>(std::lround(65536.0 * s));
}

void OffloadedExperts::run_streamed(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                    Tensor out, const ActQ8* x_q8) {
  const auto l = static_cast<int32_t>(layer);
  const int64_t T = x.rows();
  int32_t r = pending_region_;
  if (pending_layer_ != l) {  // the first streamed layer of a step: nothing was prefetched for it
    drain_streams();
    r = take_region();
    region_share_[r] = stream_cpu_share(l, T, x.cols());
    slots_->stream_layer(l, r, region_share_[r]);
  }
  pending_layer_ = -1;
  const int32_t next = next_cache_layer_[static_cast<size_t>(layer)];
  if (next >= 0) {  // the next layer's copy runs while this one computes
    pending_region_ = take_region();
    region_share_[pending_region_] = stream_cpu_share(next, T, x.cols());
    slots_->stream_layer(next, pending_region_, region_share_[pending_region_]);
    pending_layer_ = next;
  }
  if (region_share_[r] == 0) {
    slots_->wait_region(r);
    return ops_.moe_experts({false}, x, ids, weights, slots_->region_bank(l, r), out, x_q8);
  }
  // The CPU's share (issue 37): its routes go to the host before the wait for the region's copy, so
  // the CPU computes them while the link still brings the GPU's.
  const int64_t k = ids.cols();
  Tensor gid = head(slot_ids_, T, k), cid = head(cpu_ids_, T, k);
  slots_->split_streamed(r, ids, gid, cid);
  exchange_->post(l, x, cid, weights);
  slots_->wait_region(r);
  ops_.moe_experts({false}, x, gid, weights, slots_->region_bank(l, r), out, x_q8);
  exchange_->collect(out, true);
}

void OffloadedExperts::drain_streams() {
  if (pending_layer_ < 0) return;
  slots_->wait_region(pending_region_);
  pending_layer_ = -1;
}

int32_t OffloadedExperts::take_region() {
  const int32_t r = region_cursor_;
  region_cursor_ = (region_cursor_ + 1) % slots_->n_regions();
  return r;
}

void OffloadedExperts::set_fetch_policy(const FetchPolicy& policy) {
  if (plan_.count(MoeLayerMode::kCache) == 0)
    fail(ErrorCode::kInvalidArgument, "moe runtime: a fetch policy for a plan without cache layers");
  if (!policy.fetches_all() && !exchange_)
    fail(ErrorCode::kInvalidArgument, "moe runtime: a fetch cap or split needs the CPU executor (the hybrid strategy)");
  for (size_t l = 0; l < plan_.layers.size(); ++l)
    if (plan_.layers[l] == MoeLayerMode::kCache) plan_.fetch_cap[l] = policy.cap;
  plan_.cpu_cost = policy.cpu_cost;
  plan_.cpu_token_cost = policy.cpu_token_cost;
  choose_prefetch_depth();  // fetching every miss prefetches as deep as offload
}

void OffloadedExperts::set_cpu_time_curve(std::vector<std::pair<int64_t, double>> points) {
  for (size_t i = 0; i < points.size(); ++i)
    if ((i == 0 && points[i].first != 1) || (i > 0 && points[i].first <= points[i - 1].first) ||
        !(points[i].second > 0.0))
      fail(ErrorCode::kInvalidArgument, "moe runtime: CPU time curve point {} ({} tokens, {} s) must ascend from 1 token "
           "with a time > 0", i, points[i].first, points[i].second);
  cpu_curve_ = std::move(points);
}

double OffloadedExperts::time_cpu_expert(int64_t n_tokens, int reps) {
  if (!cpu_) fail(ErrorCode::kInvalidArgument, "moe runtime: no CPU expert executor to time");
  if (n_tokens < 1 || n_tokens > opt_.max_tokens || reps < 1)
    fail(ErrorCode::kInvalidArgument, "moe runtime: timing {} tokens x {} runs (at most {} tokens)", n_tokens, reps,
         opt_.max_tokens);
  int64_t layer = -1;
  for (int64_t l = 0; l < banks_->n_layers() && layer < 0; ++l)
    if (banks_->n_expert(l) > 0) layer = l;
  const int64_t H = banks_->layout(layer).n_embd;
  std::vector<float> x(static_cast<size_t>(n_tokens * H)), out(x.size()), w(static_cast<size_t>(n_tokens), 1.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int64_t>(i % 17) - 8) / 16.0f;
  std::vector<int32_t> ids(static_cast<size_t>(n_tokens));
  const Tensor tx(x.data(), DType::F32, {n_tokens, H}), tid(ids.data(), DType::I32, {n_tokens, 1}),
      tw(w.data(), DType::F32, {n_tokens, 1});
  Tensor tout(out.data(), DType::F32, {n_tokens, H});
  double best = 0.0;
  for (int r = 0; r < reps; ++r) {
    // Every token to one expert, a different one each run: a decode step reads its experts from
    // memory, not from the caches the run before filled (the same expert each time measured a
    // 1-token expert at 0.07 ms on the H100 host, ~100 GB/s, and a further token at 50% of it).
    const auto e = static_cast<int32_t>(timed_expert_++ % banks_->n_expert(layer));
    std::fill(ids.begin(), ids.end(), e);
    const auto t0 = std::chrono::steady_clock::now();
    cpu_->run({false}, tx, tid, tw, banks_->bank(layer), tout);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = r == 0 ? s : std::min(best, s);
  }
  return best;
}

void OffloadedExperts::choose_prefetch_depth() {
  depth_ = 0;
  depth_note_.clear();
  if (!opt_.prefetch || !slots_) return;
  // The admissions after a prefetch spare its slots (PrefetchLedger): 2d - 1 admissions at depth d,
  // each of up to max_experts experts, so with fewer than 2d x max_experts slots a miss might find
  // no victim. A cache of every expert of the cache layers never evicts one, so no count of spared
  // slots can leave it short. A step's n cache layers predict at most n - 1 ahead.
  // Each slot class is its own cache: depth d needs 2d x its max_experts slots in every class (or
  // all of its experts).
  std::vector<SlotClass> classes = plan_.cache.classes;
  if (classes.empty() || classes.front().layers.empty()) {
    classes.assign(1, SlotClass{});
    classes[0].max_experts = banks_->max_experts(), classes[0].total_experts = plan_.cache_experts;
    classes[0].n_slots = slots_->n_slots();
  }
  auto holds = [&](int d) {
    for (const SlotClass& c : classes)
      if (c.n_slots < 2 * d * int64_t{c.max_experts} && c.n_slots < c.total_experts) return false;
    return true;
  };
  // The note's count for depth d: the fewest slots over all classes whose split (split_slots, as the
  // plan splits a cache) gives every class 2d x its max_experts or all of its experts; a class's
  // share follows its experts, so a class of few layers may need more than its sum of 2d x.
  auto need = [&](int d) {
    auto enough = [&](const SlotClass& c, int64_t n) {
      return n >= std::min<int64_t>(2 * d * int64_t{c.max_experts}, c.total_experts);
    };
    if (classes.size() == 1) return std::min<int64_t>(2 * d * int64_t{classes[0].max_experts}, classes[0].total_experts);
    int64_t lo = 0, hi = 0;
    for (const SlotClass& c : classes) lo += c.min_slots(), hi += c.total_experts;
    for (int64_t n = lo; n < hi; ++n) {
      const std::vector<int64_t> split = split_slots(classes, n);
      bool ok = true;
      for (size_t c = 0; c < classes.size() && ok; ++c) ok = enough(classes[c], split[c]);
      if (ok) return n;
    }
    return hi;
  };
  const int64_t n_cache = plan_.count(MoeLayerMode::kCache);
  if (!holds(1)) return;
  depth_ = 1;
  if (opt_.prefetch_depth < 2) return;
  // Hybrid: a prefetched layer's own misses go to the CPU and the cap applies to the prefetch; its
  // calibration and gather grid were measured one layer ahead.
  bool shares = false;
  for (size_t l = 0; l < plan_.layers.size(); ++l)
    shares = shares || (plan_.layers[l] == MoeLayerMode::kCache && !plan_.fetch_policy(l).fetches_all());
  if (shares) {
    depth_note_ = "hybrid predicts 1 ahead";
    return;
  }
  const int want = std::min(opt_.prefetch_depth, PrefetchTargets::kMax);
  const int reach = static_cast<int>(std::min<int64_t>(want, std::max<int64_t>(n_cache - 1, 1)));
  for (int d = reach; d >= 2 && depth_ == 1; --d)
    if (holds(d)) depth_ = d;
  // Why the depth is below the one asked for: the cache layers, then the slots (with what the next
  // depth up would need too).
  if (reach < want)
    depth_note_ = fmt::format("--moe-prefetch-depth {}: {} cache layers predict at most {} ahead", want, n_cache, reach);
  if (depth_ < reach) {
    depth_note_ += depth_note_.empty() ? fmt::format("--moe-prefetch-depth {} needs {} slots", want, need(want))
                                       : fmt::format(", {} needs {} slots", reach, need(reach));
    if (depth_ + 1 < reach && need(depth_ + 1) < need(reach))
      depth_note_ += fmt::format(", {} needs {}", depth_ + 1, need(depth_ + 1));
  }
}

PrefetchTargets OffloadedExperts::prefetch_targets(int64_t layer, int64_t n_tokens) const {
  PrefetchTargets t;
  const int depth = depth_;
  if (depth == 0 || layer < 0 || layer >= static_cast<int64_t>(plan_.layers.size()) ||
      plan_.layers[static_cast<size_t>(layer)] != MoeLayerMode::kCache)
    return t;
  if (slots_->n_regions() > 0 && n_tokens >= opt_.stream_min_tokens) return t;  // the same test as compute()
  const int32_t next = next_cache_layer_[static_cast<size_t>(layer)];
  if (next < 0) return t;
  // The first cache layer of a step predicts every layer up to `depth` ahead (no layer before it
  // predicted them); the others the one `depth` ahead.
  int32_t ahead = next;
  for (int d = 1; d <= depth && ahead >= 0; ++d) {
    if (d == depth || layer == first_cache_layer_) t.add(ahead);
    ahead = next_cache_layer_[static_cast<size_t>(ahead)];
  }
  return t;
}

bool OffloadedExperts::prefetches() const {
  for (int64_t l = 0; l < static_cast<int64_t>(plan_.layers.size()); ++l)
    if (prefetch_target(l, 1) >= 0) return true;
  return false;
}

void OffloadedExperts::prefetch(int64_t target, const Tensor& ids) {
  if (target < 0 || target >= static_cast<int64_t>(plan_.layers.size()) ||
      plan_.layers[static_cast<size_t>(target)] != MoeLayerMode::kCache || !slots_)
    fail(ErrorCode::kInvalidArgument, "expert compute: layer {} does not go through the expert cache", target);
  if (hints_.n == PrefetchTargets::kMax)
    fail(ErrorCode::kInvalidArgument, "expert compute: more than {} predictions before one compute()",
         PrefetchTargets::kMax);
  hint_ids_[hints_.n] = ids;
  hints_.add(target);
}

void OffloadedExperts::check() {
  if (slots_) slots_->check();
  if (!exchange_) return;
  ops_.synchronize();  // a step without logits has not waited for its work yet
  exchange_->check();
}

void OffloadedExperts::serve(const ExchangeRequest& r) {
  if (r.layer >= banks_->n_layers() || banks_->n_expert(r.layer) == 0)
    fail(ErrorCode::kInternal, "moe exchange: request for layer {}, which has no routed experts", r.layer);
  const int64_t before = cpu_->experts_computed();
  const auto t0 = std::chrono::steady_clock::now();
  cpu_->run({false}, r.x, r.ids, r.weights, banks_->bank(r.layer), r.out);
  cpu_ns_[static_cast<size_t>(r.layer)] +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  const int64_t experts = cpu_->experts_computed() - before;  // a layer's experts share one layout
  cpu_experts_[static_cast<size_t>(r.layer)] += experts;
  cpu_bytes_[static_cast<size_t>(r.layer)] += experts * banks_->record_bytes(r.layer);
}

std::vector<MoeLayerStats> OffloadedExperts::stats() {
  std::vector<MoeLayerStats> out(plan_.layers.size());
  if (slots_) {
    const std::vector<CacheLayerStats> c = slots_->stats();
    for (size_t l = 0; l < out.size() && l < c.size(); ++l)
      out[l].hits = c[l].hits, out[l].misses = c[l].misses, out[l].bytes = c[l].bytes,
      out[l].prefetched = c[l].prefetched;
  }
  for (size_t l = 0; l < out.size(); ++l) {
    out[l].cpu_experts = cpu_experts_[l].load(std::memory_order_relaxed);
    out[l].cpu_ns = cpu_ns_[l].load(std::memory_order_relaxed);
    out[l].cpu_bytes = cpu_bytes_[l].load(std::memory_order_relaxed);
    if (plan_.layers[l] == MoeLayerMode::kCache) out[l].cpu_misses = out[l].cpu_experts;
  }
  return out;
}

MoeLayerStats operator-(const MoeLayerStats& now, const MoeLayerStats& before) {
  MoeLayerStats d;
  for (int64_t MoeLayerStats::*c : kMoeLayerCounters) d.*c = now.*c - before.*c;
  return d;
}

MoeLayerStats operator+(const MoeLayerStats& a, const MoeLayerStats& b) {
  MoeLayerStats s;
  for (int64_t MoeLayerStats::*c : kMoeLayerCounters) s.*c = a.*c + b.*c;
  return s;
}

MoeLayerStats total_moe_stats(const std::vector<MoeLayerStats>& layers) {
  MoeLayerStats t;
  for (const MoeLayerStats& l : layers) t = t + l;
  return t;
}

std::string format_moe_stats(const std::vector<MoeLayerStats>& now, const std::vector<MoeLayerStats>& before,
                             int64_t steps) {
  if (now.size() != before.size())
    fail(ErrorCode::kInvalidArgument, "moe stats: {} layers now, {} before", now.size(), before.size());
  const MoeLayerStats d = total_moe_stats(now) - total_moe_stats(before);
  const int64_t hits = d.hits, misses = d.misses, bytes = d.bytes;
  const int64_t lookups = d.lookups();
  // No lookups (every layer on the CPU): no hit rate, as /v1/stats gives null.
  const std::string rate =
      lookups > 0 ? fmt::format("{:.1f}%", 100.0 * static_cast<double>(hits) / static_cast<double>(lookups)) : "-";
  return fmt::format("moe: {} steps, hit rate {} ({} hits, {} misses fetched, {} misses on the CPU, {} "
                     "prefetched, {} fetched, {}/step), {} CPU experts ({:.2f} ms/step on the CPU)",
                     steps, rate, hits, misses, d.cpu_misses, d.prefetched, format_bytes(bytes),
                     format_bytes(steps > 0 ? bytes / steps : 0), d.cpu_experts,
                     steps > 0 ? static_cast<double>(d.cpu_ns) / 1e6 / static_cast<double>(steps) : 0.0);
}

std::unique_ptr<ExpertCompute> make_expert_compute(Ops& ops, const HostExpertBanks& host, const MoePlan& plan,
                                                   const MoeRuntimeOptions& options) {
  if (plan.count(MoeLayerMode::kCache) + plan.count(MoeLayerMode::kCpu) == 0)
    return std::make_unique<ResidentExperts>(ops, host, options.progress);
  if (plan.count(MoeLayerMode::kResident) > 0) return std::make_unique<SplitExperts>(ops, host, plan, options);
  return std::make_unique<OffloadedExperts>(ops, host, plan, options);
}

}  // namespace ft
