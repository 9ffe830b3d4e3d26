// Helpers of the preset tests: a synthetic spec of a preset, a small CPU engine over a checkpoint,
// deterministic token ids below 512, and lookups in a synthetic layout.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "engine/engine.h"
#include "formats/checkpoint.h"
#include "model/fixture_util.h"
#include "tools/synthetic_checkpoint.h"
#include "tools/greedy_request.h"
#include "tools/synthetic_weights.h"

namespace ft {

inline SyntheticSpec spec_of(const std::string& preset, DType type, int64_t layers = 0) {
  SyntheticSpec s;
  s.preset = preset;
  s.weight_type = type;
  s.n_layer = layers;
  s.threads = 1;
  return s;
}

inline std::unique_ptr<Engine> cpu_engine(std::unique_ptr<Checkpoint> ckpt,
                                          MoeStrategy strategy = MoeStrategy::kAuto) {
  EngineOptions eo = testing::small_engine_options();  // 1 thread, pages of 16
  eo.kv_tokens = 512;
  eo.max_step_tokens = 128;
  eo.max_logit_rows = 128;
  eo.max_seqs = 2;
  eo.moe.strategy = strategy;
  return std::make_unique<Engine>(std::move(ckpt), std::make_unique<CpuOps>(1), eo);
}

inline std::vector<int32_t> ids(int64_t n, uint64_t seed) {
  SynthRng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.next() % 512);
  return v;
}

inline GenerateRequest greedy(std::vector<int32_t> prompt, int64_t n) {
  return testing::greedy_with_logits(std::move(prompt), n);
}

inline const TensorInfo* find(const SyntheticLayout& l, const std::string& name) {
  for (const TensorInfo& t : l.tensors)
    if (t.name == name) return &t;
  return nullptr;
}

inline void expect_tensor(const SyntheticLayout& l, const std::string& name, std::vector<int64_t> shape, DType type) {
  const TensorInfo* t = find(l, name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->shape, shape) << name;
  EXPECT_EQ(t->dtype, type) << name << ": " << dtype_name(t->dtype);
}

}  // namespace ft
