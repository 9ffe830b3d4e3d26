#include "moe/moe_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "util/error.h"
#include "util/format.h"

namespace ft {

const char* moe_strategy_name(MoeStrategy s) {
  switch (s) {
    case MoeStrategy::kAuto: return "auto";
    case MoeStrategy::kFused: return "fused";
    case MoeStrategy::kOffload: return "offload";
    case MoeStrategy::kHybrid: return "hybrid";
    case MoeStrategy::kCpu: return "cpu";
  }
  return "?";
}

MoeStrategy parse_moe_strategy(std::string_view s) {
  for (MoeStrategy m : {MoeStrategy::kAuto, MoeStrategy::kFused, MoeStrategy::kOffload, MoeStrategy::kHybrid,
                        MoeStrategy::kCpu})
    if (s == moe_strategy_name(m)) return m;
  fail(ErrorCode::kInvalidArgument, "--moe-strategy {}: expected auto, fused, offload, hybrid or cpu", s);
}

namespace {

[[noreturn]] void bad_cpu_layers(const std::string& spec, const std::string& why) {
  fail(ErrorCode::kInvalidArgument, "--moe-cpu-layers {}: {}", spec, why);
}

/** A whole number in s, or throws. */
int64_t parse_int(const std::string& spec, const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
    bad_cpu_layers(spec, fmt::format("'{}' is not a layer number (expected N, a fraction like 0.25, or a list like "
                                     "0,3,8-11)", s));
  if (s.size() > 9) bad_cpu_layers(spec, fmt::format("'{}' is too large", s));
  return std::stoll(s);
}

/** Sorted layer numbers written as ranges: "0-3,5". */
std::string layer_ranges(const std::vector<int64_t>& layers) {
  std::string s;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += j > i ? fmt::format("{}-{}", layers[i], layers[j]) : fmt::to_string(layers[i]);
    i = j + 1;
  }
  return s;
}

/** "layer 3" or "layers 1-2,5". */
std::string layers_named(const std::vector<int64_t>& layers) {
  return (layers.size() == 1 ? "layer " : "layers ") + layer_ranges(layers);
}

}  // namespace

std::string host_limit_gib(int64_t bytes) {
  const double gib = static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30);
  if (gib <= 0) return "0";
  // Three significant digits, rounded up: the value given back holds `bytes`.
  const int decimals = std::max(0, 2 - static_cast<int>(std::floor(std::log10(gib))));
  const double scale = std::pow(10.0, decimals);
  return fmt::format("{:.{}f}", std::ceil(gib * scale - 1e-9) / scale, decimals);
}

