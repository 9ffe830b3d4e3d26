#pragma once
// Synthetic routed experts for the moe tests: random weights stored in a chosen dtype (quantized
// with quant/), held as host ExpertBanks, like the views Model::host_experts() gives.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "moe/expert_compute.h"
#include "moe/moe_plan.h"
#include "test_util.h"
#include "quant/quant.h"

namespace ft::testing {

/** Storage-owning host expert banks: layer l has n_expert[l] experts (0 = dense layer). */
struct SyntheticExperts {
  HostExpertBanks banks;
  std::vector<std::vector<uint8_t>> storage;

  /** Random weights in [-a, a] with a = 1/sqrt(cols), stored as `type` (quantize_row). */
  Tensor make(DType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    const float a = 1.0f / std::sqrt(static_cast<float>(cols));
    std::vector<float> v(static_cast<size_t>(rows * cols));
    for (float& f : v) f = a * dist(rng);
    storage.emplace_back(static_cast<size_t>(dtype_bytes(type, rows * cols)));
    if (type == DType::Q6_K) random_q6_k(rng, storage.back().data(), rows * cols / 256, a);  // no quantizer
    else quantize_row(type, v.data(), storage.back().data(), rows * cols);
    return Tensor(storage.back().data(), type, {rows, cols});
  }

  /** Appends a layer of `E` experts (gate/up [F, H] in `gu`, down [H, F] in `dn`). */
  void add_layer(int32_t E, int64_t F, int64_t H, DType gu, DType dn, uint32_t seed) {
    std::mt19937 rng(seed);
    ExpertBank b;
    for (int32_t e = 0; e < E; ++e) {
      b.gate.push_back(make(gu, F, H, rng));
      b.up.push_back(make(gu, F, H, rng));
      b.down.push_back(make(dn, H, F, rng));
    }
    banks.push_back(std::move(b));
  }
  void add_dense_layer() { banks.emplace_back(); }

  /** Sets `n` random values of each BF16 matrix of `layer` to tiny magnitudes (2^-100 and below,
   *  either sign) and exact zeros: high bytes no table of 16 picks, so EC12 (moe/ec12.h) holds them
   *  as exceptions, several in some rows. The function barely changes. */
  void add_ec12_exceptions(size_t layer, int n, uint32_t seed) {
    std::mt19937 rng(seed);
    ExpertBank& b = banks[layer];
    for (std::vector<Tensor>* part : {&b.gate, &b.up, &b.down})
      for (Tensor& t : *part) {
        if (t.dtype != DType::BF16) continue;
        auto* v = static_cast<uint16_t*>(t.data);
        std::uniform_int_distribution<int64_t> at(0, t.numel() - 1);
        for (int i = 0; i < n; ++i) {
          const int64_t j = i % 3 == 2 ? at(rng) % t.dim(1) : at(rng);  // a third land in row 0
          const uint16_t tiny = static_cast<uint16_t>(((27 - i % 20) << 7) | (rng() & 0x7f) | (i % 2 ? 0x8000 : 0));
          v[j] = i % 7 == 6 ? 0 : tiny;
        }
      }
  }
};

/** Router-like ids [T, k]: k distinct experts of E per row, drawn with a skew (Zipf exponent s over a
 *  fixed permutation; s = 0 uniform). */
inline std::vector<int32_t> random_routes(int64_t T, int32_t k, int32_t E, double s, std::mt19937& rng) {
  std::vector<double> w(static_cast<size_t>(E));
  std::vector<int32_t> perm(static_cast<size_t>(E));
  for (int32_t e = 0; e < E; ++e) perm[static_cast<size_t>(e)] = e;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1234));
  for (int32_t e = 0; e < E; ++e) w[static_cast<size_t>(e)] = 1.0 / std::pow(static_cast<double>(e + 1), s);
  std::vector<int32_t> ids;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> ww = w;
    for (int32_t j = 0; j < k; ++j) {
      std::discrete_distribution<int32_t> d(ww.begin(), ww.end());
      const int32_t r = d(rng);
      ww[static_cast<size_t>(r)] = 0;
      ids.push_back(perm[static_cast<size_t>(r)]);
    }
  }
  return ids;
}

/** A plan for layers with experts_per_layer, everything fitting (limit 1 TiB). `by_record_size`: the
 *  cache sized per record size, as the engine plans it (the budget's slot_layers filled, so the plan
 *  has the cache layers' slot classes; `slots` counts over all classes); else one pool of slots. */
inline MoePlan make_plan(const HostExpertBanks& host, MoeStrategy s, int64_t slots, int32_t cap = -1,
                         const std::string& cpu_layers = "", bool by_record_size = false) {
  std::vector<int32_t> e;
  for (const ExpertBank& b : host) e.push_back(b.n_expert());
  GpuMemoryBudget budget;
  budget.gpu_memory_limit = int64_t{1} << 40;
  budget.slot_bytes = 1;
  if (by_record_size) budget.slot_layers = slot_layer_shapes(host);
  MoeOptions o;
  o.strategy = s;
  o.fetch_cap = cap;
  o.cpu_layers = cpu_layers;
  if (slots > 0) o.cache = {CacheSizeMode::kSlots, slots, 0};
  return plan_moe(o, e, budget);
}

/** make_plan with the cache sized per record size. */
inline MoePlan make_class_plan(const HostExpertBanks& host, MoeStrategy s, int64_t slots, int32_t cap = -1,
                               const std::string& cpu_layers = "") {
  return make_plan(host, s, slots, cap, cpu_layers, true);
}

}  // namespace ft::testing
