// --embed-weights: where the token embedding table lives (engine/engine.h embeddings_on_host,
// Ops::make_host_mapped). The CPU build checks the choice, the loader's wiring (a backend whose
// host-mapped copy is a separate buffer: the model must read the table from it, and the engine's
// placed bytes must leave it out) and the flag; the CUDA placement itself is in tests/engine/cuda_graph_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "graph_decode.h"
#include "qwen4_exp_variant.h"
#include "util/format.h"

namespace ft::testing {
namespace {

TEST(EmbedWeights, AutoPicksHostWhenTheCacheWouldGrow) {
  // A cache sized by the memory left (--moe-cache-auto) that holds fewer than every expert gets the
  // table's bytes as slots: offload and hybrid. Not fused or cpu (no cache), not a cache whose size a
  // flag fixed, not one that already holds every expert, not offload with every layer on the CPU.
  auto plan = [](MoeStrategy s, int64_t slots) {
    MoePlan p;
    p.strategy = s;
    p.cache.n_slots = slots;
    return p;
  };
  const CacheSizeRequest fit{};  // --moe-cache-auto
  EXPECT_TRUE(embeddings_on_host_auto(plan(MoeStrategy::kOffload, 100), fit, 256));
  EXPECT_TRUE(embeddings_on_host_auto(plan(MoeStrategy::kHybrid, 255), fit, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kOffload, 256), fit, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kOffload, 0), fit, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kOffload, 150), {CacheSizeMode::kSlots, 150, 0.0}, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kHybrid, 128), {CacheSizeMode::kRate, 0, 0.5}, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kFused, 0), fit, 256));
  EXPECT_FALSE(embeddings_on_host_auto(plan(MoeStrategy::kCpu, 0), fit, 256));
}

/** The CPU backend with make_host_mapped returning a copy in a buffer of its own (as CUDA's pinned
 *  copy is), counting the calls. */
class MappedCopyOps final : public CpuOps {
 public:
  explicit MappedCopyOps(int* calls) : CpuOps(1), calls_(calls) {}
  Tensor make_host_mapped(const Tensor& host, Buffer& storage) override {
    ++*calls_;
    storage = Buffer::host(host.bytes());
    std::memcpy(storage.data(), host.data, static_cast<size_t>(host.bytes()));
    Tensor t = host;
    t.data = storage.data();
    return t;
  }

 private:
  int* calls_;
};

/** The CPU backend recording the bytes of every tensor made resident (the loader's device copies; host-mapped
 *  copies are not recorded). */
class ResidentBytesOps final : public CpuOps {
 public:
  explicit ResidentBytesOps(std::vector<int64_t>* bytes) : CpuOps(1), bytes_(bytes) {}
  Tensor make_resident(const Tensor& host, Buffer& storage) override {
    bytes_->push_back(host.bytes());
    return CpuOps::make_resident(host, storage);
  }
  Tensor make_host_mapped(const Tensor& host, Buffer& storage) override {  // not a device copy
    return CpuOps::make_resident(host, storage);
  }

 private:
  std::vector<int64_t>* bytes_;
};

Engine load(const std::string& fixture, EngineOptions o, std::unique_ptr<Ops> ops) {
  return Engine(open_checkpoint(shared_dir() + "/fixtures/hf/" + fixture), std::move(ops), o);
}

Engine load_path(const std::string& dir, EngineOptions o, std::unique_ptr<Ops> ops) {
  return Engine(open_checkpoint(dir), std::move(ops), o);
}

void expect_same_decode(Engine& a, Engine& b, const std::string& fixture) {
  const auto reqs = graph_decode_requests(read_reference(shared_dir() + "/fixtures/hf/" + fixture));
  const auto x = generate(a, reqs), y = generate(b, reqs);
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(x[i].tokens, y[i].tokens) << i;
    EXPECT_TRUE(same_bits(x[i].step_logits, y[i].step_logits)) << i;
  }
}

/** The tiny fixtures under --moe-strategy offload, a 12 MiB limit, a 256-token KV reserve, the tables on
 *  the device, no graphs. */
EngineOptions offload_options() {
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  o.moe.strategy = MoeStrategy::kOffload;
  o.gpu_memory_limit = 12 << 20;
  o.kv_reserve_tokens = 256;
  o.embed_weights = EmbedPlacement::kDevice;
  return o;
}

