#include "engine/kv_tiers.h"

#include <cmath>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "engine/engine.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

namespace {

int64_t gib_bytes(double gib) { return static_cast<int64_t>(std::llround(gib * double(int64_t{1} << 30))); }

/** The least GiB of three significant digits whose gib_bytes holds `bytes` (> 0). */
double least_gib(int64_t bytes) {
  const double gib = static_cast<double>(bytes) / double(int64_t{1} << 30);
  const double unit = std::pow(10.0, std::floor(std::log10(gib)) - 2);
  double v = std::ceil(gib / unit) * unit;
  while (gib_bytes(v) < bytes) v += unit;
  return v;
}

}  // namespace

int64_t KvTiers::pool_bytes(const EngineOptions& o) {
  int64_t n = 0;
  if (o.kv_host_gib > 0) n += std::max<int64_t>(1, gib_bytes(o.kv_host_gib));
  if (!o.prompt_cache_dir.empty()) n += DiskPageStore::queue_bound(std::max<int64_t>(1, gib_bytes(o.prompt_cache_gib)));
  return n > 0 ? n + kPoolMargin : 0;
}

int64_t KvTiers::host_bytes(const EngineOptions& o) {
  const int64_t n = pool_bytes(o);
  if (o.prompt_cache_dir.empty()) return n;
  return n + DiskPageStore::queue_bound(std::max<int64_t>(1, gib_bytes(o.prompt_cache_gib)));  // the read-ahead map
}

void check_kv_tiers(const EngineOptions& o, const ModelConfig& /*config*/, const Ops& ops) {
  // The flags' ranges are EngineOptions::validate()'s (it runs first).
  const bool disk = !o.prompt_cache_dir.empty();
  if (o.kv_host_gib == 0 && !disk) return;
  const char* flag = o.kv_host_gib > 0 ? "--kv-host-gib" : "--prompt-cache-dir";
  if (ops.device() != Device::kCpu && ops.device() != Device::kCuda)
    fail(ErrorCode::kUnsupported,
         "{}: the host KV tier and the prompt cache work on the CPU and CUDA backends only; leave the flag out", flag);
  // Every architecture's per-sequence state is in what KvPageIo copies: deepseek_v4 keeps each token's
  // kv and compressor projections in its pages and recomputes the compressed entries and the indexer's
  // keys from them every step (model/deepseek_v4.cpp); qwen4_exp keeps V and the indexer's key in its
  // value pages and the DeltaNet state, the PLE conv window and the n-gram token history in the state
  // slot the prefix cache snapshots (StateLayer::conv2, ::tokens; model/qwen4_exp.cpp).
}

uint64_t KvTiers::fingerprint(Engine& engine, const KvPageIo& io) {
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  auto add = [&](const std::string& s) { XXH3_64bits_update(h, s.data(), s.size() + 1); };
  for (const TensorInfo& t : engine.checkpoint().tensors()) {
    add(t.name);
    const int32_t dt = static_cast<int32_t>(t.dtype);
    XXH3_64bits_update(h, &dt, sizeof(dt));
    XXH3_64bits_update(h, t.shape.data(), t.shape.size() * sizeof(int64_t));
  }
  add(engine.checkpoint().metadata().dump());
  add(engine.config().arch);
  add(engine.ops().name());
  add(io.layout());
  const uint64_t f = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  return f;
}

KvTiers::KvTiers(Engine& engine) {
  const EngineOptions& o = engine.options();
  if (o.kv_host_gib <= 0 && o.prompt_cache_dir.empty()) return;
  check_kv_tiers(o, engine.config(), engine.ops());
  ops_ = &engine.ops();
  io_ = std::make_unique<KvPageIo>(engine.ops(), engine.kv(), engine.config().layer_kv_heads,
                                   engine.config().layer_head_dim);
  const int32_t ps = engine.kv().config().page_size;
  // A bound below one page would keep nothing (every page dropped) while the memory plan books the
  // tier: refused, as vLLM refuses a KV space that holds no block.
  if (o.kv_host_gib > 0 && gib_bytes(o.kv_host_gib) < io_->page_bytes())
    fail(ErrorCode::kInvalidArgument,
         "--kv-host-gib {:g} ({} bytes) holds no KV page of this model: a page of {} tokens is {} bytes (every "
         "layer's K and V{}); give at least {:g}, or leave the flag out",
         o.kv_host_gib, gib_bytes(o.kv_host_gib), ps, io_->page_bytes(),
         io_->state_bytes() > 0 ? " and a recurrent-state snapshot" : "", least_gib(io_->page_bytes()));
  // Saved pages live in host memory the backend copies to and from in place (pinned on CUDA, grown in
  // chunks as pages arrive): the host tier's pages, those queued for the prompt cache's writer, and a
  // margin for the pages saved before the tier makes room by dropping its oldest.
  const int64_t cap = pool_bytes(o);
  io_->set_pool(std::make_shared<PageBlockPool>(engine.ops().host_allocator(), cap));
  if (o.kv_host_gib > 0) {
    host_ = std::make_unique<HostPageStore>(gib_bytes(o.kv_host_gib), ps);  // >= a page (above)
    spdlog::info("KV host tier: up to {:.2f} GiB of evicted prefix pages ({} bytes a page, {} memory)", o.kv_host_gib,
                 io_->page_bytes(), io_->pool()->kind());
  }
  if (!o.prompt_cache_dir.empty()) {
    const uint64_t fp = fingerprint(engine, *io_);
    disk_ = std::make_unique<DiskPageStore>(
        o.prompt_cache_dir, std::max<int64_t>(1, gib_bytes(o.prompt_cache_gib)), ps, fp,
        DiskPageStore::Layout{io_->kv_bytes(), io_->swa_bytes(), io_->state_bytes()});
    spdlog::info("prompt cache: {} (up to {:.2f} GiB, fingerprint {:016x})", o.prompt_cache_dir, o.prompt_cache_gib, fp);
  }
}

KvTiers::~KvTiers() {
  if (!ops_) return;
  try {
    ops_->synchronize();
  } catch (const std::exception& e) {
    spdlog::warn("KV tiers: waiting for the page copies at shutdown failed: {}", e.what());
  }
}

LowerTiers KvTiers::view() { return LowerTiers{io_ ? io_.get() : nullptr, host_.get(), disk_.get()}; }

}  // namespace ft
