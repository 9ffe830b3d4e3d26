// Expert-cache slot classes on the GPU (skipped without a CUDA device; FT_REQUIRE_GPU=1 makes that a
// failure): three BF16 layers and three Q8_0 layers give two classes, each a CUDA expert cache over a view
// of the banks with its own pool of slots of its records. Offload (with prefetch, and prefill-sized
// steps streamed through each class's regions) equals fused bit for bit, hybrid within bf16
// tolerance; a decode step over both classes captured as a CUDA graph replays equal to eager steps.
#include <gtest/gtest.h>

#include <cstring>

#include "cuda_moe_test.h"
#include "model_run.h"
#include "moe/classed_expert_slots.h"
#include "moe/offloaded_experts.h"
#include "moe_test_util.h"
#include "util/error.h"

#ifdef FT_HAVE_CUDA
#include "moe/graph_replay.h"
#endif

namespace ft::testing {
namespace {

class CudaSlotClasses : public CudaMoeTest {
 protected:
  void SetUp() override {
    CudaMoeTest::SetUp();
    // Rows of 256 values: quantized rows 16-byte aligned for the GEMV loads.
    for (uint32_t l = 0; l < kLayers; ++l) {
      const DType t = l < 3 ? DType::BF16 : DType::Q8_0;
      s_.add_layer(kE, 256, kH, t, t, 40 + l);
    }
  }

