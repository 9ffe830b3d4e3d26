#pragma once
// Shared helpers of the model/engine tests: reference.json cases, relative L2 per position, and
// running a checkpoint through the engine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/generate.h"
#include "formats/checkpoint.h"
#include "quant/quant.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {

struct RefCase {
  std::string name;
  std::vector<int32_t> input_ids;
  std::vector<float> logits;  // [tokens, vocab]
  std::vector<int32_t> greedy;
};

/** The cases of `dir`/`file` (reference.json layout), logits files read from `dir`. Empty if missing. */
inline std::vector<RefCase> read_reference(const std::string& dir, const std::string& file = "reference.json") {
  std::vector<RefCase> out;
  const std::string text = read_file(dir + "/" + file);
  if (text.empty()) return out;
  const nlohmann::json j = nlohmann::json::parse(text);
  for (const auto& c : j.at("cases")) {
    RefCase r;
    r.name = c.at("name").get<std::string>();
    r.input_ids = c.at("input_ids").get<std::vector<int32_t>>();
    r.logits = read_f32(dir + "/" + c.at("logits_file").get<std::string>());
    r.greedy = c.at("greedy_new_tokens").get<std::vector<int32_t>>();
    out.push_back(std::move(r));
  }
  return out;
}

/** Relative L2 error of row `r` (length n) of got vs want. */
inline double row_rel_l2(const float* got, const float* want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

/** Max over rows of the per-row relative L2 error ([rows, n] each). */
inline double max_row_rel_l2(const std::vector<float>& got, const std::vector<float>& want, int64_t n) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t r = 0; r * n < std::min(got.size(), want.size()); ++r)
    worst = std::max(worst, row_rel_l2(got.data() + r * n, want.data() + r * n, n));
  return worst;
}

/** Engine options for the tiny fixtures. One thread: the models are far below the op parallelism
 *  thresholds, and OpenMP's spinning barriers crawl when `make test` shares two busy cores. */
inline EngineOptions small_engine_options() {
  EngineOptions o;
  o.threads = 1;
  o.kv_tokens = 1024;
  o.max_step_tokens = 512;
  o.max_logit_rows = 512;
  o.page_size = 16;
  return o;
}

/** Greedy request for a reference case: every prompt logit + n greedy tokens, not stopping at EOS. */
inline GenerateRequest greedy_request(const std::vector<int32_t>& prompt, int32_t n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = n;
  r.sampling.temperature = 0.0f;
  r.stop_at_eos = false;
  r.prompt_logits = true;
  return r;
}

/** Checks the checkpoint in `dir` (its reference.json cases from transformers) on the fused and the cpu
 *  MoE strategies: every position within 1e-4 relative L2 and the same greedy tokens; prints each
 *  case's error under `label`. */
inline void expect_reference_on_fused_and_cpu(const std::string& dir, const std::string& label) {
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  for (MoeStrategy strategy : {MoeStrategy::kFused, MoeStrategy::kCpu}) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    auto engine = Engine::load(dir, o);
    const int64_t V = engine->config().n_vocab;
    for (const RefCase& c : cases) {
      SCOPED_TRACE(c.name + (strategy == MoeStrategy::kCpu ? " cpu" : " fused"));
      auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))});
      const double err = max_row_rel_l2(res[0].prompt_logits, c.logits, V);
      std::printf("[ fixture ] %s %s: max rel L2 %.3g\n", label.c_str(), c.name.c_str(), err);
      EXPECT_LE(err, 1e-4);
      EXPECT_EQ(res[0].tokens, c.greedy);
    }
  }
}

/** Runs the fixture `fixture`'s reference prompts (shared/fixtures/hf) greedily through the checkpoint
 *  in `quantized` and through `dequantized` (the same model with the quantized weights' exact floats
 *  in F32), under each of `strategies`: every position's prompt logits within `max_rel_l2` (0: bit for
 *  bit) and the same tokens. Prints each case's distance to the BF16 reference under `label`. */
inline void expect_same_as_dequantized(const std::string& quantized, const std::string& dequantized,
                                       const std::string& fixture, const std::string& label, double max_rel_l2,
                                       const std::vector<MoeStrategy>& strategies) {
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/" + fixture);
  ASSERT_EQ(cases.size(), 2u);
  for (MoeStrategy strategy : strategies) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    auto q = Engine::load(quantized, o), f32 = Engine::load(dequantized, o);
    const int64_t V = q->config().n_vocab;
    for (const RefCase& c : cases) {
      SCOPED_TRACE(label + " " + c.name + (strategy == MoeStrategy::kCpu ? " cpu" : " fused"));
      const GenerateRequest req = greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()));
      const GenerateResult a = generate(*q, {req})[0], b = generate(*f32, {req})[0];
      ASSERT_EQ(a.prompt_logits.size(), c.input_ids.size() * static_cast<size_t>(V));
      if (max_rel_l2 == 0.0) {
        EXPECT_EQ(a.prompt_logits, b.prompt_logits);
      }
      EXPECT_LE(max_row_rel_l2(a.prompt_logits, b.prompt_logits, V), max_rel_l2);
      EXPECT_EQ(a.tokens, b.tokens);
      std::printf("[ %s ] %s: max rel L2 to the bf16 reference %.3g\n", label.c_str(), c.name.c_str(),
                  max_row_rel_l2(a.prompt_logits, c.logits, V));
    }
  }
}

/** Expects `t` (a loaded weight in its stored type) to decode to exactly the values of tensor `name`
 *  in `ref` (an F32 checkpoint). */
inline void expect_decodes_to(const Tensor& t, const Checkpoint& ref, const std::string& name) {
  const TensorInfo& want = ref.get(name);
  ASSERT_EQ(t.numel(), want.numel());
  std::vector<float> got(t.numel());
  dequantize_row(t.dtype, t.data, got.data(), t.numel());
  EXPECT_EQ(std::memcmp(got.data(), want.data, want.bytes), 0) << name;
}

/** The message and code of the ft::Error Engine::load (small_engine_options) throws for `dir`, "" if
 *  it loads. */
inline std::string load_error(const std::string& dir, ErrorCode* code) {
  try {
    Engine::load(dir, small_engine_options());
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  return "";
}

}  // namespace ft::testing
