// A mixed-type GGUF file (issue 36: unsloth "UD"-style, experts of different types per layer) through
// Engine::load: layers 0-1 keep the BF16 file's experts, layers 2-3 take the Q8_0 file's (Q8_0 gate /
// up, F16 down where rows are not whole blocks). The expert cache gets a slot class per record size,
// its pool the classes' bytes rather than every slot at the largest record, and the offloaded model
// decodes the same tokens and logits as the same file run fused.
#include <cstring>
#include <filesystem>

#include "../model/fixture_util.h"
#include "engine/memory_plan.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"

namespace ft::testing {
namespace {

/** Writes `out`: `a`'s metadata and tensors, but the routed experts of the layers in `from_b` from `b`. */
void write_mixed(const std::string& a, const std::string& b, const std::vector<int>& from_b, const std::string& out) {
  const GgufReader ra(a), rb(b);
  GgufWriter w;
  for (const GgufKV& kv : ra.kvs())
    if (kv.key != "general.file_type") w.add(kv.key, kv.value);  // no single type describes the mix
  auto is_b = [&](const std::string& name) {
    for (int l : from_b)
      for (const char* m : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
        if (name == "blk." + std::to_string(l) + "." + m + ".weight") return true;
    return false;
  };
  for (const GgufTensor& t : ra.tensors()) {
    const TensorInfo* src = &t.info;
    if (is_b(t.info.name))
      for (const GgufTensor& u : rb.tensors())
        if (u.info.name == t.info.name) src = &u.info;
    w.add_tensor(src->name, src->dtype, src->shape, src->data, src->bytes);
  }
  w.write(out);
}

struct MixRun {
  GenerateResult result;
  MoePlan plan;
  std::vector<MemoryRow> rows;
};

MixRun run(const std::string& path, EngineOptions o, const RefCase& c) {
  auto engine = Engine::load(path, o);
  GenerateRequest req = greedy_request(c.input_ids, 6);
  req.step_logits = true;
  MixRun r;
  r.result = generate(*engine, {req})[0];
  if (engine->moe_plan()) r.plan = *engine->moe_plan();
  r.rows = memory_rows(engine->memory_plan());
  return r;
}

TEST(MixedTypeSlots, SlotsSizedPerLayersTypeAndOutputAsFused) {
  const std::string dir = shared_dir() + "/fixtures/gguf/qwen3_moe_64e";
  const std::string path = scratch_path("mixed_ud.gguf");
  write_mixed(dir + "/qwen3_moe_64e-bf16.gguf", dir + "/qwen3_moe_64e-q8_0.gguf", {2, 3}, path);
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/qwen3_moe_64e");
  ASSERT_FALSE(cases.empty());

  EngineOptions fused_o = small_engine_options();
  fused_o.moe.strategy = MoeStrategy::kFused;
  const MixRun fused = run(path, fused_o, cases[0]);

  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kOffload;
  o.moe.bank_format = BankFormat::kStored;
  o.moe.cache = {CacheSizeMode::kSlots, 256, 0};
  const MixRun off = run(path, o, cases[0]);
  std::filesystem::remove(path);

  // Two classes: BF16 records (3 x 48 x 128 x 2 bytes) and the Q8_0 layers' (gate and up Q8_0, padded
  // to 256 bytes, down F16: 6656 + 6656 + 12288).
  ASSERT_EQ(off.plan.cache.classes.size(), 2u);
  const SlotClass &big = off.plan.cache.classes[0], &small = off.plan.cache.classes[1];
  EXPECT_EQ(big.layers, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(small.layers, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(big.record_bytes, 36864);
  EXPECT_EQ(small.record_bytes, 25600);
  EXPECT_EQ(big.n_slots, 128);
  EXPECT_EQ(small.n_slots, 128);
  EXPECT_EQ(off.plan.cache.pool_bytes, 128 * 36864 + 128 * 25600);  // one pool: 256 x 36864
  const MemoryRow* slots = nullptr;
  for (const MemoryRow& r : off.rows)
    if (r.name == "expert slots") slots = &r;
  ASSERT_NE(slots, nullptr);
  EXPECT_EQ(slots->device, off.plan.cache.pool_bytes);
  EXPECT_EQ(slots->detail, "256 slots: 128 of 36.0 KiB (layers 0-1), 128 of 25.0 KiB (layers 2-3)");

  EXPECT_EQ(off.result.tokens, fused.result.tokens);
  ASSERT_EQ(off.result.step_logits.size(), fused.result.step_logits.size());
  EXPECT_EQ(std::memcmp(off.result.step_logits.data(), fused.result.step_logits.data(),
                        fused.result.step_logits.size() * sizeof(float)),
            0);
  ASSERT_EQ(off.result.prompt_logits.size(), fused.result.prompt_logits.size());
  EXPECT_EQ(std::memcmp(off.result.prompt_logits.data(), fused.result.prompt_logits.data(),
                        fused.result.prompt_logits.size() * sizeof(float)),
            0);
}

// POST /v1/admin/cache's expert_slots 0 names the least cache this file takes: 2 x 64 experts in each
// of its 2 slot classes (256, what --moe-cache-slots and a resize to 255 name), not 2 x 64 (trial:
// "expert_slots must be at least 2 x the experts of a MoE layer (128; got 0)", and 128 was refused).
TEST(MixedTypeSlots, AResizeToNoSlotsNamesEveryClassesMinimum) {
  const std::string dir = shared_dir() + "/fixtures/gguf/qwen3_moe_64e";
  const std::string path = scratch_path("mixed_ud_resize.gguf");
  write_mixed(dir + "/qwen3_moe_64e-bf16.gguf", dir + "/qwen3_moe_64e-q8_0.gguf", {2, 3}, path);
  EngineOptions o = small_engine_options();
  o.moe.strategy = MoeStrategy::kOffload;
  o.moe.cache = {CacheSizeMode::kSlots, 256, 0};
  auto engine = Engine::load(path, o);
  std::filesystem::remove(path);
  for (int64_t n : {0, 255}) {
    CacheResize r;
    r.expert_slots = n;
    std::string msg;
    try {
      engine->resize_caches(r);
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("256"), std::string::npos) << n << ": " << msg;
    EXPECT_EQ(msg.find("128"), std::string::npos) << n << ": " << msg;
  }
  ASSERT_NE(engine->moe_plan(), nullptr);
  EXPECT_EQ(engine->moe_plan()->cache.n_slots, 256);  // the old size stays
}

}  // namespace
}  // namespace ft::testing
