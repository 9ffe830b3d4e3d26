#pragma once
// KvCache: the paged K/V storage of every attention layer on one backend, plus its page pool.
// Layer l's keys are one tensor [n_pages, page_size, n_head_kv, head_dim], its values one of
// [n_pages, page_size, v heads, v width] (the keys' shape unless the config says otherwise); the
// pool is sized from a token budget. Sequences hold pages through their BlockTable.
// Sliding-window layers (KvCacheConfig::layer_window, with swa_token_budget > 0) keep theirs in a
// second pool of swa_token_budget tokens: their tensors have that pool's pages, and a sequence holds
// only the pages of its window there (kv/page_pool.h). A layer's compressed-entry rows (DeepSeek-V4,
// KvLayer::e) stay in the full pool's pages even when its K and V slide: they serve the whole context.
// Recurrent layers (linear attention: KvCacheConfig::layer_recurrent) keep no pages: each holds one
// fixed-size state per slot (StateLayer: conv window + delta-rule S), n_state_slots slots handed to
// running sequences through KvPools::states, plus spare_pages spare slots (a replayed graph's padding).
#include <cstdint>
#include <optional>
#include <vector>

#include "backend/ops.h"
#include "kv/page_pool.h"

namespace ft {

struct KvCacheConfig {
  int32_t n_layer = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  int32_t page_size = 64;     // tokens per page (--page-size)
  int64_t token_budget = 0;   // tokens of KV to hold across all sequences; rounded up to whole pages
  /** Element type: F32, BF16 (CUDA), or quantized with scales (quant/kv_quant.h; CPU): F8_E4M3
   *  (--kv-cache-dtype fp8, one F32 scale a head a token) or Q8_0 (q8_0: an F16 scale per 32 values
   *  of a head); their pages hold codes and KvLayer::k_scale / ::v_scale the scales. */
  DType dtype = DType::F32;
  /** Device pages beyond the pool (ids pool.n_pages() ..), never handed out: where the padding rows
   *  of a replayed decode graph write their K/V. */
  int32_t spare_pages = 0;
  /** Value pages' heads and width when they differ from the keys' (0: as the keys). MLA keeps the
   *  latent [1, kv_lora_rank] in the key pages and the RoPE key [1, qk_rope_head_dim] in the value
   *  pages: 576 values a token for DeepSeek-V3 instead of 2 x heads x head_dim. */
  int32_t v_n_head = 0;
  int32_t v_head_dim = 0;
  /** Sliding window of each layer (0: full attention), n_layer entries, or empty: none slides. */
  std::vector<int32_t> layer_window;
  /** > 0 with a sliding layer: tokens of the sliding-window layers' pool (rounded up to whole pages;
   *  at most token_budget). 0: every layer keeps its KV in the one pool. */
  int64_t swa_token_budget = 0;
  /** Layers with a recurrent state instead of KV pages (1), n_layer entries, or empty: none. */
  std::vector<uint8_t> layer_recurrent;
  /** The recurrent layers' state: conv window [conv_kernel - 1, conv_dim] and S [ssm_v_heads,
   *  ssm_k_dim, ssm_v_dim], F32, per slot. */
  int32_t conv_dim = 0, conv_kernel = 0, ssm_v_heads = 0, ssm_k_dim = 0, ssm_v_dim = 0;
  /** Qwen4-Exp's per-layer embeddings: every recurrent layer also keeps a second convolution window
   *  [conv2_rows, conv2_dim] F32 and its sequence's last `token_history` tokens (I32) per slot (0: none). */
  int32_t conv2_rows = 0, conv2_dim = 0, token_history = 0;
  /** Slots of recurrent state sequences can hold (the most sequences running at once). */
  int32_t n_state_slots = 0;
  /** DeepSeek-V4's compressed entries (KvLayer::e), n_layer entries each or empty: a layer's compress
   *  rate (0: no entries) and row width (its entries' and its indexer keys' columns). Entry rows live
   *  in the full pool's pages (also for a layer in the sliding-window pool), ceil(page_size / rate) a
   *  page, in `entry_dtype` (the activation dtype). */
  std::vector<int32_t> layer_entry_rate, layer_entry_width;
  DType entry_dtype = DType::F32;

  /** Rows of compressed entries a page of layer `l` holds (0: the layer has none). */
  int32_t entry_rows(int32_t l) const {
    const int32_t r = layer_entry_rate.empty() ? 0 : layer_entry_rate[static_cast<size_t>(l)];
    return r > 0 ? (page_size + r - 1) / r : 0;
  }

