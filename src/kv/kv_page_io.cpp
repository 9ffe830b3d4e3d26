#include "kv/kv_page_io.h"

#include <fmt/format.h>

#include "util/error.h"

namespace ft {

KvPageIo::KvPageIo(Ops& ops, const KvCache& kv, std::span<const int64_t> layer_kv_heads,
                   std::span<const int64_t> layer_head_dim)
    : ops_(&ops), copier_(make_stream_copier(ops)), kv_(&kv) {
  const KvCacheConfig& c = kv.config();
  for (int32_t l = 0; l < c.n_layer; ++l) {
    if (c.is_recurrent(l)) {
      const StateLayer st = kv.state(l);
      for (const Tensor* t : {&st.conv, &st.ssm, &st.conv2, &st.tokens})
        if (!t->empty()) parts_[static_cast<int>(Part::kState)].push_back(*t);
      continue;
    }
    const auto li = static_cast<size_t>(l);
    const KvLayer layer = li < layer_kv_heads.size() && li < layer_head_dim.size()
                              ? kv_head_view(kv.layer(l), layer_kv_heads[li], layer_head_dim[li])
                              : kv.layer(l);
    auto& part = parts_[static_cast<int>(kv.in_swa_pool(l) ? Part::kSwa : Part::kKv)];
    for (const Tensor* t : {&layer.k, &layer.v, &layer.k_scale, &layer.v_scale})
      if (!t->empty()) part.push_back(*t);
    if (!layer.e.empty()) parts_[static_cast<int>(Part::kKv)].push_back(layer.e);  // the full pool's, always
  }
  kv_bytes_ = bytes_of(Part::kKv);
  swa_bytes_ = bytes_of(Part::kSwa);
  state_bytes_ = bytes_of(Part::kState);
}

int64_t KvPageIo::bytes_of(Part p) const {
  int64_t n = 0;
  for (const Tensor& t : parts_[static_cast<int>(p)]) n += t.slice(0, 1).bytes();
  return n;
}

bool KvPageIo::copy_out(Part p, int64_t index, PageBytes& out) const {
  out = PageBytes(PageAllocator<uint8_t>(pool_));
  out.resize(static_cast<size_t>(bytes_of(p)));
  const bool queued = out.get_allocator().pooled(out.data());
  int64_t off = 0;
  for (const Tensor& t : parts_[static_cast<int>(p)]) {
    const Tensor src = t.slice(index, 1);
    Tensor dst = src;
    dst.data = out.data() + off;
    dst.device = Device::kCpu;
    if (queued) copier_->copy(src, dst);
    else ops_->copy(src, dst);
    off += src.bytes();
  }
  return queued;
}

bool KvPageIo::copy_in(Part p, int64_t index, const PageBytes& in) const {
  if (static_cast<int64_t>(in.size()) != bytes_of(p))
    fail(ErrorCode::kInternal, "KV page copy: {} bytes for a part of {}", in.size(), bytes_of(p));
  const bool queued = in.get_allocator().pooled(in.data());
  int64_t off = 0;
  for (const Tensor& t : parts_[static_cast<int>(p)]) {
    const Tensor dst = t.slice(index, 1);
    Tensor src = dst;
    src.data = const_cast<uint8_t*>(in.data()) + off;
    src.device = Device::kCpu;
    if (queued) copier_->copy(src, dst);
    else ops_->copy(src, dst);
    off += dst.bytes();
  }
  return queued;
}

std::shared_ptr<PageContents> KvPageIo::save(int32_t page, int32_t swa_page, int32_t slot) {
  auto c = std::make_shared<PageContents>();
  bool queued = copy_out(Part::kKv, page, c->kv);
  if (swa_page >= 0 && swa_bytes_ > 0) queued |= copy_out(Part::kSwa, swa_page, c->swa);
  if (slot >= 0 && state_bytes_ > 0) queued |= copy_out(Part::kState, slot, c->state);
  if (queued) c->ready = copier_->fence();
  return c;
}

void KvPageIo::load(const PageContents& c, int32_t page, int32_t swa_page, int32_t slot) {
  // Pool bytes are read by the device in stream order and never written by the host, so they may be
  // dropped at once; heap bytes (Ops::copy from pageable memory) are waited for before they may be freed.
  bool all_queued = true;
  if (page >= 0) all_queued &= copy_in(Part::kKv, page, c.kv);
  if (swa_page >= 0) all_queued &= copy_in(Part::kSwa, swa_page, c.swa);
  if (slot >= 0) all_queued &= copy_in(Part::kState, slot, c.state);
  if (!all_queued) ops_->synchronize();
}

std::string KvPageIo::layout() const {
  const KvCacheConfig& c = kv_->config();
  std::string s = fmt::format("kv dtype {}, page size {}, {} layers\n", dtype_name(c.dtype), c.page_size, c.n_layer);
  const char* names[3] = {"kv", "swa", "state"};
  for (int p = 0; p < 3; ++p) {
    s += names[p];
    for (const Tensor& t : parts_[p]) s += fmt::format(" {}{}", dtype_name(t.dtype), t.slice(0, 1).shape_str());
    s += '\n';
  }
  return s;
}

}  // namespace ft
