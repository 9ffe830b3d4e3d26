#pragma once
// KvPageIo: the PageIo (kv/page_store.h) of a KvCache: copies one prefix-cache node's pages between
// the cache's tensors and host bytes. Bytes in the pool it was given (pinned on CUDA) are copied by
// the backend's StreamCopier, queued on its stream in order with the steps and without a host wait:
// a page saved as the prefix cache evicts it is read before the next step's kernels overwrite it, and
// a page loaded for a hit is written before the step that reads it, with no synchronisation; a saved
// page's PageContents::ready passes once its bytes are on the host. Heap bytes (no pool, or a full
// one) go through Ops::copy, synchronously. Layout of PageContents:
//  kv:    for each layer, in layer order: when its pages are in the full pool its K page, V page, then
//         (quantized KV dtypes) K scales, V scales; then (DeepSeek-V4, whatever the layer's pool) the
//         page's compressed-entry rows (KvLayer::e, always in the full pool), each as the tensor's bytes
//         of one page;
//  swa:   K, V and scales of the layers in the sliding-window pool, of the node's swa page;
//  state: for each recurrent layer: conv window, S, then (Qwen4-Exp) the second window and tokens, of
//         one state slot.
// The layout (sizes and order) is fixed by the cache's config; fingerprint() names it for files.
#include <cstdint>
#include <span>
#include <string>

#include "backend/ops.h"
#include "backend/stream_copy.h"
#include "kv/kv_cache.h"
#include "kv/page_store.h"

namespace ft {

class KvPageIo : public PageIo {
 public:
  /** `ops` and `kv` must outlive it. `layer_kv_heads` / `layer_head_dim` (ModelConfig's, or empty):
   *  each layer's geometry where it differs from the pages' (Gemma 4): its pages are then copied as
   *  the model reads them (kv_head_view), packed over the front of the storage. */
  KvPageIo(Ops& ops, const KvCache& kv, std::span<const int64_t> layer_kv_heads = {},
           std::span<const int64_t> layer_head_dim = {});

  /** Saves pages into blocks of `pool` from now on (null: heap bytes, copied synchronously). */
  void set_pool(std::shared_ptr<PageBlockPool> pool) { pool_ = std::move(pool); }
  const std::shared_ptr<PageBlockPool>& pool() const { return pool_; }

  std::shared_ptr<PageContents> save(int32_t page, int32_t swa_page, int32_t slot) override;
  void load(const PageContents& c, int32_t page, int32_t swa_page, int32_t slot) override;

  /** Bytes of each part (0 where the model has no such layers). */
  int64_t kv_bytes() const { return kv_bytes_; }
  int64_t swa_bytes() const { return swa_bytes_; }
  int64_t state_bytes() const { return state_bytes_; }
  /** Bytes of one page saved with its swa page and state slot: PageContents::bytes() of such a save,
   *  what the host tier counts a page (kv/host_page_store.h) and KvTiers logs. */
  int64_t page_bytes() const { return kv_bytes_ + swa_bytes_ + state_bytes_; }
  /** A description of the layout: dtype, page size and every part's tensors' shapes, one line each. */
  std::string layout() const;

 private:
  enum class Part : uint8_t { kKv, kSwa, kState };
  /** Each part's tensors of one page/slot (views of the cache's storage at index 0). */
  std::vector<Tensor> parts_[3];
  int64_t bytes_of(Part p) const;
  /** Copies part `p` of page/slot `index` into `out` (pool bytes when it can); true when the copy was
   *  queued without waiting. */
  bool copy_out(Part p, int64_t index, PageBytes& out) const;
  /** Copies `in` into part `p` of page/slot `index`; true when the copy was queued without waiting
   *  (from pool bytes), false when it went through Ops::copy. */
  bool copy_in(Part p, int64_t index, const PageBytes& in) const;

  Ops* ops_;
  std::unique_ptr<StreamCopier> copier_;
  std::shared_ptr<PageBlockPool> pool_;
  const KvCache* kv_;
  int64_t kv_bytes_ = 0, swa_bytes_ = 0, state_bytes_ = 0;
};

}  // namespace ft