  /** True when layer `l` keeps its KV in the sliding-window pool. */
  bool in_swa_pool(int32_t l) const {
    return swa_token_budget > 0 && !layer_window.empty() && layer_window[static_cast<size_t>(l)] > 0;
  }
  /** Widest window of the layers in the sliding-window pool (0: no such pool). */
  int32_t swa_window() const;
  /** True when layer `l` keeps a recurrent state and no KV pages. */
  bool is_recurrent(int32_t l) const {
    return !layer_recurrent.empty() && layer_recurrent[static_cast<size_t>(l)] != 0;
  }
  /** True when some layer is recurrent. */
  bool has_recurrent() const;
  /** Bytes of one slot's state over every recurrent layer. */
  int64_t state_bytes_per_slot() const;
};

/** `full`'s pages seen as [n_pages, page_size, heads, dim], packed over the front of their storage (a
 *  layer narrower than the widest sharing one cache layer, as Gemma 4's), scales viewed the same way.
 *  Throws kUnsupported when the view needs more bytes than `full` holds: quantized pages whose layer
 *  has more KV heads (of a smaller dim) than the pages, so more scales a token. */
KvLayer kv_head_view(const KvLayer& full, int64_t heads, int64_t dim);

class KvCache {
 public:
  /** Allocates 2 * n_layer tensors of pool + spare pages through `ops`. Throws kInvalidArgument for a bad config,
   *  kOutOfMemory (naming the bytes) when the backend cannot allocate it. */
  KvCache(Ops& ops, const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  /** Layer `l`'s pages (empty tensors for a recurrent layer). Throws kInternal for l out of range. */
  KvLayer layer(int32_t l) const;
  /** Recurrent layer `l`'s state slots. Throws kInternal for l out of range or not recurrent. */
  StateLayer state(int32_t l) const;
  /** Queues on `ops` a copy of every recurrent layer's state from slot `c.from` to slot `c.to` (a
   *  snapshot saved for the prefix cache or restored for a hit). Throws kInternal for a slot out of
   *  range. */
  void copy_state(Ops& ops, StateCopy c) const;
  /** The recurrent-state slots (nullptr: no recurrent layer). Slot ids n_state_slots.. are spares. */
  PagePool* state_pool() { return state_pool_ ? &*state_pool_ : nullptr; }
  const PagePool* state_pool() const { return state_pool_ ? &*state_pool_ : nullptr; }
  PagePool& pool() { return pool_; }
  const PagePool& pool() const { return pool_; }
  /** The pools sequences draw from (the sliding-window one when the config has it). */
  KvPools pools() {
    KvPools p = swa_pool_ ? KvPools(pool_, &*swa_pool_, config_.swa_window()) : KvPools(pool_);
    p.states = state_pool();
    return p;
  }
  /** True when layer `l`'s pages are the sliding-window pool's. */
  bool in_swa_pool(int32_t l) const { return swa_pool_ && config_.in_swa_pool(l); }
  /** The sliding-window pool, nullptr without one. */
  const PagePool* swa_pool() const { return swa_pool_ ? &*swa_pool_ : nullptr; }
  /** Bytes of K and V storage of one token of the full pool: every layer with pages there (quantized
   *  pages' scales included), compressed-entry rows included (a page's rows / page_size; they live in
   *  the full pool whatever the layer's). The sliding-window pool's layers are not counted: their pool
   *  is a fixed cost (swa_pool_bytes), not one growing with the context. */
  static int64_t bytes_per_token(const KvCacheConfig& config);
  /** Bytes of the sliding-window pool (its pages, spare pages included, in every layer that keeps its
   *  K and V there; 0 without one): the window's fixed cost beside bytes_per_token's. */
  static int64_t swa_pool_bytes(const KvCacheConfig& config);
  /** Bytes of K and V storage in all layers, and of the recurrent states. */
  int64_t bytes() const;

  /** Bytes a cache of `config` needs, spare pages and state slots included (without allocating). */
  static int64_t bytes_for(const KvCacheConfig& config);

 private:
  KvCacheConfig config_;
  PagePool pool_;
  std::optional<PagePool> swa_pool_;
  std::optional<PagePool> state_pool_;
  std::vector<Buffer> storage_;
  std::vector<KvLayer> layers_;
  std::vector<StateLayer> states_;  // [n_layer]; empty tensors for attention layers
};

}  // namespace ft