  static constexpr int32_t kE = 8, kK = 2, kLayers = 6;
  static constexpr int64_t kH = 256;
  SyntheticExperts s_;
};

TEST_F(CudaSlotClasses, OffloadEqualsFusedHybridWithinBf16) {
  const int64_t maxT = 40;
  ResidentExperts fused(*gpu_, s_.banks);
  Tensor dx = dev(DType::BF16, {maxT * kH}), di = dev(DType::I32, {maxT * kK}), dw = dev(DType::F32, {maxT * kK});
  Tensor dwant = dev(DType::BF16, {maxT * kH}), dgot = dev(DType::BF16, {maxT * kH}), dpf = dev(DType::I32, {maxT * kK});
  struct Case {
    MoeStrategy s;
    int32_t cap;
    bool prefetch;
  };
  for (const Case c : {Case{MoeStrategy::kOffload, -1, false}, Case{MoeStrategy::kOffload, -1, true},
                       Case{MoeStrategy::kHybrid, 1, false}, Case{MoeStrategy::kHybrid, 1, true}}) {
    SCOPED_TRACE(std::string(moe_strategy_name(c.s)) + (c.prefetch ? " + prefetch" : ""));
    MoeRuntimeOptions ro;
    ro.max_tokens = maxT, ro.n_expert_used = kK, ro.cpu_threads = 4, ro.prefetch = c.prefetch;
    ro.stream_min_tokens = maxT;  // the prefill-sized steps stream through each class's regions
    const MoePlan plan = make_class_plan(s_.banks, c.s, 4 * kE, c.cap);  // 16 of each class's 24 experts
    ASSERT_EQ(plan.cache.classes.size(), 2u);
    OffloadedExperts off(*gpu_, s_.banks, plan, ro);
    auto* cs = dynamic_cast<ClassedExpertSlots*>(off.slots());
    ASSERT_NE(cs, nullptr);
    ASSERT_EQ(cs->n_regions(), 2);
    EXPECT_EQ(cs->slot_class(0).device(), Device::kCuda);
    std::mt19937 rng(5);
    for (int step = 0; step < 12; ++step) {
      const int64_t T = step % 4 == 3 ? maxT : 1 + step % 3;
      for (int64_t layer = 0; layer < kLayers; ++layer) {
        std::vector<int32_t> ids = random_routes(T, kK, kE, 0.5, rng);
        std::vector<float> x(static_cast<size_t>(T * kH)), w(static_cast<size_t>(T * kK));
        std::uniform_real_distribution<float> d(-1, 1);
        for (float& f : x) f = d(rng);
        for (float& f : w) f = 0.5f + 0.5f * d(rng);
        Tensor tx = put(dx, DType::F32, x, {T, kH}), ti = put(di, DType::I32, ids, {T, kK});
        Tensor tw = put(dw, DType::F32, w, {T, kK});
        Tensor want(dwant.data, DType::BF16, {T, kH}, Device::kCuda), got(dgot.data, DType::BF16, {T, kH}, Device::kCuda);
        if (off.prefetch_target(layer, T) >= 0) {  // layer 1's guess lands in the other class's cache
          std::vector<int32_t> guess = random_routes(T, kK, kE, 0.5, rng);
          off.prefetch(off.prefetch_target(layer, T), put(dpf, DType::I32, guess, {T, kK}));
        }
        fused.compute(layer, tx, ti, tw, want);
        off.compute(layer, tx, ti, tw, got);
        const std::vector<float> a = read_f32(got), b = read_f32(want);
        if (c.s == MoeStrategy::kOffload)
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step << " layer " << layer;
        else
          ASSERT_LT(rel_l2(a, b), 2e-2) << "step " << step << " layer " << layer;
      }
    }
    EXPECT_NO_THROW(off.check());
    const std::vector<MoeLayerStats> st = off.stats();
    for (int64_t l = 0; l < kLayers; ++l) {
      EXPECT_GT(st[static_cast<size_t>(l)].hits, 0) << l;
      EXPECT_EQ(st[static_cast<size_t>(l)].bytes,
                (st[static_cast<size_t>(l)].misses + st[static_cast<size_t>(l)].prefetched) * off.banks().record_bytes(l))
          << l;
    }
  }
}

#ifdef FT_HAVE_CUDA
TEST_F(CudaSlotClasses, DecodeStepOverTwoClassesReplaysAsACudaGraph) {
  struct Case {
    MoeStrategy s;
    int32_t cap;
    bool dma;
  };
  for (const Case c : {Case{MoeStrategy::kOffload, -1, true}, Case{MoeStrategy::kOffload, -1, false},
                       Case{MoeStrategy::kHybrid, 1, true}}) {
    SCOPED_TRACE(std::string(moe_strategy_name(c.s)) + (c.dma ? "" : ", gather kernel"));
    set_cuda_prefetch_dma(c.dma);
    MoeRuntimeOptions ro;
    ro.max_tokens = 1, ro.n_expert_used = kK, ro.cpu_threads = 2, ro.prefetch = true;
    const MoePlan plan = make_class_plan(s_.banks, c.s, 4 * kE, c.cap);  // 16 of each class's 24 experts
    OffloadedExperts graphed(*gpu_, s_.banks, plan, ro), eager(*gpu_, s_.banks, plan, ro);
    ResidentExperts fused(*gpu_, s_.banks);
    ASSERT_NO_FATAL_FAILURE(expect_graph_replays_equal_eager<kLayers>(
        *gpu_, graphed, eager, c.s == MoeStrategy::kOffload ? &fused : nullptr, kH, kK, kE, 1.0f,
        [&](DType dt, std::initializer_list<int64_t> shape) { return dev(dt, shape); },
        [&](const Tensor& d, DType dt, auto& v, std::initializer_list<int64_t> shape) { put(d, dt, v, shape); },
        [&](const Tensor& d) { return read_f32(d); }));
    EXPECT_NO_THROW(graphed.check());
    const std::vector<MoeLayerStats> gs = graphed.stats(), es = eager.stats();
    for (int l = 0; l < kLayers; ++l) {
      EXPECT_EQ(gs[l].misses, es[l].misses) << l;
      EXPECT_EQ(gs[l].cpu_experts, es[l].cpu_experts) << l;
    }
  }
  set_cuda_prefetch_dma(true);
}
#endif

}  // namespace
}  // namespace ft::testing
