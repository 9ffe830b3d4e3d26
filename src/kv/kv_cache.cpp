#include "kv/kv_cache.h"

#include <algorithm>
#include <utility>

#include "quant/kv_quant.h"
#include "util/error.h"

namespace ft {
namespace {

int32_t pages_for(const KvCacheConfig& c) {
  if (c.n_layer < 1 || c.n_head_kv < 1 || c.head_dim < 1 || c.page_size < 1 || c.token_budget < 1)
    fail(ErrorCode::kInvalidArgument,
         "KV cache: n_layer {}, n_head_kv {}, head_dim {}, page_size {}, token budget {} (all must be >= 1)", c.n_layer,
         c.n_head_kv, c.head_dim, c.page_size, c.token_budget);
  if (c.spare_pages < 0) fail(ErrorCode::kInvalidArgument, "KV cache: spare_pages {} must be >= 0", c.spare_pages);
  kv_row_bytes(c.dtype, 1, 1);  // throws for a dtype the KV cache cannot hold
  const int64_t pages = (c.token_budget + c.page_size - 1) / c.page_size;
  if (pages > INT32_MAX) fail(ErrorCode::kInvalidArgument, "KV cache: {} pages is too many", pages);
  return static_cast<int32_t>(pages);
}

/** Pages of the sliding-window pool (0: none). */
int32_t swa_pages_for(const KvCacheConfig& c) {
  if (!c.layer_window.empty() && static_cast<int32_t>(c.layer_window.size()) != c.n_layer)
    fail(ErrorCode::kInvalidArgument, "KV cache: {} layer windows for {} layers", c.layer_window.size(), c.n_layer);
  if (c.swa_token_budget < 0) fail(ErrorCode::kInvalidArgument, "KV cache: swa token budget {} < 0", c.swa_token_budget);
  if (c.swa_window() == 0) return 0;
  const int64_t tokens = std::min(c.swa_token_budget, c.token_budget);
  return static_cast<int32_t>((tokens + c.page_size - 1) / c.page_size);
}

int32_t v_heads(const KvCacheConfig& c) { return c.v_n_head > 0 ? c.v_n_head : c.n_head_kv; }
int32_t v_dim(const KvCacheConfig& c) { return c.v_head_dim > 0 ? c.v_head_dim : c.head_dim; }

/** Bytes of one token's K and V in one attention layer (scales of quantized pages included). */
int64_t layer_token_bytes(const KvCacheConfig& c) {
  return kv_row_bytes(c.dtype, c.n_head_kv, c.head_dim) + kv_row_bytes(c.dtype, v_heads(c), v_dim(c));
}

/** Bytes of layer `l`'s compressed-entry rows in one page (0: none). */
int64_t entry_page_bytes(const KvCacheConfig& c, int32_t l) {
  const int32_t rows = c.entry_rows(l);
  return rows > 0 ? dtype_bytes(c.entry_dtype, int64_t{rows} * c.layer_entry_width[static_cast<size_t>(l)]) : 0;
}

void check_entries(const KvCacheConfig& c) {
  if (c.layer_entry_rate.empty() && c.layer_entry_width.empty()) return;
  if (static_cast<int32_t>(c.layer_entry_rate.size()) != c.n_layer ||
      static_cast<int32_t>(c.layer_entry_width.size()) != c.n_layer)
    fail(ErrorCode::kInvalidArgument, "KV cache: {} entry rates and {} entry widths for {} layers",
         c.layer_entry_rate.size(), c.layer_entry_width.size(), c.n_layer);
  for (int32_t l = 0; l < c.n_layer; ++l) {
    const int32_t r = c.layer_entry_rate[static_cast<size_t>(l)], w = c.layer_entry_width[static_cast<size_t>(l)];
    if (r < 0 || (r > 0 && w < 1) || (r > 0 && c.is_recurrent(l)))
      fail(ErrorCode::kInvalidArgument, "KV cache: layer {}: compressed entries of rate {} and width {} (an attention "
           "layer, rate >= 1 and width >= 1)", l, r, w);
  }
  if (c.entry_dtype != DType::F32 && c.entry_dtype != DType::BF16 && c.entry_dtype != DType::F16)
    fail(ErrorCode::kInvalidArgument, "KV cache: compressed entries in {} (the activation dtype: F32, BF16 or F16)",
         dtype_name(c.entry_dtype));
}

}  // namespace

int32_t KvCacheConfig::swa_window() const {
  if (swa_token_budget <= 0) return 0;
  int32_t w = 0;
  for (int32_t x : layer_window) w = std::max(w, x);
  return w;
}

bool KvCacheConfig::has_recurrent() const {
  for (uint8_t r : layer_recurrent)
    if (r) return true;
  return false;
}

int64_t KvCacheConfig::state_bytes_per_slot() const {
  int64_t n = 0;
  for (int32_t l = 0; l < n_layer; ++l)
    if (is_recurrent(l))
      n += 4 * (int64_t{conv_kernel - 1} * conv_dim + int64_t{ssm_v_heads} * ssm_k_dim * ssm_v_dim +
                int64_t{conv2_rows} * conv2_dim + token_history);
  return n;
}

namespace {

void check_recurrent(const KvCacheConfig& c) {
  if (c.layer_recurrent.empty()) return;
  if (static_cast<int32_t>(c.layer_recurrent.size()) != c.n_layer)
    fail(ErrorCode::kInvalidArgument, "KV cache: {} recurrent-layer flags for {} layers", c.layer_recurrent.size(),
         c.n_layer);
  if (c.has_recurrent() && (c.conv_dim < 1 || c.conv_kernel < 2 || c.ssm_v_heads < 1 || c.ssm_k_dim < 1 ||
                            c.ssm_v_dim < 1 || c.n_state_slots < 1))
    fail(ErrorCode::kInvalidArgument,
         "KV cache: recurrent state conv {} x {}, S {} x {} x {}, {} slots (conv kernel >= 2, the rest >= 1)",
         c.conv_kernel, c.conv_dim, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim, c.n_state_slots);
}

}  // namespace

int64_t KvCache::bytes_per_token(const KvCacheConfig& c) {
  int64_t entries = 0;  // a page's entry rows over its tokens, rounded up over all layers
  for (int32_t l = 0; l < c.n_layer; ++l) entries += entry_page_bytes(c, l);
  int32_t full_layers = 0;  // the sliding-window pool's layers cost swa_pool_bytes, whatever the context
  for (int32_t l = 0; l < c.n_layer; ++l) full_layers += c.is_recurrent(l) || c.in_swa_pool(l) ? 0 : 1;
  return full_layers * layer_token_bytes(c) + (entries + c.page_size - 1) / std::max(c.page_size, 1);
}

int64_t KvCache::swa_pool_bytes(const KvCacheConfig& c) {
  const int32_t swa_pages = swa_pages_for(c);
  if (swa_pages == 0) return 0;
  int32_t swa_layers = 0;
  for (int32_t l = 0; l < c.n_layer; ++l) swa_layers += !c.is_recurrent(l) && c.in_swa_pool(l) ? 1 : 0;
  return (int64_t{swa_pages} + c.spare_pages) * c.page_size * swa_layers * layer_token_bytes(c);
}

int64_t KvCache::bytes_for(const KvCacheConfig& c) {
  const int64_t layer_token = layer_token_bytes(c);
  const int64_t full_pages = int64_t{pages_for(c)} + c.spare_pages;
  int64_t bytes = swa_pool_bytes(c);
  for (int32_t l = 0; l < c.n_layer; ++l)  // entry rows live in the full pool's pages whatever the layer's pool
    if (!c.is_recurrent(l)) bytes += full_pages * ((c.in_swa_pool(l) ? 0 : c.page_size * layer_token) + entry_page_bytes(c, l));
  if (c.has_recurrent()) bytes += (int64_t{c.n_state_slots} + c.spare_pages) * c.state_bytes_per_slot();
  return bytes;
}

KvCache::KvCache(Ops& ops, const KvCacheConfig& config) : config_(config), pool_(pages_for(config), config.page_size) {
  if (const int32_t swa = swa_pages_for(config); swa > 0) swa_pool_.emplace(swa, config.page_size);
  check_recurrent(config);
  check_entries(config);
  if (config.has_recurrent()) state_pool_.emplace(config.n_state_slots, 1);
  const int64_t slots = int64_t{config.n_state_slots} + config.spare_pages;
  auto alloc = [&](DType dt, std::initializer_list<int64_t> shape) {
    Tensor view(nullptr, dt, shape, ops.device());
    storage_.push_back(ops.alloc(view.bytes()));
    view.data = storage_.back().data();
    return view;
  };
  for (int32_t l = 0; l < config.n_layer; ++l) {
    StateLayer st;
    if (config.is_recurrent(l)) {
      st.conv = alloc(DType::F32, {slots, config.conv_kernel - 1, config.conv_dim});
      st.ssm = alloc(DType::F32, {slots, config.ssm_v_heads, config.ssm_k_dim, config.ssm_v_dim});
      ops.zero(st.conv);
      ops.zero(st.ssm);
      if (config.conv2_rows > 0 && config.conv2_dim > 0) {
        st.conv2 = alloc(DType::F32, {slots, config.conv2_rows, config.conv2_dim});
        ops.zero(st.conv2);
      }
      if (config.token_history > 0) {
        st.tokens = alloc(DType::I32, {slots, config.token_history});
        ops.zero(st.tokens);
      }
    }
    states_.push_back(st);
    if (config.is_recurrent(l)) {
      layers_.emplace_back();
      continue;
    }
    const int64_t n_pages = int64_t{in_swa_pool(l) ? swa_pool_->n_pages() : pool_.n_pages()} + config.spare_pages;
    KvLayer kv;
    for (Tensor* t : {&kv.k, &kv.v}) {
      const bool v = t == &kv.v;
      const int32_t heads = v ? v_heads(config) : config.n_head_kv;
      const int32_t dim = v ? v_dim(config) : config.head_dim;
      *t = alloc(kv_code_dtype(config.dtype), {n_pages, config.page_size, heads, dim});
      if (kv_is_quantized(config.dtype))
        (v ? kv.v_scale : kv.k_scale) = alloc(kv_scale_dtype(config.dtype),
                                              {n_pages, config.page_size, heads, kv_scales_per_head(config.dtype, dim)});
    }
    if (const int32_t rows = config.entry_rows(l); rows > 0) {  // in the full pool's pages, for the whole context
      const int64_t e_pages = int64_t{pool_.n_pages()} + config.spare_pages;
      kv.e = alloc(config.entry_dtype, {e_pages, rows, 1, config.layer_entry_width[static_cast<size_t>(l)]});
      ops.zero(kv.e);  // rows not yet written read as zeros, never as another run's bytes
    }
    layers_.push_back(kv);
  }
}

KvLayer KvCache::layer(int32_t l) const {
  FT_CHECK(l >= 0 && l < static_cast<int32_t>(layers_.size()));
  return layers_[static_cast<size_t>(l)];
}

void KvCache::copy_state(Ops& ops, StateCopy c) const {
  const int64_t slots = int64_t{config_.n_state_slots} + config_.spare_pages;
  FT_CHECK(c.from >= 0 && c.from < slots && c.to >= 0 && c.to < slots);
  if (c.from == c.to) return;
  for (const StateLayer& st : states_) {
    if (st.conv.empty()) continue;
    ops.copy(st.conv.slice(c.from, 1), st.conv.slice(c.to, 1));
    ops.copy(st.ssm.slice(c.from, 1), st.ssm.slice(c.to, 1));
    if (!st.conv2.empty()) ops.copy(st.conv2.slice(c.from, 1), st.conv2.slice(c.to, 1));
    if (!st.tokens.empty()) ops.copy(st.tokens.slice(c.from, 1), st.tokens.slice(c.to, 1));
  }
}

KvLayer kv_head_view(const KvLayer& full, int64_t heads, int64_t dim) {
  auto view = [&](const Tensor& t, int64_t cols) {
    return t.empty() ? Tensor() : Tensor(t.data, t.dtype, {t.dim(0), t.dim(1), heads, cols}, t.device);
  };
  const int64_t scales = full.quantized() ? kv_scales_per_head(kv_dtype_of_codes(full.k.dtype), dim) : 0;
  KvLayer kv{view(full.k, dim), view(full.v, dim), view(full.k_scale, scales), view(full.v_scale, scales), full.e};
  for (const auto& [part, whole] : {std::pair<const Tensor*, const Tensor*>{&kv.k, &full.k}, {&kv.v, &full.v},
                                    {&kv.k_scale, &full.k_scale}, {&kv.v_scale, &full.v_scale}})
    if (!whole->empty() && part->bytes() > whole->bytes())  // more heads of a smaller dim: more scales a token
      fail(ErrorCode::kUnsupported,
           "KV cache: a layer of {} KV heads of {} does not fit pages {} of {} (with --kv-cache-dtype fp8 / q8_0, "
           "scales a head: use f32)",
           heads, dim, full.k.str(), dtype_name(full.k.dtype));
  return kv;
}

StateLayer KvCache::state(int32_t l) const {
  FT_CHECK(l >= 0 && l < static_cast<int32_t>(states_.size()) && config_.is_recurrent(l));
  return states_[static_cast<size_t>(l)];
}

int64_t KvCache::bytes() const { return bytes_for(config_); }

}  // namespace ft
