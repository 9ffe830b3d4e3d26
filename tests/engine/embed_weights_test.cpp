// --embed-weights: where the token embedding table lives (engine/engine.h embeddings_on_host,
// Ops::make_host_mapped). The CPU build checks the choice, the loader's wiring (a backend whose
// host-mapped copy is a separate buffer: the model must read the table from it, and the engine's
// placed bytes must leave it out) and the flag; the CUDA placement itself is in tests/gpu/graph_test.cpp.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "graph_decode.h"

namespace ft::testing {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(EmbedWeights, AutoPicksHostWhenExpertsLiveInHostMemory) {
  // "host" and "device" are what they say on any backend.
  EXPECT_TRUE(embeddings_on_host("host", false, MoeStrategy::kAuto, 1, 0));
  EXPECT_FALSE(embeddings_on_host("device", true, MoeStrategy::kOffload, 100 * kGiB, kGiB));
  // auto: never without a GPU; with one, under the strategies that keep experts on the host, or when
  // the checkpoint is larger than the budget (auto then plans offload).
  EXPECT_FALSE(embeddings_on_host("auto", false, MoeStrategy::kOffload, 100 * kGiB, kGiB));
  for (MoeStrategy s : {MoeStrategy::kOffload, MoeStrategy::kHybrid, MoeStrategy::kCpu})
    EXPECT_TRUE(embeddings_on_host("auto", true, s, kGiB, 100 * kGiB)) << moe_strategy_name(s);
  EXPECT_FALSE(embeddings_on_host("auto", true, MoeStrategy::kFused, 100 * kGiB, kGiB));
  EXPECT_FALSE(embeddings_on_host("auto", true, MoeStrategy::kAuto, 24 * kGiB, 24 * kGiB));
  EXPECT_TRUE(embeddings_on_host("auto", true, MoeStrategy::kAuto, 24 * kGiB + 1, 24 * kGiB));
  EXPECT_FALSE(embeddings_on_host("auto", true, MoeStrategy::kAuto, 100 * kGiB, 0));  // budget unknown
  try {
    embeddings_on_host("pinned", true, MoeStrategy::kAuto, 1, 1);
    ADD_FAILURE() << "--embed-weights pinned was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--embed-weights"), std::string::npos) << e.what();
  }
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

TEST(EmbedWeights, HostTableIsTheOneTheModelReads) {
  // qwen3_moe (untied): the table goes through make_host_mapped, its bytes leave the placed weights
  // (the expert cache's resident bytes), and decode reads the copy: same bits as the file's table.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe";
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 0;
  int calls = 0;
  Engine plain(open_checkpoint(dir), std::make_unique<CpuOps>(1), o);
  o.embed_weights = "host";
  Engine mapped(open_checkpoint(dir), std::make_unique<MappedCopyOps>(&calls), o);
  EXPECT_EQ(calls, 1);
  const ModelConfig& c = plain.config();
  EXPECT_EQ(plain.host_mapped_weight_bytes(), 0);
  EXPECT_EQ(mapped.host_mapped_weight_bytes(), c.n_vocab * c.n_embd * 2);  // bf16 table
  ASSERT_TRUE(plain.moe_budget() && mapped.moe_budget());
  EXPECT_EQ(mapped.moe_budget()->resident_bytes,
            plain.moe_budget()->resident_bytes - mapped.host_mapped_weight_bytes());
  const auto reqs = graph_decode_requests(read_reference(dir));
  const auto a = generate(plain, reqs), b = generate(mapped, reqs);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_TRUE(same_bits(a[i].step_logits, b[i].step_logits)) << i;
  }
}

TEST(EmbedWeights, TiedTableStaysWithTheLmHead) {
  // qwen3_tied: the LM head is the table, so it is made resident as usual (on the CPU backend
  // --embed-weights host is then a no-op; CUDA refuses it, tests/gpu/graph_test.cpp).
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_tied";
  EngineOptions o = small_engine_options();
  o.embed_weights = "host";
  int calls = 0;
  Engine e(open_checkpoint(dir), std::make_unique<MappedCopyOps>(&calls), o);
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(e.host_mapped_weight_bytes(), 0);
}

}  // namespace
}  // namespace ft::testing
