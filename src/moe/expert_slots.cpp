#include "moe/expert_slots.h"

#include <algorithm>
#include <cstring>

#include "util/error.h"

namespace ft {

const Tensor& expert_bias(const ExpertBank& bank, int j) {
  return j == 0 ? bank.gate_bias : j == 1 ? bank.up_bias : bank.down_bias;
}

int64_t SlotBiases::plan(const ExpertBanks& src, int32_t n_slots, float* base) {
  rows.assign(static_cast<size_t>(src.n_layers()), {nullptr, nullptr, nullptr});
  std::vector<std::pair<int64_t, int64_t>> arrays[3];  // per kind: (width, offset in floats)
  int64_t total = 0;
  for (int64_t l = 0; l < src.n_layers(); ++l) {
    if (src.n_expert(l) == 0) continue;
    const ExpertLayout& lay = src.layout(l);
    for (int j = 0; j < 3; ++j) {
      if (expert_bias(src.bank(l), j).empty()) continue;
      const int64_t width = j == 2 ? lay.n_embd : lay.n_ff;
      auto& kind = arrays[j];
      auto it = std::find_if(kind.begin(), kind.end(), [&](const auto& a) { return a.first == width; });
      if (it == kind.end()) {
        kind.emplace_back(width, total);
        total += static_cast<int64_t>(n_slots) * width;
        it = kind.end() - 1;
      }
      if (base) rows[static_cast<size_t>(l)][static_cast<size_t>(j)] = base + it->second;
    }
  }
  return total;
}

namespace {

/** What a slot bank must share with a layer besides the layout: the GLU and which biases it has. */
struct BankForm {
  ExpertLayout layout;
  ExpertGlu glu = ExpertGlu::kSwiglu;
  float alpha = 0.0f, limit = 0.0f;
  bool bias[3] = {false, false, false};
  bool operator==(const BankForm& o) const {
    return layout == o.layout && glu == o.glu && alpha == o.alpha && limit == o.limit && bias[0] == o.bias[0] &&
           bias[1] == o.bias[1] && bias[2] == o.bias[2];
  }
};

BankForm form_of(const ExpertBanks& src, int64_t l) {
  const ExpertBank& b = src.bank(l);
  BankForm f;
  f.layout = src.layout(l);
  f.glu = b.glu;
  if (b.glu == ExpertGlu::kSwigluOai || b.glu == ExpertGlu::kSwigluClamp) f.alpha = b.glu_alpha, f.limit = b.glu_limit;
  for (int j = 0; j < 3; ++j) f.bias[j] = !expert_bias(b, j).empty();
  return f;
}

}  // namespace

void SlotBanks::build(const ExpertBanks& src, uint8_t* pool, int32_t n_slots, Device device, const SlotBiases& biases,
                      int32_t first_slot) {
  banks.clear();
  bank_of.assign(static_cast<size_t>(src.n_layers()), -1);
  std::vector<BankForm> forms;
  for (int64_t l = 0; l < src.n_layers(); ++l) {
    if (src.n_expert(l) == 0) continue;
    const BankForm form = form_of(src, l);
    const ExpertLayout& lay = form.layout;
    size_t i = 0;
    while (i < forms.size() && !(forms[i] == form)) ++i;
    if (i == forms.size()) {
      forms.push_back(form);
      banks.emplace_back();
      ExpertBank& b = banks.back();
      // Every slot viewed with this layout: slot s = pool + s * slot_bytes.
      for (int32_t s = 0; s < n_slots; ++s) {
        uint8_t* r = pool + static_cast<int64_t>(s) * src.slot_bytes();
        b.gate.push_back(lay.gate(r, device));
        b.up.push_back(lay.up(r, device));
        b.down.push_back(lay.down(r, device));
      }
      const ExpertBank& sb = src.bank(l);
      b.glu = sb.glu, b.glu_alpha = sb.glu_alpha, b.glu_limit = sb.glu_limit;
      for (int j = 0; j < 3; ++j) {
        if (!form.bias[j]) continue;
        const int64_t width = j == 2 ? lay.n_embd : lay.n_ff;
        float* rows = biases.at(l, j);  // shared by the layers of this form (one width)
        if (!rows)
          fail(ErrorCode::kInternal, "expert slots: layer {} has {} biases but the slots keep none", l,
               j == 0 ? "gate" : j == 1 ? "up" : "down");
        Tensor view(rows + static_cast<int64_t>(first_slot) * width, DType::F32, {static_cast<int64_t>(n_slots), width},
                    device);
        (j == 0 ? b.gate_bias : j == 1 ? b.up_bias : b.down_bias) = view;
      }
    }
    bank_of[static_cast<size_t>(l)] = static_cast<int32_t>(i);
  }
}

const ExpertBank& SlotBanks::at(int32_t layer) const {
  if (layer < 0 || static_cast<size_t>(layer) >= bank_of.size() || bank_of[static_cast<size_t>(layer)] < 0)
    fail(ErrorCode::kInvalidArgument, "expert slots: layer {} has no routed experts", layer);
  return banks[static_cast<size_t>(bank_of[static_cast<size_t>(layer)])];
}

void ExpertSlots::build_regions(const ExpertBanks& src, uint8_t* pool, int32_t n_slots, Device device,
                                const SlotBiases& biases) {
  const int32_t E = src.max_experts();
  n_regions_ = n_slots / E >= 2 ? 2 : 0;  // two: the rest of the pool keeps its experts through a prefill
  regions_first_ = n_slots - n_regions_ * E;
  region_width_ = E;
  regions_.assign(static_cast<size_t>(n_regions_), SlotBanks{});
  for (int32_t r = 0; r < n_regions_; ++r)
    regions_[static_cast<size_t>(r)].build(src, pool + static_cast<int64_t>(region_first(r)) * src.slot_bytes(), E,
                                           device, biases, region_first(r));
}

int32_t ExpertSlots::check_stream_args(const ExpertBanks& src, int32_t layer, int32_t region,
                                       int32_t cpu_share_q16) const {
  if (layer < 0 || layer >= src.n_layers() || src.n_expert(layer) == 0)
    fail(ErrorCode::kInvalidArgument, "expert slots: layer {} has no routed experts", layer);
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {}) ({} slots)", region, n_regions_,
         n_slots());
  if (cpu_share_q16 < 0 || cpu_share_q16 > 65536)
    fail(ErrorCode::kInvalidArgument, "expert slots: a streamed layer's CPU share {} / 65536 outside [0, 65536]",
         cpu_share_q16);
  return region_first(region);
}

