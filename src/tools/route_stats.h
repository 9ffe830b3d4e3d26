#pragma once
// RouteCounter: which routed experts an Engine's MoE layers pick, measured from outside the model.
// It hooks the engine's named intermediates (Engine::set_dump_hook), takes each MoE layer's router
// input `ffn_norm` [T, H] to the host and recomputes the router's top-k there from the checkpoint's
// router weights (dequantized to F32). Top-k of the logits equals top-k of their softmax or sigmoid,
// so the scoring function does not matter; grouped top-k (DeepSeek) and routing biases are not
// modelled. Used by `ft bench` (experts read per decode step) and the router-skew tests. Slow
// (host matmul per layer): for sampled steps only, never inside timed ones.
#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace ft {

class RouteCounter {
 public:
  /** Reads every layer's router ([E, H]; GGUF blk.L.ffn_gate_inp.weight, HF mlp.gate or
   *  block_sparse_moe.gate) from engine.checkpoint(). A model without routers gives available()
   *  false. Throws ft::Error(kUnsupported) for a router dtype quant/ cannot dequantize. */
  explicit RouteCounter(Engine& engine);
  RouteCounter(const RouteCounter&) = delete;
  RouteCounter& operator=(const RouteCounter&) = delete;
  ~RouteCounter();

  bool available() const { return n_moe_layers_ > 0; }
  /** Starts counting: installs the dump hook (replacing any other). */
  void attach();
  /** Stops counting: removes the dump hook. */
  void detach();
  /** Clears the counters. */
  void reset();

  /** Selections per layer and expert: counts()[l][e] (an empty row for a dense layer). */
  const std::vector<std::vector<int64_t>>& counts() const { return counts_; }
  /** (forward, MoE layer) pairs seen since reset(). */
  int64_t layer_steps() const { return layer_steps_; }
  /** Mean number of distinct experts one MoE layer used in one forward (0 before any). */
  double mean_distinct() const { return layer_steps_ ? static_cast<double>(distinct_sum_) / layer_steps_ : 0.0; }

 private:
  void count(int64_t layer, const Tensor& h);

  Engine& engine_;
  bool attached_ = false;
  int64_t n_expert_ = 0, k_ = 0, n_embd_ = 0, n_moe_layers_ = 0;
  std::vector<std::vector<float>> routers_;  // [layer] -> [E * H] floats (empty: dense layer)
  std::vector<std::vector<int64_t>> counts_;
  int64_t layer_steps_ = 0, distinct_sum_ = 0;
  std::vector<float> h_, logits_;
  std::vector<int32_t> order_;
  std::vector<uint8_t> seen_;
};

}  // namespace ft