TEST(EmbedWeights, AutoUnderOffloadMovesTheTableAndTheCacheGetsItsBytes) {
  // qwen3_moe_64e (untied) under --moe-strategy offload and a limit: auto moves the table through
  // make_host_mapped, its bytes leave the placed weights, the cache gets them as slots, and decode
  // reads the copy (same bits as the device engine's, whose cache is smaller).
  EngineOptions o = offload_options();
  int calls = 0;
  Engine device = load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(device.host_mapped_weight_bytes(), 0);
  o.embed_weights = EmbedPlacement::kAuto;
  Engine host = load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 1);
  const ModelConfig& c = host.config();
  EXPECT_EQ(host.host_mapped_weight_bytes(), c.n_vocab * c.n_embd * 2);  // bf16 table
  ASSERT_TRUE(device.moe_budget() && host.moe_budget());
  EXPECT_EQ(host.moe_budget()->resident_bytes, device.moe_budget()->resident_bytes - host.host_mapped_weight_bytes());
  EXPECT_GT(host.moe_report()->cache_slots, device.moe_report()->cache_slots);
  expect_same_decode(device, host, "qwen3_moe_64e");
  // A limit that holds the smallest cache only without the table: device is refused, auto moves it.
  const GpuMemoryBudget& b = *device.moe_budget();
  const int64_t smallest = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens +
                           2 * b.experts_per_layer * b.slot_bytes;
  o.gpu_memory_limit = smallest - host.host_mapped_weight_bytes() / 2;
  EXPECT_EQ(load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(),
            c.n_vocab * c.n_embd * 2);
  o.embed_weights = EmbedPlacement::kDevice;
  try {
    load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls));
    ADD_FAILURE() << o.gpu_memory_limit << " bytes held the smallest cache with the table on the device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
  }
}