void ExpertSlots::check_split_args(Device device, int32_t region, const Tensor& ids, const Tensor& gpu_ids,
                                   const Tensor& cpu_ids) const {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions_);
  if (ids.dtype != DType::I32 || ids.ndim != 2 || ids.device != device)
    fail(ErrorCode::kInvalidArgument, "expert slots: ids {} on {} must be I32 [T, k] on {}", ids.str(),
         device_name(ids.device), device_name(device));
  const char* names[2] = {"gpu_ids", "cpu_ids"};
  const Tensor* outs[2] = {&gpu_ids, &cpu_ids};
  for (int i = 0; i < 2; ++i)
    if (outs[i]->dtype != DType::I32 || !outs[i]->has_shape({ids.dim(0), ids.dim(1)}) || outs[i]->device != device)
      fail(ErrorCode::kInvalidArgument, "expert slots: {} {} must be I32 {} on {}", names[i], outs[i]->str(),
           ids.shape_str(), device_name(device));
}

const ExpertBank& ExpertSlots::region_bank(int32_t layer, int32_t region) const {
  if (region < 0 || region >= n_regions_)
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions_);
  return regions_[static_cast<size_t>(region)].at(layer);
}

void check_admit_args(const ExpertBanks& banks, Device device, int32_t max_pairs, int32_t layer, const Tensor& ids,
                      const Tensor& slot_ids, const Tensor& cpu_ids) {
  if (layer < 0 || layer >= banks.n_layers() || banks.n_expert(layer) == 0)
    fail(ErrorCode::kInvalidArgument, "expert slots: layer {} has no routed experts", layer);
  if (ids.dtype != DType::I32 || ids.ndim != 2 || ids.device != device)
    fail(ErrorCode::kInvalidArgument, "expert slots: ids {} on {} must be I32 [T, k] on {}", ids.str(),
         device_name(ids.device), device_name(device));
  if (ids.numel() > max_pairs)
    fail(ErrorCode::kInvalidArgument, "expert slots: ids {} has more than the {} pairs planned per admission",
         ids.str(), max_pairs);
  const char* names[2] = {"slot_ids", "cpu_ids"};
  const Tensor* outs[2] = {&slot_ids, &cpu_ids};
  for (int i = 0; i < 2; ++i) {
    if (i == 1 && cpu_ids.empty()) continue;
    const Tensor& t = *outs[i];
    if (t.dtype != DType::I32 || !t.has_shape({ids.dim(0), ids.dim(1)}) || t.device != device)
      fail(ErrorCode::kInvalidArgument, "expert slots: {} {} must be I32 {} on {}", names[i], t.str(), ids.shape_str(),
           device_name(device));
  }
}

