#include "kv/kv_cache.h"

#include "util/error.h"

namespace ft {
namespace {

int32_t pages_for(const KvCacheConfig& c) {
  if (c.n_layer < 1 || c.n_head_kv < 1 || c.head_dim < 1 || c.page_size < 1 || c.token_budget < 1)
    fail(ErrorCode::kInvalidArgument,
         "KV cache: n_layer {}, n_head_kv {}, head_dim {}, page_size {}, token budget {} (all must be >= 1)", c.n_layer,
         c.n_head_kv, c.head_dim, c.page_size, c.token_budget);
  if (c.spare_pages < 0) fail(ErrorCode::kInvalidArgument, "KV cache: spare_pages {} must be >= 0", c.spare_pages);
  const int64_t pages = (c.token_budget + c.page_size - 1) / c.page_size;
  if (pages > INT32_MAX) fail(ErrorCode::kInvalidArgument, "KV cache: {} pages is too many", pages);
  return static_cast<int32_t>(pages);
}

int64_t k_width(const KvCacheConfig& c) { return int64_t{c.n_head_kv} * c.head_dim; }
int64_t v_width(const KvCacheConfig& c) {
  return int64_t{c.v_n_head > 0 ? c.v_n_head : c.n_head_kv} * (c.v_head_dim > 0 ? c.v_head_dim : c.head_dim);
}

}  // namespace

int64_t KvCache::bytes_per_token(const KvCacheConfig& c) {
  return c.n_layer * (dtype_bytes(c.dtype, k_width(c)) + dtype_bytes(c.dtype, v_width(c)));
}

int64_t KvCache::bytes_for(const KvCacheConfig& c) {
  return (int64_t{pages_for(c)} + c.spare_pages) * c.page_size * bytes_per_token(c);
}

KvCache::KvCache(Ops& ops, const KvCacheConfig& config) : config_(config), pool_(pages_for(config), config.page_size) {
  const int64_t n_pages = int64_t{pool_.n_pages()} + config.spare_pages;
  for (int32_t l = 0; l < config.n_layer; ++l) {
    KvLayer kv;
    for (Tensor* t : {&kv.k, &kv.v}) {
      const bool v = t == &kv.v;
      const int32_t heads = v && config.v_n_head > 0 ? config.v_n_head : config.n_head_kv;
      const int32_t dim = v && config.v_head_dim > 0 ? config.v_head_dim : config.head_dim;
      Tensor view(nullptr, config.dtype, {n_pages, config.page_size, heads, dim}, ops.device());
      storage_.push_back(ops.alloc(view.bytes()));
      view.data = storage_.back().data();
      *t = view;
    }
    layers_.push_back(kv);
  }
}

KvLayer KvCache::layer(int32_t l) const {
  FT_CHECK(l >= 0 && l < static_cast<int32_t>(layers_.size()));
  return layers_[static_cast<size_t>(l)];
}

int64_t KvCache::bytes() const { return bytes_for(config_); }

}  // namespace ft