std::vector<int64_t> parse_moe_cpu_layers(const std::string& spec, const std::vector<int64_t>& moe_layers) {
  const int64_t n_moe = static_cast<int64_t>(moe_layers.size());
  if (spec.empty()) return {};
  auto first = [&](int64_t n) { return std::vector<int64_t>(moe_layers.begin(), moe_layers.begin() + n); };
  if (spec.find_first_of(",-") == std::string::npos) {
    if (spec.find('.') != std::string::npos) {  // FRACTION
      char* end = nullptr;
      const double f = std::strtod(spec.c_str(), &end);
      if (end != spec.c_str() + spec.size() || !(f >= 0.0 && f <= 1.0))
        bad_cpu_layers(spec, "a fraction must be a number in [0, 1]");
      return first(static_cast<int64_t>(std::lround(f * static_cast<double>(n_moe))));
    }
    const int64_t n = parse_int(spec, spec);  // N
    if (n > n_moe) bad_cpu_layers(spec, fmt::format("the model has only {} MoE layers (every expert on the CPU: "
                                                         "--moe-strategy cpu)", n_moe));
    return first(n);
  }
  std::vector<int64_t> out;
  size_t i = 0;
  while (i < spec.size()) {  // LIST
    size_t j = spec.find(',', i);
    if (j == std::string::npos) j = spec.size();
    const std::string item = spec.substr(i, j - i);
    i = j + 1;
    if (item.empty()) bad_cpu_layers(spec, "empty list entry");  // a trailing comma ends the loop first
    const size_t dash = item.find('-');
    if (dash == 0 || dash + 1 == item.size() || item.find('-', dash + 1) != std::string::npos)
      bad_cpu_layers(spec, fmt::format("'{}' is not a layer number or a range A-B (layers are numbered from 0)", item));
    const int64_t lo = parse_int(spec, item.substr(0, dash));
    const int64_t hi = dash == std::string::npos ? lo : parse_int(spec, item.substr(dash + 1));
    if (hi < lo) bad_cpu_layers(spec, fmt::format("range {} is empty", item));
    for (int64_t l = lo; l <= hi; ++l) {
      if (!std::binary_search(moe_layers.begin(), moe_layers.end(), l))
        bad_cpu_layers(spec, fmt::format("layer {} is not one of the model's MoE layers ({})", l,
                                         layer_ranges(moe_layers)));
      out.push_back(l);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t MoePlan::count(MoeLayerMode mode) const {
  return std::count(layers.begin(), layers.end(), mode);
}

std::string MoePlan::summary() const {
  std::string s = fmt::format("moe: strategy {}", moe_strategy_name(strategy));
  if (cache.n_slots > 0)
    s += fmt::format(", expert cache {} slots ({})", cache.n_slots, format_bytes(cache.pool_bytes));
  const int64_t n_cpu = count(MoeLayerMode::kCpu), n_moe = static_cast<int64_t>(layers.size()) - count(MoeLayerMode::kDense);
  if (n_cpu > 0) {
    s += fmt::format(", {} of {} MoE layers on the CPU", n_cpu, n_moe);
    if (n_cpu < n_moe) {  // which ones, in --moe-cpu-layers' list syntax ("1-2,7")
      std::vector<int64_t> cpu;
      for (size_t l = 0; l < layers.size(); ++l)
        if (layers[l] == MoeLayerMode::kCpu) cpu.push_back(static_cast<int64_t>(l));
      s += (cpu.size() == 1 ? " (layer " : " (layers ") + layer_ranges(cpu) + ")";
    }
  }
  if (strategy == MoeStrategy::kHybrid && count(MoeLayerMode::kCache) > 0) {  // not when every layer is a CPU one
    int32_t cap = -1;
    for (size_t l = 0; l < layers.size(); ++l)
      if (layers[l] == MoeLayerMode::kCache) cap = fetch_cap[l];
    if (calibrate_fetch_cap)
      s += offload_candidate ? ", misses split between PCIe and the CPU: calibrating (offload one of the candidates)"
                             : ", misses split between PCIe and the CPU: calibrating";
    else if (cpu_cost > 0)
      s += fmt::format(", misses split between PCIe and the CPU by cost (an expert on the CPU {:.3g} fetches, "
                       "+{:.3g} a further token{})", static_cast<double>(cpu_cost) / kFetchCostUnit,
                       static_cast<double>(cpu_token_cost) / kFetchCostUnit,
                       cap >= 0 ? fmt::format(", at most {} fetched", cap) : std::string());
    else
      s += fmt::format(", fetch cap {} per layer", cap);
    if (fetch_cap_provisional) s += " until the start-up calibration picks the split";
  }
  if (prefetch) s += prefetch_depth >= 2 ? fmt::format(", prefetch {} cache layers ahead", prefetch_depth)
                                         : std::string(", next-layer prefetch");
  if (prefetch && !prefetch_note.empty()) s += " (" + prefetch_note + ")";
  if (cpu_int8 && (n_cpu > 0 || strategy == MoeStrategy::kHybrid)) s += ", CPU int8 activations for Q4_K/Q6_K/MXFP4";
  if (cpu_bf16 && (n_cpu > 0 || strategy == MoeStrategy::kHybrid)) s += ", CPU bf16 activations for BF16 experts";
  if (bank_format == BankFormat::kEc12) s += ", EC12 expert banks (BF16 in 12 bits)";
  if (const int64_t n_res = count(MoeLayerMode::kResident); n_res > 0 && gpu_bank_bytes > 0) {  // host memory forced them
    std::vector<int64_t> res;
    for (size_t l = 0; l < layers.size(); ++l)
      if (layers[l] == MoeLayerMode::kResident) res.push_back(static_cast<int64_t>(l));
    s += fmt::format(", {} of {} MoE layers resident on the device ({} {}, {}: host memory holds {} of banks, {} kept",
                     n_res, n_moe, res.size() == 1 ? "layer" : "layers", layer_ranges(res), format_bytes(gpu_bank_bytes),
                     format_bytes(host_bank_limit), format_bytes(host_bank_bytes));
    if (n_res == n_moe) {  // every layer: the strategy asked for became fused
      s += fmt::format("; every MoE layer runs fused, host memory holding less than one layer's banks ({}: "
                       "--host-memory-limit {} or more keeps one)", format_bytes(least_layer_bytes),
                       host_limit_gib(least_layer_bytes));
      if (!unused_flags.empty()) s += "; " + unused_flags + " do not apply";
    }
    s += ")";
  }
  if (!cache.note.empty()) s += " (" + cache.note + ")";
  return s;
}

BankSplit split_banks(const std::vector<int64_t>& layer_bytes, const std::vector<bool>& movable, int64_t host_limit,
                      int64_t gpu_room, const std::string& host_source, const std::string& fits) {
  if (layer_bytes.size() != movable.size())
    fail(ErrorCode::kInvalidArgument, "bank split: {} layer sizes, {} movable flags", layer_bytes.size(), movable.size());
  BankSplit s;
  for (int64_t b : layer_bytes) s.host_bytes += b;
  if (host_limit < 0 || s.host_bytes <= host_limit) return s;
  const int64_t total = s.host_bytes;
  for (size_t i = layer_bytes.size(); i-- > 0 && s.host_bytes > host_limit;) {
    if (!movable[i] || layer_bytes[i] <= 0) continue;
    s.gpu_layers.push_back(static_cast<int64_t>(i));
    s.gpu_bytes += layer_bytes[i];
    s.host_bytes -= layer_bytes[i];
  }
  std::reverse(s.gpu_layers.begin(), s.gpu_layers.end());
  const std::string src = host_source.empty() ? std::string() : " (" + host_source + ")";
  if (s.host_bytes > host_limit)
    fail(ErrorCode::kOutOfMemory,
         "expert banks: {} of routed experts need host memory, which holds {}{}; even with every layer that may move "
         "resident on the device ({}), {} stay in host memory (--moe-cpu-layers' layers need their banks). Raise "
         "--host-memory-limit to at least {} or list fewer --moe-cpu-layers",
         format_bytes(total), format_bytes(host_limit), src, format_bytes(s.gpu_bytes), format_bytes(s.host_bytes),
         host_limit_gib(s.host_bytes));
  const int64_t room = std::max<int64_t>(gpu_room, 0);
  if (s.gpu_bytes > room) {
    std::string host_fit = fits;
    if (host_fit.empty()) {
      // The least host limit whose split fits: layers leave in the order above while they fit the room.
      int64_t moved = 0, least = total;
      for (size_t i = layer_bytes.size(); i-- > 0;) {
        if (!movable[i] || layer_bytes[i] <= 0) continue;
        if (moved + layer_bytes[i] > room) break;
        moved += layer_bytes[i];
        least = total - moved;
      }
      host_fit = fmt::format("host memory of {} (--host-memory-limit {}) with this device budget, or ",
                             format_bytes(least), host_limit_gib(least));
    }
    fail(ErrorCode::kOutOfMemory,
         "expert banks do not fit host or device memory: {} of routed experts; host memory holds {}{}, so {} of {} "
         "must be resident on the device, which has {} left after the resident weights, buffers and KV ({} "
         "missing). What would fit: {}{} more device memory (--gpu-memory-limit, --kv-reserve-tokens), or a smaller "
         "weight type",
         format_bytes(total), format_bytes(host_limit), src, format_bytes(s.gpu_bytes), layers_named(s.gpu_layers),
         format_bytes(room), format_bytes(s.gpu_bytes - room), host_fit, format_bytes(s.gpu_bytes - room));
  }
  return s;
}

namespace {

/** least_host's answer when no host memory makes the plan fit the device budget. */
constexpr int64_t kNoHostFits = -2;

MoePlan plan_moe_impl(const MoeOptions& o, const std::vector<int32_t>& experts_per_layer, GpuMemoryBudget budget,
                      const std::vector<int64_t>& bank_bytes, bool advise);

/** The flags of `o` that only an expert cache or CPU layers read, as given. */
std::string cache_flags_given(const MoeOptions& o) {
  std::vector<std::string> f;
  if (o.strategy != MoeStrategy::kAuto && o.strategy != MoeStrategy::kFused)
    f.push_back(fmt::format("--moe-strategy {}", moe_strategy_name(o.strategy)));
  if (o.cache.mode == CacheSizeMode::kSlots) f.push_back(fmt::format("--moe-cache-slots {}", o.cache.slots));
  if (o.cache.mode == CacheSizeMode::kRate) f.push_back(fmt::format("--moe-cache-rate {:g}", o.cache.rate));
  if (o.fetch_cap >= 0) f.push_back(fmt::format("--moe-fetch-cap {}", o.fetch_cap));
  if (o.cpu_cost > 0) f.push_back(fmt::format("--moe-cpu-cost {}", o.cpu_cost));
  if (o.prefetch == MoeOptions::Prefetch::kOn) f.push_back("--moe-prefetch on");
  if (o.prefetch_depth_given) f.push_back(fmt::format("--moe-prefetch-depth {}", o.prefetch_depth));
  std::string s;
  for (size_t i = 0; i < f.size(); ++i) s += (i == 0 ? "" : i + 1 == f.size() ? " and " : ", ") + f[i];
  return s;
}

/** The least host limit (MoeOptions::host_bank_limit) for which plan_moe with `o` fits `budget`,
 *  tried at each step of the bank split (`lb`, `movable`: plan_moe's), least first; with `need_cpu`,
 *  only a plan that computes some layer on the CPU counts. kNoHostFits: none. */
int64_t least_host(const MoeOptions& o, const std::vector<int32_t>& experts_per_layer, const GpuMemoryBudget& budget,
                   const std::vector<int64_t>& bank_bytes, const std::vector<int64_t>& lb,
                   const std::vector<bool>& movable, bool need_cpu) {
  std::vector<int64_t> limits;  // host limits at which split_banks moves one more layer, most first
  int64_t h = 0;
  for (int64_t b : lb) h += b;
  limits.push_back(h);
  for (size_t i = lb.size(); i-- > 0;)
    if (movable[i] && lb[i] > 0) limits.push_back(h -= lb[i]);
  for (size_t k = limits.size(); k-- > 0;) {
    MoeOptions t = o;
    t.host_bank_limit = limits[k];
    try {
      const MoePlan p = plan_moe_impl(t, experts_per_layer, budget, bank_bytes, false);
      if (!need_cpu || p.count(MoeLayerMode::kCpu) > 0) return limits[k];
    } catch (const Error&) {
    }
  }
  return kNoHostFits;
}

/** What a refusal with host memory bounding the banks advises: the least host limit for which the
 *  plan fits this budget and, for a strategy other than cpu, the least for which --moe-strategy cpu
 *  fits (kNoHostFits: none). */
struct HostAdvice {
  int64_t least_host = kNoHostFits;
  int64_t least_host_cpu = kNoHostFits;
};

HostAdvice host_advice(const MoeOptions& o, const std::vector<int32_t>& experts_per_layer, const GpuMemoryBudget& budget,
                       const std::vector<int64_t>& bank_bytes, const std::vector<int64_t>& lb,
                       const std::vector<bool>& movable) {
  HostAdvice a;
  if (o.host_bank_limit >= 0) a.least_host = least_host(o, experts_per_layer, budget, bank_bytes, lb, movable, false);
  if (o.strategy != MoeStrategy::kCpu) {
    MoeOptions c = o;
    c.strategy = MoeStrategy::kCpu;
    c.cpu_layers.clear();
    c.cache = {};
    c.fetch_cap = -1, c.cpu_cost = 0, c.cpu_token_cost = 0;
    c.prefetch = MoeOptions::Prefetch::kAuto, c.prefetch_depth_given = false;
    std::vector<bool> all(lb.size());
    for (size_t i = 0; i < lb.size(); ++i) all[i] = lb[i] > 0;
    a.least_host_cpu = least_host(c, experts_per_layer, budget, bank_bytes, lb, all, true);
  }
  return a;
}

/** "What would fit" for a bank split under strategy `s_used` that does not fit, from `a`. */
std::string what_fits(const HostAdvice& a, MoeStrategy s_used) {
  std::string s = a.least_host == kNoHostFits
                      ? fmt::format("no host memory makes {} fit this device budget; ", moe_strategy_name(s_used))
                      : fmt::format("host memory of {} (--host-memory-limit {}) with this device budget, or ",
                                    format_bytes(a.least_host), host_limit_gib(a.least_host));
  if (a.least_host_cpu != kNoHostFits)
    s += fmt::format("--moe-strategy cpu with host memory of {} (--host-memory-limit {}), or ",
                     format_bytes(a.least_host_cpu), host_limit_gib(a.least_host_cpu));
  return s;
}

}  // namespace

MoePlan plan_moe(const MoeOptions& o, const std::vector<int32_t>& experts_per_layer, GpuMemoryBudget budget,
                 const std::vector<int64_t>& bank_bytes) {
  return plan_moe_impl(o, experts_per_layer, std::move(budget), bank_bytes, true);
}

namespace {

MoePlan plan_moe_impl(const MoeOptions& o, const std::vector<int32_t>& experts_per_layer, GpuMemoryBudget budget,
                      const std::vector<int64_t>& bank_bytes, bool advise) {
  const GpuMemoryBudget given = budget;
  std::vector<int64_t> moe_layers;
  int32_t max_e = 0;
  int64_t total = 0;
  for (size_t l = 0; l < experts_per_layer.size(); ++l) {
    if (experts_per_layer[l] < 0)
      fail(ErrorCode::kInvalidArgument, "moe plan: layer {} has {} experts", l, experts_per_layer[l]);
    if (experts_per_layer[l] == 0) continue;
    moe_layers.push_back(static_cast<int64_t>(l));
    max_e = std::max(max_e, experts_per_layer[l]);
    total += experts_per_layer[l];
  }
  MoePlan p;
  p.layers.assign(experts_per_layer.size(), MoeLayerMode::kDense);
  p.fetch_cap.assign(experts_per_layer.size(), -1);
  if (moe_layers.empty()) {
    if (o.strategy != MoeStrategy::kAuto && o.strategy != MoeStrategy::kFused)
      fail(ErrorCode::kInvalidArgument, "--moe-strategy {}: the model has no routed experts", moe_strategy_name(o.strategy));
    const char* flag = o.cache.mode == CacheSizeMode::kSlots  ? "--moe-cache-slots"
                       : o.cache.mode == CacheSizeMode::kRate ? "--moe-cache-rate"
                       : !o.cpu_layers.empty()                ? "--moe-cpu-layers"
                       : o.fetch_cap >= 0                     ? "--moe-fetch-cap"
                       : o.prefetch == MoeOptions::Prefetch::kOn ? "--moe-prefetch on"
                       : o.prefetch_depth_given                  ? "--moe-prefetch-depth"
                                                                 : nullptr;
    if (flag) fail(ErrorCode::kInvalidArgument, "{}: the model has no routed experts", flag);
    return p;
  }
  budget.experts_per_layer = max_e;
  budget.total_experts = total;
  const std::vector<int64_t> cpu_layers = parse_moe_cpu_layers(o.cpu_layers, moe_layers);
  const int64_t kv = budget.kv_bytes_per_token * budget.kv_reserve_tokens;
  const int64_t avail = budget.gpu_memory_limit - budget.resident_bytes - kv;
  const bool fits = avail >= budget.expert_bytes;

  MoeStrategy s = o.strategy;
  // Auto takes fused when every expert fits, unless a flag asked for what only an expert cache has
  // (CPU layers, a cache size, prefetch on, a prefetch depth): then the user meant offload.
  const bool wants_cache = !cpu_layers.empty() || o.cache.mode != CacheSizeMode::kAuto ||
                           o.prefetch == MoeOptions::Prefetch::kOn || o.prefetch_depth_given;
  if (s == MoeStrategy::kAuto)
    s = fits && !wants_cache ? MoeStrategy::kFused : o.auto_planner ? MoeStrategy::kHybrid : MoeStrategy::kOffload;
  p.offload_candidate = o.strategy == MoeStrategy::kAuto && s == MoeStrategy::kHybrid && o.fetch_cap < 0 && o.cpu_cost <= 0;
  p.strategy = s;
  if (!cpu_layers.empty() && (s == MoeStrategy::kFused || s == MoeStrategy::kCpu))
    fail(ErrorCode::kInvalidArgument, "--moe-cpu-layers needs --moe-strategy offload or hybrid (not {})",
         moe_strategy_name(s));
  if (avail < 0) {
    const int64_t room = budget.gpu_memory_limit - budget.resident_bytes;
    const std::string fit =
        room > 0 && budget.kv_bytes_per_token > 0
            ? fmt::format(" (about {} KV tokens fit beside them; --kv-reserve-tokens defaults to --kv-tokens)",
                          room / budget.kv_bytes_per_token)
            : std::string(" (the resident weights alone do not fit)");
    fail(ErrorCode::kOutOfMemory, "--gpu-memory-limit {} cannot hold {} of resident weights and buffers (dense weights, "
         "activations and workspaces for the largest batch) and {} of KV for "
         "--kv-reserve-tokens {}: {} missing. Raise --gpu-memory-limit or lower --kv-reserve-tokens{}",
         format_bytes(budget.gpu_memory_limit), format_bytes(budget.resident_bytes), format_bytes(kv),
         budget.kv_reserve_tokens, format_bytes(-avail), fit);
  }
  if (s == MoeStrategy::kFused && !fits)
    fail(ErrorCode::kOutOfMemory, "--moe-strategy fused needs {} for the routed experts, but --gpu-memory-limit {} "
         "leaves {} after the resident weights, buffers and KV ({} missing). Use --moe-strategy offload (or auto)",
         format_bytes(budget.expert_bytes), format_bytes(budget.gpu_memory_limit), format_bytes(avail),
         format_bytes(budget.expert_bytes - avail));
  const MoeLayerMode mode = s == MoeStrategy::kFused ? MoeLayerMode::kResident
                            : s == MoeStrategy::kCpu ? MoeLayerMode::kCpu
                                                     : MoeLayerMode::kCache;
  for (int64_t l : moe_layers) p.layers[static_cast<size_t>(l)] = mode;
  for (int64_t l : cpu_layers) p.layers[static_cast<size_t>(l)] = MoeLayerMode::kCpu;
  p.host_bank_limit = o.host_bank_limit;
  if (s != MoeStrategy::kFused) {
    if (!bank_bytes.empty() && bank_bytes.size() != experts_per_layer.size())
      fail(ErrorCode::kInvalidArgument, "moe plan: {} layer sizes for {} layers", bank_bytes.size(),
           experts_per_layer.size());
    std::vector<int64_t> lb(experts_per_layer.size(), 0);
    std::vector<bool> movable(experts_per_layer.size(), false);
    for (int64_t l : moe_layers) {
      const auto i = static_cast<size_t>(l);
      lb[i] = !bank_bytes.empty() ? bank_bytes[i] : budget.expert_bytes * experts_per_layer[i] / total;
      movable[i] = p.layers[i] != MoeLayerMode::kCpu || s == MoeStrategy::kCpu;
    }
    BankSplit split;
    try {
      split = split_banks(lb, movable, o.host_bank_limit, avail, o.host_limit_source);
    } catch (const Error& e) {
      if (!advise || e.code() != ErrorCode::kOutOfMemory) throw;
      // Throws again, with the least host memory for which the whole plan (its cache too) fits.
      split_banks(lb, movable, o.host_bank_limit, avail, o.host_limit_source,
                  what_fits(host_advice(o, experts_per_layer, given, bank_bytes, lb, movable), s));
      throw;
    }
    for (int64_t l : split.gpu_layers) p.layers[static_cast<size_t>(l)] = MoeLayerMode::kResident;
    p.host_bank_bytes = split.host_bytes;
    p.gpu_bank_bytes = split.gpu_bytes;
    budget.resident_bytes += split.gpu_bytes;  // charged before the expert cache is sized
    if (p.count(MoeLayerMode::kCache) + p.count(MoeLayerMode::kCpu) == 0) {  // all moved: the strategy is fused
      p.strategy = MoeStrategy::kFused;
      p.unused_flags = cache_flags_given(o);
      p.least_layer_bytes = std::numeric_limits<int64_t>::max();
      for (size_t i = 0; i < lb.size(); ++i)
        if (lb[i] > 0) p.least_layer_bytes = std::min(p.least_layer_bytes, lb[i]);
    }
    if (split.gpu_bytes > 0)
      budget.resident_note = fmt::format(" ({} of them the routed experts of {}, resident because host memory holds {}{})",
                                         format_bytes(split.gpu_bytes), layers_named(split.gpu_layers),
                                         format_bytes(o.host_bank_limit),
                                         o.host_limit_source.empty() ? "" : ": " + o.host_limit_source);
  }
  if (p.count(MoeLayerMode::kCache) > 0) {
    // Sized for the experts that go through the cache: --moe-cpu-layers' layers never use it.
    GpuMemoryBudget cache_budget = budget;
    cache_budget.experts_per_layer = 0;
    for (int64_t l : moe_layers)
      if (p.layers[static_cast<size_t>(l)] == MoeLayerMode::kCache) {
        p.cache_experts += experts_per_layer[static_cast<size_t>(l)];
        cache_budget.experts_per_layer = std::max(cache_budget.experts_per_layer, experts_per_layer[static_cast<size_t>(l)]);
      }
    cache_budget.total_experts = p.cache_experts;
    if (!budget.slot_layers.empty()) {  // slots sized per record size (mixed-type files)
      std::vector<SlotLayerShape> shapes;
      for (const SlotLayerShape& sh : budget.slot_layers)
        if (sh.layer >= 0 && static_cast<size_t>(sh.layer) < p.layers.size() &&
            p.layers[static_cast<size_t>(sh.layer)] == MoeLayerMode::kCache)
          shapes.push_back(sh);
      cache_budget.slot_classes = slot_classes(shapes);
    }
    try {
      p.cache = plan_cache_size(cache_budget, o.cache);
    } catch (const Error& e) {
      if (!advise || e.code() != ErrorCode::kOutOfMemory) throw;
      // Throws again, advising only what fits: more host memory (fewer layers resident), the cpu strategy.
      std::vector<int64_t> lb(experts_per_layer.size(), 0);
      std::vector<bool> movable(experts_per_layer.size(), false);
      for (int64_t l : moe_layers) {
        const auto i = static_cast<size_t>(l);
        lb[i] = !bank_bytes.empty() ? bank_bytes[i] : budget.expert_bytes * experts_per_layer[i] / total;
        movable[i] = p.layers[i] != MoeLayerMode::kCpu;
      }
      const HostAdvice a = host_advice(o, experts_per_layer, given, bank_bytes, lb, movable);
      if (p.gpu_bank_bytes > 0 && a.least_host > o.host_bank_limit)
        cache_budget.host_advice = fmt::format("--host-memory-limit to {} or more ({}: fewer layers resident), or raise ",
                                               host_limit_gib(a.least_host), format_bytes(a.least_host));
      if (a.least_host_cpu == kNoHostFits)
        cache_budget.cpu_advice.clear();
      else if (o.host_bank_limit >= 0 && a.least_host_cpu > o.host_bank_limit)
        cache_budget.cpu_advice = fmt::format(", or run the routed experts on the CPU with --moe-strategy cpu and "
                                              "--host-memory-limit {} or more", host_limit_gib(a.least_host_cpu));
      plan_cache_size(cache_budget, o.cache);
      throw;
    }
    if (s == MoeStrategy::kHybrid) {
      p.calibrate_fetch_cap = o.fetch_cap < 0 && o.cpu_cost <= 0;
      p.cpu_cost = std::max<int32_t>(o.cpu_cost, 0);
      p.cpu_token_cost = p.cpu_cost > 0 ? std::max<int32_t>(o.cpu_token_cost, 0) : 0;
      for (int64_t l : moe_layers)
        if (p.layers[static_cast<size_t>(l)] == MoeLayerMode::kCache) p.fetch_cap[static_cast<size_t>(l)] = o.fetch_cap;
    }
  }
  return p;
}

}  // namespace

}  // namespace ft