void PrefetchLedger::add_prefetch(int32_t layer, int tag) {
  if (pending_.n == kMaxInFlight)
    fail(ErrorCode::kInternal, "prefetch ledger: more than {} prefetches in flight", kMaxInFlight);
  pending_.at[pending_.n++] = Entry{layer, next_++, false, tag};
}

int32_t PrefetchLedger::spare_for(int32_t layer) const {
  int64_t oldest = next_;
  for (const Entry& e : pending_)
    if (!e.admitted && e.layer != layer) oldest = std::min(oldest, e.index);
  return static_cast<int32_t>(next_ - oldest);
}

int32_t PrefetchLedger::admit(int32_t layer) {
  const int32_t spare = spare_for(layer);
  for (int i = 0; i < pending_.n; ++i)
    if (pending_.at[i].layer == layer) pending_.at[i].admitted = true;
  ++next_;
  return spare;
}

PrefetchLedger::Entries PrefetchLedger::take_due() {
  Entries due, keep;
  for (const Entry& e : pending_) {
    Entries& to = e.admitted || next_ - e.index > kMaxAge ? due : keep;
    to.at[to.n++] = e;
  }
  pending_ = keep;
  return due;
}

PrefetchLedger::Entry PrefetchLedger::take_oldest() {
  if (pending_.n == 0) fail(ErrorCode::kInternal, "prefetch ledger: no prefetch in flight");
  const Entry e = pending_.at[0];
  for (int i = 1; i < pending_.n; ++i) pending_.at[i - 1] = pending_.at[i];
  --pending_.n;
  return e;
}

PrefetchLedger::Entries PrefetchLedger::take_all() {
  const Entries all = pending_;
  pending_.n = 0;
  return all;
}

bool PrefetchLedger::uses(int tag) const {
  for (const Entry& e : pending_)
    if (e.tag == tag) return true;
  return false;
}

HostExpertSlots::HostExpertSlots(const ExpertBanks& banks, int32_t n_slots, int32_t max_pairs)
    : banks_(banks),
      cache_(static_cast<int32_t>(banks.n_layers()), banks.max_experts(), n_slots, max_pairs),
      prefetch_slots_(static_cast<size_t>(cache_.max_pairs())) {
  if (banks.n_moe_layers() == 0) fail(ErrorCode::kInvalidArgument, "expert slots: the model has no routed experts");
  pool_ = allocate_host_pages(static_cast<int64_t>(n_slots) * banks.slot_bytes());
  bias_pool_ = Buffer::host(std::max<int64_t>(biases_.plan(banks, n_slots, nullptr), 1) * 4);
  biases_.plan(banks, n_slots, static_cast<float*>(bias_pool_.data()));
  slot_banks_.build(banks, static_cast<uint8_t*>(pool_.data()), n_slots, Device::kCpu, biases_);
  build_regions(banks, static_cast<uint8_t*>(pool_.data()), n_slots, Device::kCpu, biases_);
}

void HostExpertSlots::copy_biases(int32_t layer, int32_t expert, int32_t slot) {
  const ExpertBank& b = banks_.bank(layer);
  for (int j = 0; j < 3; ++j) {
    const Tensor& t = expert_bias(b, j);
    if (t.empty()) continue;
    const int64_t width = t.dim(1);
    std::memcpy(biases_.at(layer, j) + static_cast<int64_t>(slot) * width, t.ptr<float>() + static_cast<int64_t>(expert) * width,
                static_cast<size_t>(width) * 4);
  }
}

void HostExpertSlots::admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids,
                                   Tensor cpu_ids) {
  check_admit_args(banks_, Device::kCpu, cache_.max_pairs(), layer, ids, slot_ids, cpu_ids);
  cache_.admit(layer, ids.ptr<int32_t>(), static_cast<int32_t>(ids.numel()), policy, banks_.record_bytes(layer),
               slot_ids.ptr<int32_t>(), cpu_ids.empty() ? nullptr : cpu_ids.ptr<int32_t>(), false,
               ledger_.admit(layer));
  ledger_.take_due();  // copied on return: nothing to wait for
}

