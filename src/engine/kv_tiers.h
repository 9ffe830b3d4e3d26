#pragma once
// The prefix cache's lower tiers of one Engine (issue 39): the host KV tier (--kv-host-gib) and the
// persistent prompt cache (--prompt-cache-dir, --prompt-cache-gib), with the KvPageIo that copies a
// node's pages between them and the engine's KV cache. The serving loop hands view() to its
// Scheduler (ServiceConfig::tiers).
#include <cstdint>
#include <memory>
#include <string>

#include "backend/ops.h"
#include "kv/disk_page_store.h"
#include "kv/host_page_store.h"
#include "kv/kv_page_io.h"

namespace ft {

class Engine;
struct EngineOptions;
struct ModelConfig;

/** Refuses tier options this build cannot honour, naming the flag and the reason: kInvalidArgument for
 *  a negative --kv-host-gib or a --prompt-cache-gib <= 0 with a folder; kUnsupported on a backend other
 *  than the CPU's and CUDA's. Called while the engine loads (plan_kv_cache). */
void check_kv_tiers(const EngineOptions& options, const ModelConfig& config, const Ops& ops);

class KvTiers {
 public:
  /** The tiers engine.options() asks for (none: nothing enabled); `engine` must outlive them. Opens
   *  the prompt-cache folder (DiskPageStore: throws kInvalidArgument when it cannot be made). Throws
   *  kInvalidArgument for a --kv-host-gib below one page (KvPageIo::page_bytes()), naming the page's
   *  bytes and the least value (three significant digits) that holds one. */
  explicit KvTiers(Engine& engine);
  /** Waits for the engine's queued page copies before the pages' host memory goes. */
  ~KvTiers();
  KvTiers(const KvTiers&) = delete;
  KvTiers& operator=(const KvTiers&) = delete;

  /** The most host memory the tiers' saved pages take (PageBlockPool's cap; pinned on CUDA): the host
   *  tier's bound, the prompt cache's write queue bound and a margin of kPoolMargin; 0 with no tier. */
  static int64_t pool_bytes(const EngineOptions& options);
  /** The most host memory the tiers take: pool_bytes and the prompt cache's read-ahead bound (pages read
   *  from disk while their request waits, DiskPageStore's default bound); 0 with no tier. */
  static int64_t host_bytes(const EngineOptions& options);
  static constexpr int64_t kPoolMargin = int64_t{256} << 20;

  /** What ServiceConfig::tiers takes (io null when no tier is on). */
  LowerTiers view();
  HostPageStore* host() { return host_.get(); }
  DiskPageStore* disk() { return disk_.get(); }

  /** 64-bit fingerprint of what a page's bytes depend on: the checkpoint's tensors (names, types,
   *  shapes) and metadata, the architecture, the backend and the KV layout (KvPageIo::layout). */
  static uint64_t fingerprint(Engine& engine, const KvPageIo& io);

 private:
  Ops* ops_ = nullptr;
  std::unique_ptr<KvPageIo> io_;
  std::unique_ptr<HostPageStore> host_;
  std::unique_ptr<DiskPageStore> disk_;
};

}  // namespace ft