TEST(EmbedWeights, AutoKeepsTheTableWhereNoCacheWantsIt) {
  // fused (everything fits), the cpu strategy and a dense model: auto leaves the table in place.
  EngineOptions o = small_engine_options();
  int calls = 0;
  EXPECT_EQ(load("qwen3_moe", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  o.moe.strategy = MoeStrategy::kCpu;
  EXPECT_EQ(load("qwen3_moe", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  o.moe.strategy = MoeStrategy::kAuto;
  EXPECT_EQ(load("qwen3", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  // offload whose cache a flag sized, or that holds every expert anyway (no limit)
  o.moe.strategy = MoeStrategy::kOffload;
  EXPECT_EQ(load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  o.moe.cache = {CacheSizeMode::kSlots, 150, 0.0};
  o.gpu_memory_limit = 12 << 20;
  EXPECT_EQ(load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  EXPECT_EQ(calls, 0);
}

TEST(EmbedWeights, OutOfMemoryNamesTheFlagThatMovesTheTable) {
  // fused under a limit it misses by less than the table: refused, and the message says that
  // --embed-weights host would do (auto does not move the table for fused: no cache gains from it).
  EngineOptions o = small_engine_options();
  o.kv_reserve_tokens = 256;
  o.embed_weights = EmbedPlacement::kDevice;
  Engine probe = load("qwen3_moe_64e", o, std::make_unique<CpuOps>(1));
  const GpuMemoryBudget b = *probe.moe_budget();
  const int64_t table = probe.config().n_vocab * probe.config().n_embd * 2;  // bf16
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens + b.expert_bytes - table / 2;
  o.moe.strategy = MoeStrategy::kFused;
  for (const EmbedPlacement mode : {EmbedPlacement::kDevice, EmbedPlacement::kAuto}) {
    o.embed_weights = mode;
    try {
      load("qwen3_moe_64e", o, std::make_unique<CpuOps>(1));
      ADD_FAILURE() << "fused fit under " << o.gpu_memory_limit << " bytes with the table on the device";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
      EXPECT_NE(std::string(e.what()).find("--embed-weights host"), std::string::npos) << e.what();
    }
  }
  o.embed_weights = EmbedPlacement::kHost;
  int calls = 0;
  Engine e = load("qwen3_moe_64e", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(e.moe_plan()->strategy, MoeStrategy::kFused);
  EXPECT_EQ(e.host_mapped_weight_bytes(), table);
}

TEST(EmbedWeights, HostMovesADenseModelsTable) {
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  int calls = 0;
  Engine device = load("qwen3", o, std::make_unique<CpuOps>(1));
  o.embed_weights = EmbedPlacement::kHost;
  Engine host = load("qwen3", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 1);
  EXPECT_GT(host.host_mapped_weight_bytes(), 0);
  expect_same_decode(device, host, "qwen3");
}

TEST(EmbedWeights, HostIsRefusedForATiedTable) {
  // qwen3_tied: the LM head reads the whole table every step, so host is refused, before any weight is
  // loaded (no make_host_mapped call); auto and device keep it with the LM head. (A mode other than
  // these three cannot be given now that the field is an enum; `ft` refuses it at the flag.)
  EngineOptions o = small_engine_options();
  int calls = 0;
  o.embed_weights = EmbedPlacement::kHost;
  try {
    load("qwen3_tied", o, std::make_unique<MappedCopyOps>(&calls));
    ADD_FAILURE() << "--embed-weights host was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--embed-weights"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("ties its token embedding table"), std::string::npos);
  }
  o.embed_weights = EmbedPlacement::kAuto;
  EXPECT_EQ(load("qwen3_tied", o, std::make_unique<MappedCopyOps>(&calls)).host_mapped_weight_bytes(), 0);
  EXPECT_EQ(calls, 0);
}

TEST(EmbedWeights, HostMovesQwen4ExpNgramTables) {
  // Qwen4-Exp's per-layer n-gram tables are read a few rows a token, as the token table: host moves
  // them too (issue 42), adjacent shards as one host-mapped view a layer (make_host_mapped), and
  // decode reads the copies (same bits as the device engine's).
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  const std::string fixture = shared_dir() + "/fixtures/hf/qwen4_exp";
  const auto [token, ngram] = qwen4_exp_table_bytes(fixture);
  ASSERT_GT(ngram, token);  // two PLE layers of 16 heads of ~1,000 rows
  int calls = 0;
  Engine device = load("qwen4_exp", o, std::make_unique<CpuOps>(1));
  EXPECT_EQ(device.host_mapped_weight_bytes(), 0);
  o.embed_weights = EmbedPlacement::kHost;
  Engine host = load("qwen4_exp", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 3);  // the token table, then each PLE layer's shards as one view
  EXPECT_EQ(host.host_mapped_weight_bytes(), token + ngram);
  EXPECT_EQ(host.memory_plan().placed.weights, device.memory_plan().placed.weights - token - ngram);
  expect_same_decode(device, host, "qwen4_exp");
  // Shards apart in the file: a stacked copy in host memory (the allocator's, no make_host_mapped).
  const Qwen4ExpVariant apart("apart", false);
  calls = 0;
  Engine stacked = load_path(apart.dir(), o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(stacked.host_mapped_weight_bytes(), token + ngram);
  expect_same_decode(device, stacked, "qwen4_exp");
}

TEST(EmbedWeights, Qwen4ExpNgramTablesReachTheDeviceOnlyWhereThePlanKeepsThem) {
  // The n-gram tables load as metadata and the memory plan places them (Model::place_deferred): under
  // --embed-weights host no table is ever made resident (a 51-95 GiB table would not fit the device it
  // is moved off), under device each PLE layer's table is, once.
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  const std::string dir = shared_dir() + "/fixtures/hf/qwen4_exp";
  const auto [token, ngram] = qwen4_exp_table_bytes(dir);
  int64_t tables[2] = {0, 0};  // ple_layer_ids [1, 3]: layers 0 and 2, shards adjacent (one view each)
  const auto ck = open_checkpoint(dir);
  for (const TensorInfo& t : ck->tensors())
    if (t.name.find(".ngram_embedding.") != std::string::npos) tables[t.name.starts_with("model.layers.0.") ? 0 : 1] += t.bytes;
  ASSERT_EQ(tables[0] + tables[1], ngram);
  std::vector<int64_t> device_bytes, host_bytes;
  o.embed_weights = EmbedPlacement::kDevice;
  Engine device = load("qwen4_exp", o, std::make_unique<ResidentBytesOps>(&device_bytes));
  for (int64_t t : tables) EXPECT_EQ(std::count(device_bytes.begin(), device_bytes.end(), t), 1) << t;
  o.embed_weights = EmbedPlacement::kHost;
  Engine host = load("qwen4_exp", o, std::make_unique<ResidentBytesOps>(&host_bytes));
  for (int64_t t : tables) EXPECT_EQ(std::count(host_bytes.begin(), host_bytes.end(), t), 0) << t;
  EXPECT_EQ(host.host_mapped_weight_bytes(), token + ngram);
  expect_same_decode(device, host, "qwen4_exp");
}

TEST(EmbedWeights, TablesTheHostKeepsNeverReachTheDevice) {
  // Issue 37: the load's peak device memory is the plan's. An untied token table (and Gemma 4's
  // per-layer table) loads as metadata; under device one copy of it is made resident, under host none
  // (tensors are told apart by size).
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  for (const char* fixture : {"qwen3", "qwen3_moe", "gemma4"}) {
    SCOPED_TRACE(fixture);
    const auto ck = open_checkpoint(shared_dir() + "/fixtures/hf/" + fixture);
    std::vector<int64_t> tables;
    for (const char* name : {"model.embed_tokens.weight", "model.embed_tokens_per_layer.weight"})
      if (const TensorInfo* t = ck->find(name)) tables.push_back(t->bytes);
    std::vector<int64_t> device_bytes, host_bytes;
    o.embed_weights = EmbedPlacement::kDevice;
    Engine device = load(fixture, o, std::make_unique<ResidentBytesOps>(&device_bytes));
    o.embed_weights = EmbedPlacement::kHost;
    Engine host = load(fixture, o, std::make_unique<ResidentBytesOps>(&host_bytes));
    for (int64_t t : tables)  // (the LM head has the token table's size: resident in both)
      EXPECT_EQ(std::count(device_bytes.begin(), device_bytes.end(), t),
                std::count(host_bytes.begin(), host_bytes.end(), t) + std::count(tables.begin(), tables.end(), t))
          << t;
    expect_same_decode(device, host, fixture);
  }
}

TEST(EmbedWeights, AutoMovesQwen4ExpNgramTablesWhenOnlyThatFits) {
  // A limit that holds offload's smallest cache only with the token and the n-gram tables off the
  // device (the token table alone is not enough): device is refused, naming --embed-weights host and
  // the bytes it moves; auto moves both tables.
  EngineOptions o = offload_options();
  const auto [token, ngram] = qwen4_exp_table_bytes(shared_dir() + "/fixtures/hf/qwen4_exp");
  Engine device = load("qwen4_exp", o, std::make_unique<CpuOps>(1));
  const GpuMemoryBudget& b = *device.moe_budget();
  const int64_t smallest = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens +
                           2 * b.experts_per_layer * b.slot_bytes;
  o.gpu_memory_limit = smallest - token - ngram / 2;
  try {
    load("qwen4_exp", o, std::make_unique<CpuOps>(1));
    ADD_FAILURE() << o.gpu_memory_limit << " bytes held the smallest cache with the tables on the device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find("--embed-weights host: the embedding tables, " + format_bytes(token + ngram)),
              std::string::npos)
        << e.what();
  }
  o.embed_weights = EmbedPlacement::kAuto;
  int calls = 0;
  Engine host = load("qwen4_exp", o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(host.host_mapped_weight_bytes(), token + ngram);
  expect_same_decode(device, host, "qwen4_exp");
}

TEST(EmbedWeights, ATiedQwen4ExpMovesItsNgramTablesOnly) {
  // With the LM head tied to the token table, that table stays (the head reads all of it every step),
  // but the n-gram tables still move when auto needs the room. (--embed-weights host is refused
  // before loading for any tied checkpoint.)
  const Qwen4ExpVariant tied("tied", true);
  const auto [token, ngram] = qwen4_exp_table_bytes(tied.dir());
  EngineOptions o = offload_options();
  Engine device = load_path(tied.dir(), o, std::make_unique<CpuOps>(1));
  const GpuMemoryBudget& b = *device.moe_budget();
  o.gpu_memory_limit = b.resident_bytes + b.kv_bytes_per_token * b.kv_reserve_tokens +
                       2 * b.experts_per_layer * b.slot_bytes - ngram / 2;
  o.embed_weights = EmbedPlacement::kAuto;
  int calls = 0;
  Engine host = load_path(tied.dir(), o, std::make_unique<MappedCopyOps>(&calls));
  EXPECT_EQ(calls, 0);  // shards apart in this file: stacked host copies
  EXPECT_EQ(host.host_mapped_weight_bytes(), ngram);
  EXPECT_GT(token, 0);
  expect_same_decode(device, host, "qwen4_exp");  // the fixture's prompts
}

}  // namespace
}  // namespace ft::testing
