#include "tools/route_stats.h"

#include <algorithm>

#include <fmt/format.h>

#include "quant/quant.h"
#include "util/error.h"

namespace ft {

RouteCounter::RouteCounter(Engine& engine) : engine_(engine) {
  const ModelConfig& c = engine.config();
  n_expert_ = c.n_expert;
  k_ = c.n_expert_used;
  n_embd_ = c.n_embd;
  routers_.resize(static_cast<size_t>(c.n_layer));
  counts_.resize(static_cast<size_t>(c.n_layer));
  if (n_expert_ <= 0 || k_ <= 0) return;
  const Checkpoint& ckpt = engine.checkpoint();
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const TensorInfo* t = nullptr;
    for (const std::string& name : {fmt::format("blk.{}.ffn_gate_inp.weight", l),
                                    fmt::format("model.layers.{}.mlp.gate.weight", l),
                                    fmt::format("model.layers.{}.block_sparse_moe.gate.weight", l)})
      if (!t) t = ckpt.find(name);
    if (!t || t->numel() != n_expert_ * n_embd_) continue;
    std::vector<float>& w = routers_[static_cast<size_t>(l)];
    w.resize(static_cast<size_t>(t->numel()));
    dequantize_row(t->dtype, t->data, w.data(), t->numel());
    counts_[static_cast<size_t>(l)].assign(static_cast<size_t>(n_expert_), 0);
    ++n_moe_layers_;
  }
}

RouteCounter::~RouteCounter() { detach(); }

void RouteCounter::attach() {
  engine_.set_dump_hook([this](const std::string& name, int64_t layer, const Tensor& t) {
    if (name == "ffn_norm" && layer >= 0 && layer < static_cast<int64_t>(routers_.size()) &&
        !routers_[static_cast<size_t>(layer)].empty())
      count(layer, t);
  });
  attached_ = true;
}

void RouteCounter::detach() {
  if (attached_) engine_.set_dump_hook(nullptr);
  attached_ = false;
}

void RouteCounter::reset() {
  for (auto& row : counts_) std::fill(row.begin(), row.end(), 0);
  layer_steps_ = 0;
  distinct_sum_ = 0;
}

void RouteCounter::count(int64_t layer, const Tensor& h) {
  const int64_t T = h.numel() / n_embd_, H = n_embd_, E = n_expert_;
  h_.resize(static_cast<size_t>(T * H));
  engine_.ops().copy(h, Tensor(h_.data(), DType::F32, {T, H}));
  const std::vector<float>& w = routers_[static_cast<size_t>(layer)];
  std::vector<int64_t>& cnt = counts_[static_cast<size_t>(layer)];
  logits_.resize(static_cast<size_t>(E));
  order_.resize(static_cast<size_t>(E));
  seen_.assign(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    const float* x = h_.data() + t * H;
    for (int64_t e = 0; e < E; ++e) {
      const float* r = w.data() + e * H;
      float s = 0;
      for (int64_t i = 0; i < H; ++i) s += r[i] * x[i];
      logits_[static_cast<size_t>(e)] = s;
      order_[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    }
    std::partial_sort(order_.begin(), order_.begin() + k_, order_.end(), [&](int32_t a, int32_t b) {
      const float la = logits_[static_cast<size_t>(a)], lb = logits_[static_cast<size_t>(b)];
      return la > lb || (la == lb && a < b);
    });
    for (int64_t j = 0; j < k_; ++j) {
      const auto e = static_cast<size_t>(order_[static_cast<size_t>(j)]);
      ++cnt[e];
      seen_[e] = 1;
    }
  }
  int64_t distinct = 0;
  for (uint8_t s : seen_) distinct += s;
  distinct_sum_ += distinct;
  ++layer_steps_;
}

}  // namespace ft
