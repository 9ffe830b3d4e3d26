// Engine's start-up calibration of the split between PCIe and the CPU (hybrid without
// --moe-fetch-cap, auto's planner included): each candidate fetch policy timed over a few decode
// steps of a throw-away sequence, the choice kept in a calibration file per machine, model and plan
// (engine/calibration_cache.h) and read back on the next start unless --moe-calibrate.
#include <algorithm>
#include <chrono>
#include <ctime>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "backend/device.h"
#include "engine/calibration_cache.h"
#include "engine/engine.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

namespace {

/** "2026-12-06T08:40:00Z": now, UTC. */
std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string Engine::calibration_key(const std::vector<MoeRuntime::FetchCandidate>& caps) const {
  // What the timings depend on: the machine, the tensors' names, types and shapes (not their values),
  // the plan (strategy, slots, layers, prefetch, bank format) and the threads; the candidates'
  // names, so a file of another candidate list is not read.
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  for (const TensorInfo& t : ckpt_->tensors()) {
    XXH3_64bits_update(h, t.name.data(), t.name.size() + 1);
    const int32_t dt = static_cast<int32_t>(t.dtype);
    XXH3_64bits_update(h, &dt, sizeof(dt));
    XXH3_64bits_update(h, t.shape.data(), t.shape.size() * sizeof(int64_t));
  }
  const uint64_t tensors = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  std::string names;
  for (const MoeRuntime::FetchCandidate& c : caps) {
    if (!names.empty()) names += ", ";
    names += c.name;
  }
  const ModelConfig& c = model_->config();
  const std::string gpu = ops_->device() == Device::kCpu ? std::string() : ", " + cuda_device_name(0);
  return fmt::format("cpu: {}\ndevice: {}{}\nthreads: {}, GPU memory limit {}\nmodel: {}, {} layers, tensors {:016x}\n"
                     "plan: {}\ncandidates: {}",
                     host_cpu_description(), ops_->name(), gpu,
                     options_.threads, options_.gpu_memory_limit, c.arch, c.n_layer, tensors, moe_->plan().summary(),
                     names);
}

void Engine::calibrate_fetch_cap() {
  const std::vector<MoeRuntime::FetchCandidate> caps = moe_->fetch_candidates();
  if (caps.empty()) return;
  if (comm_ && comm_->group_size() > 1) {
    // A rank's timing steps meet the others in collectives: every rank would have to run the same steps,
    // which a calibration file found by one rank's key (its shard's tensors) and not another's breaks.
    // The ranks keep the default policy until the calibration is agreed over the group.
    const MoeRuntime::FetchCandidate keep = moe_->default_fetch_candidate();
    moe_->set_fetch_policy(keep);  // no longer provisional
    moe_->set_no_calibration(fmt::format("{} ranks keep the default policy, {}", comm_->group_size(), keep.name));
    spdlog::info("moe: {} ranks: the fetch calibration is not run{}; {} (--moe-fetch-cap sets another)",
                 comm_->group_size(), options_.moe.recalibrate ? " (--moe-calibrate is ignored)" : "", keep.name);
    return;
  }
  const MoeOptions& mo = options_.moe;
  std::optional<CalibrationCache> cache;
  if (!mo.calibration_dir.empty()) cache.emplace(mo.calibration_dir, calibration_key(caps));
  if (cache && !mo.recalibrate) {
    if (std::optional<FetchCalibration> kept = cache->load()) {
      const auto it = std::find_if(caps.begin(), caps.end(), [&](const auto& c) { return c.name == kept->choice; });
      if (it != caps.end()) {
        moe_->set_fetch_policy(*it);
        spdlog::info("moe: {} from the calibration of {} in {} ({}; ms per decode step, {}); --moe-calibrate times "
                     "it again", it->name, kept->measured_at, cache->file(),
                     it->policy.fetches_all() ? "every miss fetched: offload" : "misses split between PCIe and the CPU",
                     format_timings(*kept));
        moe_->set_calibration(std::move(*kept), true, cache->file());
        return;
      }
      spdlog::warn("moe: the calibration file {} chose '{}', which is not a candidate now; calibrating again",
                   cache->file(), kept->choice);
    }
  }
  std::optional<FetchCalibration> measured = time_fetch_candidates(caps);
  if (!measured) return;
  const bool stored = cache && cache->store(*measured);
  moe_->set_calibration(std::move(*measured), false, stored ? cache->file() : std::string());
}

std::optional<FetchCalibration> Engine::time_fetch_candidates(const std::vector<MoeRuntime::FetchCandidate>& caps) {
  // Per candidate one warm-up and up to 6 timed steps; the cache is cold at start and a cold cache
  // favours fetching more, so first up to 32 steps at the default cap: as much as the KV pool holds (measured on
  // the H200: 4 timed steps and no settling picked 4 where 3 decodes 17% faster).
  const int64_t prompt = std::min<int64_t>(16, options_.max_step_tokens), warm = 1;
  const int64_t n_vocab = model_->config().n_vocab, n_caps = static_cast<int64_t>(caps.size());
  const int64_t room = int64_t{kv_->pool().n_free()} * kv_->pool().page_size();
  const int64_t per_cap = std::clamp<int64_t>((room - prompt) / n_caps, warm + 1, warm + 6);
  const int64_t timed = per_cap - warm, needed = prompt + n_caps * per_cap;
  const int64_t settle = std::clamp<int64_t>(room - needed, 0, 32);
  const MoeRuntime::FetchCandidate fallback = moe_->default_fetch_candidate();
  BlockTable seq;
  const KvPools pools = kv_->pools();
  if (!seq.reserve(*pools.full, needed + settle)) {
    spdlog::warn("moe: no KV room to calibrate the split between PCIe and the CPU; using {} (half of top-k)",
                 fallback.name);
    moe_->set_fetch_policy(fallback);
    moe_->set_no_calibration(fmt::format("no KV room to calibrate; the default policy, {}", fallback.name));
    return std::nullopt;
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
      step(StepBatch{{{&seq.pages(), start, tokens, n, 1, &seq.swa_pages(), seq.state_slot()}}});
    };
    run(0, ids.data(), prompt);
    int64_t pos = prompt;
    auto decode = [&] {
      const int32_t id = token();
      run(pos++, &id, 1);
    };
    for (int64_t i = 0; i < settle; ++i) decode();
    std::vector<double> seconds;
    FetchCalibration measured;
    measured.measured_at = utc_now();
    for (const MoeRuntime::FetchCandidate& cap : caps) {
      moe_->set_fetch_policy(cap);
      drop_graphs();  // recorded steps hold the cap they were recorded with
      for (int64_t i = 0; i < warm; ++i) decode();
      ops_->synchronize();
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < timed; ++i) decode();
      ops_->synchronize();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / static_cast<double>(timed);
      measured.ms_per_step.emplace_back(cap.name, 1e3 * s);
      seconds.push_back(s);
    }
    const MoeRuntime::FetchCandidate& best = caps[MoeRuntime::choose_fetch_candidate(seconds)];
    measured.choice = best.name;
    seq.release(pools);
    moe_->set_fetch_policy(best);
    drop_graphs();
    moe_->end_calibration();
    spdlog::info("moe: {} calibrated ({}; ms per decode step, {})", best.name,
                 best.policy.fetches_all() ? "every miss fetched: offload" : "misses split between PCIe and the CPU",
                 format_timings(measured));
    return measured;
  } catch (const std::exception& e) {  // the engine still works: keep the default cap
    seq.release(pools);
    moe_->set_fetch_policy(fallback);
    drop_graphs();
    moe_->end_calibration();
    spdlog::warn("moe: the calibration of the split between PCIe and the CPU failed ({}); using {} (half of top-k)",
                 e.what(), fallback.name);
    moe_->set_no_calibration(fmt::format("the calibration failed; the default policy, {}", fallback.name));
    return std::nullopt;
  }
}

}  // namespace ft
