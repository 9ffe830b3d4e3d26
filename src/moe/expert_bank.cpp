#include "moe/expert_bank.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "moe/ec12.h"
#include "util/error.h"
#include "util/progress.h"

namespace ft {
namespace {

int64_t align_up(int64_t v) { return (v + kExpertAlign - 1) / kExpertAlign * kExpertAlign; }

/** The three matrices of an expert of `bank`, in record order. */
std::array<const Tensor*, 3> parts_of(const ExpertBank& bank, int32_t e) {
  return {&bank.gate[static_cast<size_t>(e)], &bank.up[static_cast<size_t>(e)], &bank.down[static_cast<size_t>(e)]};
}

/** Geometry of matrix j (gate, up, down) of a layer laid out as `l`, `capacity` exceptions. */
ec12::MatrixGeometry geometry(const ExpertLayout& l, int j, int64_t capacity) {
  return j < 2 ? ec12::MatrixGeometry{l.n_ff, l.n_embd, capacity} : ec12::MatrixGeometry{l.n_embd, l.n_ff, capacity};
}

/** Runs fn(i) for i < n on `n_threads` threads (the caller's among them), items in order; the first
 *  exception stops the rest and is rethrown. */
void parallel_items(int64_t n, int n_threads, const std::function<void(int64_t)>& fn) {
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    try {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < n_threads; ++t) threads.emplace_back(worker);
  worker();
  for (std::thread& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace

bool ec12_bankable(const std::vector<ExpertBank>& host, std::string* why) {
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return false;
  };
  bool any = false;
  for (size_t l = 0; l < host.size(); ++l) {
    const ExpertBank& b = host[l];
    if (b.n_expert() == 0) continue;
    any = true;
    for (int32_t e = 0; e < b.n_expert(); ++e)
      for (const Tensor* t : parts_of(b, e)) {
        if (t->dtype != DType::BF16)
          return no(fmt::format("layer {}'s experts are {}, not BF16", l, dtype_name(t->dtype)));
        if (t->ndim != 2 || !ec12::supports(t->dim(0)) || !ec12::supports(t->dim(1)))
          return no(fmt::format("layer {}'s expert matrices are {}, not multiples of {} in both dimensions", l,
                                t->shape_str(), ec12::kGroup));
      }
  }
  if (!any) return no("the model has no routed experts");
  if (why) why->clear();
  return true;
}

Tensor ExpertLayout::gate(uint8_t* base, Device device) const {
  return Tensor(base + gate_offset, gate_type, {n_ff, n_embd}, device);
}
Tensor ExpertLayout::up(uint8_t* base, Device device) const {
  return Tensor(base + up_offset, up_type, {n_ff, n_embd}, device);
}
Tensor ExpertLayout::down(uint8_t* base, Device device) const {
  return Tensor(base + down_offset, down_type, {n_embd, n_ff}, device);
}

bool ExpertLayout::operator==(const ExpertLayout& o) const {
  return gate_type == o.gate_type && up_type == o.up_type && down_type == o.down_type && n_ff == o.n_ff &&
         n_embd == o.n_embd && gate_offset == o.gate_offset && up_offset == o.up_offset &&
         down_offset == o.down_offset && bytes == o.bytes;
}

ExpertLayout expert_layout(const ExpertBank& bank, int64_t layer) {
  if (bank.n_expert() == 0) fail(ErrorCode::kInvalidArgument, "expert bank: layer {} has no experts", layer);
  if (bank.up.size() != bank.gate.size() || bank.down.size() != bank.gate.size())
    fail(ErrorCode::kInvalidArgument, "expert bank: layer {} has {} gate, {} up, {} down experts", layer,
         bank.gate.size(), bank.up.size(), bank.down.size());
  const Tensor &g0 = bank.gate[0], &u0 = bank.up[0], &d0 = bank.down[0];
  if (g0.ndim != 2) fail(ErrorCode::kInvalidArgument, "expert bank: layer {} expert 0 gate {} is not 2-D", layer, g0.str());
  ExpertLayout l;
  l.n_ff = g0.dim(0), l.n_embd = g0.dim(1);
  l.gate_type = g0.dtype, l.up_type = u0.dtype, l.down_type = d0.dtype;
  for (size_t e = 0; e < bank.gate.size(); ++e) {
    const Tensor &g = bank.gate[e], &u = bank.up[e], &d = bank.down[e];
    if (!g.has_shape({l.n_ff, l.n_embd}) || !u.has_shape({l.n_ff, l.n_embd}) || !d.has_shape({l.n_embd, l.n_ff}))
      fail(ErrorCode::kInvalidArgument,
           "expert bank: layer {} expert {} has gate {}, up {}, down {}; expected [{}, {}], [{}, {}], [{}, {}]", layer,
           e, g.str(), u.str(), d.str(), l.n_ff, l.n_embd, l.n_ff, l.n_embd, l.n_embd, l.n_ff);
    if (g.dtype != l.gate_type || u.dtype != l.up_type || d.dtype != l.down_type)
      fail(ErrorCode::kInvalidArgument, "expert bank: layer {} expert {} has dtypes {}/{}/{}, expert 0 {}/{}/{}", layer,
           e, dtype_name(g.dtype), dtype_name(u.dtype), dtype_name(d.dtype), dtype_name(l.gate_type),
           dtype_name(l.up_type), dtype_name(l.down_type));
    if (g.device != Device::kCpu || u.device != Device::kCpu || d.device != Device::kCpu)
      fail(ErrorCode::kInvalidArgument, "expert bank: layer {} expert {} is not in host memory", layer, e);
  }
  l.gate_offset = 0;
  l.up_offset = align_up(g0.bytes());
  l.down_offset = l.up_offset + align_up(u0.bytes());
  l.bytes = l.down_offset + align_up(d0.bytes());
  return l;
}

void append_record_views(const ExpertLayout& layout, uint8_t* base, int64_t n, Device device, ExpertBank& bank) {
  for (int64_t e = 0; e < n; ++e) {
    uint8_t* r = base + e * layout.bytes;
    bank.gate.push_back(layout.gate(r, device));
    bank.up.push_back(layout.up(r, device));
    bank.down.push_back(layout.down(r, device));
  }
}

ExpertBanks::ExpertBanks(const std::vector<ExpertBank>& host, HostAllocator& alloc, int n_threads,
                         const std::function<void(int64_t layer)>& layer_filled, bool layer_filled_frees_memory,
                         BankFormat format, ProgressSink* progress, const HostMemoryProbe& host_room)
    : format_(format) {
  std::string why;
  if (format == BankFormat::kEc12 && !ec12_bankable(host, &why))
    fail(ErrorCode::kInvalidArgument, "expert banks: --moe-bank-format ec12 needs BF16 experts whose dimensions are "
         "multiples of {}, but {} (use --moe-bank-format stored or auto)", ec12::kGroup, why);
  layers_.resize(host.size());
  std::vector<std::pair<int64_t, int32_t>> items;  // (layer, expert) records to fill
  for (size_t l = 0; l < host.size(); ++l) {
    if (host[l].n_expert() == 0) continue;
    Layer& L = layers_[l];
    L.layout = L.record = expert_layout(host[l], static_cast<int64_t>(l));
    L.n_expert = host[l].n_expert();
    ++n_moe_layers_;
    max_experts_ = std::max(max_experts_, L.n_expert);
    slot_bytes_ = std::max(slot_bytes_, L.layout.bytes);
    for (int32_t e = 0; e < L.n_expert; ++e) items.emplace_back(static_cast<int64_t>(l), e);
  }
  int64_t source_bytes = 0;  // what the fill reads (EC12: each pass half of them, as reported)
  for (const auto& [l, e] : items)
    for (const Tensor* t : parts_of(host[static_cast<size_t>(l)], e)) source_bytes += t->bytes();
  ProgressPhase phase(progress, "expert banks", source_bytes);
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int nt = static_cast<int>(std::min<int64_t>(n_threads > 0 ? n_threads : hw, static_cast<int64_t>(items.size())));
  // EC12: each matrix's table and exception count first; a layer's records hold its largest count.
  std::vector<std::array<ec12::MatrixStats, 3>> stats(format == BankFormat::kEc12 ? items.size() : 0);
  if (format == BankFormat::kEc12) {
    parallel_items(static_cast<int64_t>(items.size()), nt, [&](int64_t i) {
      const auto [l, e] = items[static_cast<size_t>(i)];
      const auto parts = parts_of(host[static_cast<size_t>(l)], e);
      for (int j = 0; j < 3; ++j) {
        stats[static_cast<size_t>(i)][j] =
            ec12::analyze(static_cast<const uint16_t*>(parts[j]->data), parts[j]->numel());
        phase.add(parts[j]->bytes() / 2);
      }
    });
    for (size_t i = 0; i < items.size(); ++i)
      for (int j = 0; j < 3; ++j) {
        int64_t& c = layers_[static_cast<size_t>(items[i].first)].ec12_capacity[j];
        c = std::max(c, stats[i][j].exceptions);
      }
    for (Layer& L : layers_) {
      if (L.n_expert == 0) continue;
      int64_t* offs[3] = {&L.record.gate_offset, &L.record.up_offset, &L.record.down_offset};
      int64_t at = 0;
      for (int j = 0; j < 3; ++j) {
        *offs[j] = at;
        at += align_up(geometry(L.layout, j, L.ec12_capacity[j]).bytes());
      }
      L.record.bytes = at;
      L.record.gate_type = L.record.up_type = L.record.down_type = DType::EC12;
    }
  }
  int64_t layer_max = 0, min_experts = INT64_MAX;
  for (const Layer& L : layers_)
    if (L.n_expert > 0) {
      total_bytes_ += L.record.bytes * L.n_expert;
      layer_max = std::max(layer_max, L.record.bytes * L.n_expert);
      min_experts = std::min<int64_t>(min_experts, L.n_expert);
    }
  // Before any bank memory is touched. The workers take records in layer order, so the layers not
  // yet complete (not yet released by layer_filled) number at most 2 + workers / experts per layer.
  const bool released = layer_filled && layer_filled_frees_memory;
  const int64_t in_flight = total_bytes_ > 0 ? (2 + nt / min_experts) * layer_max : 0;
  const HostMemoryProbe room = host_room ? host_room : HostMemoryProbe([] { return host_memory_room(); });
  const int64_t room_start = total_bytes_ > 0 ? room() : -1;
  if (total_bytes_ > 0) check_bank_host_memory(total_bytes_, in_flight, released, room_start);
  for (Layer& L : layers_)
    if (L.n_expert > 0) {
      L.memory = alloc.allocate(L.record.bytes * L.n_expert);
      L.base = static_cast<uint8_t*>(L.memory.data());
    }
  // Parallel fill: each worker writes whole records (reads fault the mapped checkpoint in).
  std::vector<std::atomic<int32_t>> remaining(host.size());  // records left to write per layer
  for (size_t l = 0; l < host.size(); ++l) remaining[l] = layers_[l].n_expert;
  // Before each MoE layer after the first (checked above), host memory is measured again: what the
  // records not yet written need (a releasing checkpoint: the layers in flight) and kBankFillReserve
  // must still fit.
  std::atomic<int64_t> written{0};  // bytes of records written
  std::mutex room_mu;               // one measurement at a time
  parallel_items(static_cast<int64_t>(items.size()), nt, [&](int64_t i) {
    const auto [l, e] = items[static_cast<size_t>(i)];
    const Layer& L = layers_[static_cast<size_t>(l)];
    if (e == 0 && i > 0) {
      std::lock_guard<std::mutex> lock(room_mu);
      const int64_t now = room(), left = total_bytes_ - written.load();
      const int64_t still = released ? std::min(in_flight, left) : left;
      if (now >= 0 && still + kBankFillReserve > now)
        throw host_memory_shrunk(l, still + kBankFillReserve, still, released, now, room_start);
    }
    uint8_t* r = L.base + e * L.record.bytes;
    const auto parts = parts_of(host[static_cast<size_t>(l)], e);
    const int64_t offs[4] = {L.record.gate_offset, L.record.up_offset, L.record.down_offset, L.record.bytes};
    for (int j = 0; j < 3; ++j) {
      int64_t n = parts[j]->bytes();
      if (format == BankFormat::kEc12) {
        const ec12::MatrixStats& st = stats[static_cast<size_t>(i)][j];
        const ec12::MatrixGeometry g = geometry(L.layout, j, L.ec12_capacity[j]);
        ec12::encode(static_cast<const uint16_t*>(parts[j]->data), g, st, r + offs[j]);
        n = g.bytes();
      } else {
        std::memcpy(r + offs[j], parts[j]->data, static_cast<size_t>(n));
      }
      std::memset(r + offs[j] + n, 0, static_cast<size_t>(offs[j + 1] - offs[j] - n));  // padding
      phase.add(format == BankFormat::kEc12 ? parts[j]->bytes() - parts[j]->bytes() / 2 : parts[j]->bytes());
    }
    written += L.record.bytes;
    if (--remaining[static_cast<size_t>(l)] == 0 && layer_filled) layer_filled(l);
  });
  // Pin after fill, then build the host views.
  for (Layer& L : layers_) {
    if (L.n_expert == 0) continue;
    L.device = alloc.pin(L.memory);
    append_record_views(L.record, L.base, L.n_expert, Device::kCpu, L.views);
  }
  phase.finish();
  // The host views compute as the host bank does: its GLU and its biases (host tensors the model
  // owns, indexed by expert id; records hold the matrices only).
  for (size_t l = 0; l < host.size(); ++l) {
    ExpertBank& v = layers_[l].views;
    v.glu = host[l].glu, v.glu_alpha = host[l].glu_alpha, v.glu_limit = host[l].glu_limit;
    v.gate_bias = host[l].gate_bias, v.up_bias = host[l].up_bias, v.down_bias = host[l].down_bias;
  }
}

const ExpertBanks::Layer& ExpertBanks::at(int64_t layer) const {
  if (layer < 0 || layer >= n_layers())
    fail(ErrorCode::kInvalidArgument, "expert banks: layer {} outside [0, {})", layer, n_layers());
  return layers_[static_cast<size_t>(layer)];
}

const ExpertLayout& ExpertBanks::layout(int64_t layer) const {
  const Layer& L = at(layer);
  if (L.n_expert == 0) fail(ErrorCode::kInvalidArgument, "expert banks: layer {} has no routed experts", layer);
  return L.layout;
}

const ExpertLayout& ExpertBanks::record_layout(int64_t layer) const {
  const Layer& L = at(layer);
  if (L.n_expert == 0) fail(ErrorCode::kInvalidArgument, "expert banks: layer {} has no routed experts", layer);
  return L.record;
}

const uint8_t* ExpertBanks::record(int64_t layer, int32_t expert) const {
  const Layer& L = at(layer);
  if (expert < 0 || expert >= L.n_expert)
    fail(ErrorCode::kInvalidArgument, "expert banks: expert {} outside layer {}'s {} experts", expert, layer, L.n_expert);
  return L.base + expert * L.record.bytes;
}

void ExpertBanks::copy_record(int64_t layer, int32_t expert, uint8_t* dst) const {
  const uint8_t* src = record(layer, expert);
  const Layer& L = layers_[static_cast<size_t>(layer)];
  if (format_ == BankFormat::kStored) {
    std::memcpy(dst, src, static_cast<size_t>(L.layout.bytes));
    return;
  }
  const int64_t enc[3] = {L.record.gate_offset, L.record.up_offset, L.record.down_offset};
  const int64_t dec[4] = {L.layout.gate_offset, L.layout.up_offset, L.layout.down_offset, L.layout.bytes};
  for (int j = 0; j < 3; ++j) {
    const ec12::MatrixGeometry g = geometry(L.layout, j, 0);
    const int64_t n = g.rows * g.cols * 2;
    ec12::decode_rows(src + enc[j], g.rows, g.cols, 0, g.rows, reinterpret_cast<uint16_t*>(dst + dec[j]));
    std::memset(dst + dec[j] + n, 0, static_cast<size_t>(dec[j + 1] - dec[j] - n));
  }
}

std::unique_ptr<ExpertBanks> ExpertBanks::view(const std::vector<int64_t>& layers) const {
  if (layers.empty()) fail(ErrorCode::kInvalidArgument, "expert banks: a view of no layers");
  std::unique_ptr<ExpertBanks> v(new ExpertBanks());
  v->layers_.resize(layers_.size());
  v->format_ = format_;
  for (int64_t l : layers) {
    const Layer& L = at(l);
    if (L.n_expert == 0) fail(ErrorCode::kInvalidArgument, "expert banks: a view of layer {}, which has no routed experts", l);
    Layer& V = v->layers_[static_cast<size_t>(l)];
    if (V.n_expert > 0) continue;  // named twice
    V.layout = L.layout, V.record = L.record, V.ec12_capacity = L.ec12_capacity, V.n_expert = L.n_expert;
    V.base = L.base, V.device = L.device, V.views = L.views;
    ++v->n_moe_layers_;
    v->max_experts_ = std::max(v->max_experts_, L.n_expert);
    v->slot_bytes_ = std::max(v->slot_bytes_, L.layout.bytes);
    v->total_bytes_ += L.record.bytes * L.n_expert;
  }
  return v;
}

}  // namespace ft