void HostExpertSlots::prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) {
  Tensor sid(prefetch_slots_.data(), DType::I32, ids.shape.data(), ids.ndim);
  check_admit_args(banks_, Device::kCpu, cache_.max_pairs(), layer, ids, sid, Tensor());
  while (ledger_.in_flight() >= PrefetchLedger::kMaxInFlight) ledger_.take_oldest();
  cache_.admit(layer, ids.ptr<int32_t>(), static_cast<int32_t>(ids.numel()), policy, banks_.record_bytes(layer),
               sid.ptr<int32_t>(), nullptr, true, ledger_.prefetch_spare());
  ledger_.add_prefetch(layer, 0);
  gather_misses();
}

void HostExpertSlots::gather_misses() {  // the gather's twin: one copy (or decode) per missed record
  uint8_t* pool = static_cast<uint8_t*>(pool_.data());
  for (int32_t i = 0; i < cache_.n_misses(); ++i) {
    const CacheMiss& m = cache_.misses()[i];
    banks_.copy_record(m.layer, m.expert, pool + static_cast<int64_t>(m.slot) * banks_.slot_bytes());
    copy_biases(m.layer, m.expert, m.slot);
  }
}

void HostExpertSlots::stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16) {
  const int32_t first = check_stream_args(banks_, layer, region, cpu_share_q16), n = banks_.n_expert(layer);
  ledger_.take_all();
  const int32_t E = banks_.max_experts();
  stream_src_.resize(static_cast<size_t>(n_regions()) * static_cast<size_t>(E));
  int32_t* claim = stream_src_.data() + static_cast<int64_t>(region) * E;
  std::fill(claim + n, claim + E, -1);
  cache_.claim_region(layer, first, n, banks_.record_bytes(layer), claim, region_first(0), cpu_share_q16);
  uint8_t* pool = static_cast<uint8_t*>(pool_.data());
  const int64_t sb = banks_.slot_bytes();
  for (int32_t e = 0; e < n; ++e) {
    const int32_t src = claim[e];
    if (src == kStreamOnCpu) continue;  // the CPU computes it this step: the slot stays empty
    if (src < 0)
      banks_.copy_record(layer, e, pool + static_cast<int64_t>(first + e) * sb);
    else if (src != first + e)  // cached elsewhere: that slot holds the decoded record (first + e: in place)
      std::memcpy(pool + static_cast<int64_t>(first + e) * sb, pool + static_cast<int64_t>(src) * sb, static_cast<size_t>(sb));
    copy_biases(layer, e, first + e);
  }
}

void HostExpertSlots::split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) {
  check_split_args(Device::kCpu, region, ids, gpu_ids, cpu_ids);
  const int32_t E = banks_.max_experts();
  if (stream_src_.empty())
    fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} streamed no layer yet", region);
  const int32_t* claim = stream_src_.data() + static_cast<int64_t>(region) * E;
  const int32_t* in = ids.ptr<int32_t>();
  int32_t* g = gpu_ids.ptr<int32_t>();
  int32_t* c = cpu_ids.ptr<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {  // as moe_stream_split.cu
    const int32_t e = in[i];
    const bool valid = e >= 0 && e < E, on_cpu = valid && claim[e] == kStreamOnCpu;
    g[i] = valid && !on_cpu ? e : -1;
    c[i] = on_cpu ? e : -1;
  }
}

std::vector<CacheLayerStats> HostExpertSlots::stats() {
  std::vector<CacheLayerStats> out;
  for (int32_t l = 0; l < cache_.n_layers(); ++l) out.push_back(cache_.stats(l));
  return out;
}

void HostExpertSlots::copy_state_to(ExpertCache& dst) {
  cache_.check_same_geometry(dst);
  dst = cache_;
}

std::vector<CacheMiss> HostExpertSlots::last_misses() {
  return std::vector<CacheMiss>(cache_.misses(), cache_.misses() + cache_.n_misses());
}

const uint8_t* HostExpertSlots::slot_data(int32_t slot) const {
  if (slot < 0 || slot >= cache_.n_slots())
    fail(ErrorCode::kInvalidArgument, "expert slots: slot {} outside [0, {})", slot, cache_.n_slots());
  return static_cast<const uint8_t*>(pool_.data()) + static_cast<int64_t>(slot) * banks_.slot_bytes();
}

}  // namespace ft
