#include "moe/slot_classes.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "backend/ops.h"
#include "moe/expert_bank.h"
#include "util/error.h"

namespace ft {

int64_t SlotClass::min_slots() const { return std::min<int64_t>(2 * int64_t{max_experts}, total_experts); }

std::string SlotClass::layer_list() const {
  std::string s;
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]);
    i = j + 1;
  }
  return s;
}

std::vector<SlotLayerShape> slot_layer_shapes(const std::vector<ExpertBank>& host, const std::vector<int64_t>& layers) {
  std::vector<SlotLayerShape> out;
  for (size_t l = 0; l < host.size(); ++l) {
    if (host[l].n_expert() == 0) continue;
    if (!layers.empty() && std::find(layers.begin(), layers.end(), static_cast<int64_t>(l)) == layers.end()) continue;
    SlotLayerShape s;
    s.layer = static_cast<int64_t>(l);
    s.record_bytes = expert_layout(host[l], s.layer).bytes;
    s.n_expert = host[l].n_expert();
    const Tensor* biases[3] = {&host[l].gate_bias, &host[l].up_bias, &host[l].down_bias};
    for (int j = 0; j < 3; ++j)
      if (!biases[j]->empty()) s.bias_rows.emplace_back(j, biases[j]->cols());
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

/** A class being formed: its layers' shapes. */
struct Group {
  std::vector<const SlotLayerShape*> layers;
  int64_t record_bytes = 0;
  int64_t total = 0;
  int32_t max_experts = 0;
  void add(const Group& o) {
    layers.insert(layers.end(), o.layers.begin(), o.layers.end());
    record_bytes = std::max(record_bytes, o.record_bytes);
    total += o.total;
    max_experts = std::max(max_experts, o.max_experts);
  }
  bool streams() const { return total >= 2 * int64_t{max_experts}; }
};

/** Merges groups[i + 1] (the smaller records) into groups[i]. */
void merge_next(std::vector<Group>& groups, size_t i) {
  groups[i].add(groups[i + 1]);
  groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(i + 1));
}

SlotClass finish(const Group& g) {
  SlotClass c;
  c.record_bytes = g.record_bytes;
  c.max_experts = g.max_experts;
  c.total_experts = g.total;
  std::vector<std::pair<int, int64_t>> rows;
  for (const SlotLayerShape* s : g.layers) {
    c.layers.push_back(s->layer);
    for (const auto& r : s->bias_rows)
      if (std::find(rows.begin(), rows.end(), r) == rows.end()) rows.push_back(r);
  }
  std::sort(c.layers.begin(), c.layers.end());
  for (const auto& r : rows) c.bias_bytes += r.second * 4;
  return c;
}

}  // namespace

std::vector<SlotClass> slot_classes(const std::vector<SlotLayerShape>& layers) {
  std::vector<Group> groups;  // one per record size, largest first
  for (const SlotLayerShape& s : layers) {
    if (s.n_expert < 1 || s.record_bytes < 1)
      fail(ErrorCode::kInvalidArgument, "expert slot classes: layer {} has {} experts of {} bytes", s.layer, s.n_expert,
           s.record_bytes);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const Group& g) { return g.record_bytes == s.record_bytes; });
    if (it == groups.end()) {
      groups.emplace_back();
      it = groups.end() - 1;
      it->record_bytes = s.record_bytes;
    }
    it->layers.push_back(&s);
    it->total += s.n_expert;
    it->max_experts = std::max(it->max_experts, s.n_expert);
  }
  std::sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.record_bytes > b.record_bytes; });
  // Records within 1/8 of the larger class's: one class.
  for (size_t i = 0; i + 1 < groups.size();)
    if (groups[i + 1].record_bytes * 8 >= groups[i].record_bytes * 7) merge_next(groups, i);
    else ++i;
  // Every class holds two staging regions' worth of experts.
  for (size_t i = 0; i < groups.size() && groups.size() > 1;) {
    if (groups[i].streams()) {
      ++i;
      continue;
    }
    if (i > 0) merge_next(groups, i - 1), i = i - 1;  // into the larger neighbour (then look at it again)
    else merge_next(groups, 0);                        // the largest takes the next smaller
  }
  while (groups.size() > static_cast<size_t>(kMaxSlotClasses)) {
    size_t best = 0;
    int64_t best_waste = -1;
    for (size_t i = 0; i + 1 < groups.size(); ++i) {
      const int64_t waste = (groups[i].record_bytes - groups[i + 1].record_bytes) * groups[i + 1].total;
      if (best_waste < 0 || waste < best_waste) best = i, best_waste = waste;
    }
    merge_next(groups, best);
  }
  std::vector<SlotClass> out;
  for (const Group& g : groups) out.push_back(finish(g));
  return out;
}

std::vector<int64_t> split_slots(const std::vector<SlotClass>& classes, int64_t n_slots) {
  int64_t lo = 0, hi = 0;
  for (const SlotClass& c : classes) lo += c.min_slots(), hi += c.total_experts;
  if (classes.empty() || n_slots < lo || n_slots > hi)
    fail(ErrorCode::kInvalidArgument, "expert slot classes: {} slots outside [{}, {}] for {} classes", n_slots, lo, hi,
         classes.size());
  // Proportional shares, clamped to each class's bounds, then the difference to n_slots one slot at a
  // time to the class furthest from its share (ties: the first, so the split is deterministic).
  std::vector<double> share(classes.size());
  std::vector<int64_t> n(classes.size());
  int64_t sum = 0;
  for (size_t c = 0; c < classes.size(); ++c) {
    share[c] = static_cast<double>(n_slots) * static_cast<double>(classes[c].total_experts) / static_cast<double>(hi);
    n[c] = std::clamp(static_cast<int64_t>(share[c]), classes[c].min_slots(), classes[c].total_experts);
    sum += n[c];
  }
  while (sum != n_slots) {
    const bool grow = sum < n_slots;
    size_t pick = classes.size();
    double best = 0.0;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (grow ? n[c] >= classes[c].total_experts : n[c] <= classes[c].min_slots()) continue;
      const double gap = grow ? share[c] - static_cast<double>(n[c]) : static_cast<double>(n[c]) - share[c];
      if (pick == classes.size() || gap > best) pick = c, best = gap;
    }
    n[pick] += grow ? 1 : -1;  // some class has room: n_slots is within [lo, hi]
    sum += grow ? 1 : -1;
  }
  return n;
}

int64_t slot_pool_bytes(const std::vector<SlotClass>& classes, const std::vector<int64_t>& counts) {
  int64_t bytes = 0;
  for (size_t c = 0; c < classes.size() && c < counts.size(); ++c) bytes += counts[c] * classes[c].slot_bytes();
  return bytes;
}

}  // namespace ft
