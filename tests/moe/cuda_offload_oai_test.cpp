// Offloaded gpt-oss experts (clamped SwiGLU, per-expert biases), and DeepSeek-V4's (kSwigluClamp), through
// OffloadedExperts: a cache's slot
// bank is indexed by slot id, so the biases travel with the experts into per-slot rows (moe/expert_slots.h
// SlotBiases). Offload (decode steps through the cache, with and without prefetch, prefill-sized steps
// streamed through the staging regions; stored and EC12 banks) must equal fused (ResidentExperts) bit
// for bit, hybrid and cpu within bf16 tolerance, on the CUDA backend (Cuda* suites, skipped without a
// device) and on the CPU backend's host twin of the cache (run by make test). A decode step captured in
// a CUDA graph (the slot-bias copies inside it, offload's prefetch by the copy engines) replays with
// new routes as eager steps compute.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include "backend/cpu/cpu_ops.h"
#include "cuda_moe_test.h"
#include "model_run.h"
#include "moe/moe_test_util.h"
#include "moe/offloaded_experts.h"
#include "tensor/half.h"
#include "util/error.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_ops.h"
#include "moe/graph_replay.h"
#endif

namespace ft::testing {
namespace {

/** SyntheticExperts whose layers get gpt-oss's GLU and biases (host F32, kept here). */
struct OaiExperts {
  SyntheticExperts s;
  std::vector<std::vector<float>> bias_store;

  /** Random MXFP4 [rows, cols] (quant/ has no quantizer for it): random E2M1 codes, block scales
   *  2^-10 .. 2^-7, so values stay near 1/sqrt(cols) as the other dtypes' do. */
  Tensor mxfp4(int64_t rows, int64_t cols, std::mt19937& rng) {
    s.storage.emplace_back(static_cast<size_t>(dtype_bytes(DType::MXFP4, rows * cols)));
    std::vector<uint8_t>& v = s.storage.back();
    for (uint8_t& x : v) x = static_cast<uint8_t>(rng() & 0xff);
    for (size_t i = 0; i < v.size(); i += 17) v[i] = static_cast<uint8_t>(118 + rng() % 4);
    return Tensor(v.data(), DType::MXFP4, {rows, cols});
  }

  /** Adds a layer; `biases` 0: none, 1: gate, up and down, 2: down only. */
  void add_layer(int32_t E, int64_t F, int64_t H, DType gu, DType dn, uint32_t seed, ExpertGlu glu, int biases) {
    if (gu == DType::MXFP4 || dn == DType::MXFP4) {
      std::mt19937 rng(seed);
      ExpertBank nb;
      for (int32_t e = 0; e < E; ++e) {
        nb.gate.push_back(gu == DType::MXFP4 ? mxfp4(F, H, rng) : s.make(gu, F, H, rng));
        nb.up.push_back(gu == DType::MXFP4 ? mxfp4(F, H, rng) : s.make(gu, F, H, rng));
        nb.down.push_back(dn == DType::MXFP4 ? mxfp4(H, F, rng) : s.make(dn, H, F, rng));
      }
      s.banks.push_back(std::move(nb));
    } else {
      s.add_layer(E, F, H, gu, dn, seed);
    }
    ExpertBank& b = s.banks.back();
    b.glu = glu, b.glu_alpha = 1.702f, b.glu_limit = 7.0f;
    std::mt19937 rng(seed * 31 + 7);
    std::uniform_real_distribution<float> d(-1.0f, 1.0f);
    auto bias = [&](int64_t cols, float scale) {
      bias_store.emplace_back(static_cast<size_t>(E * cols));
      for (float& v : bias_store.back()) v = scale * d(rng);
      return Tensor(bias_store.back().data(), DType::F32, {static_cast<int64_t>(E), cols});
    };
    if (biases == 1) b.gate_bias = bias(F, 2.0f), b.up_bias = bias(F, 2.0f);
    if (biases >= 1) b.down_bias = bias(H, 0.3f);
  }
  /** The same layers without their biases and with plain SwiGLU (a bank that ignores them). */
  HostExpertBanks plain() const {
    HostExpertBanks out = s.banks;
    for (ExpertBank& b : out) b.gate_bias = b.up_bias = b.down_bias = Tensor(), b.glu = ExpertGlu::kSwiglu;
    return out;
  }
};

struct Strategy {
  MoeStrategy s;
  int32_t cap;
  bool prefetch = false;
};

const Strategy kStrategies[] = {{MoeStrategy::kOffload, -1}, {MoeStrategy::kOffload, -1, true},
                                {MoeStrategy::kHybrid, 1},   {MoeStrategy::kHybrid, 1, true},
                                {MoeStrategy::kCpu, -1}};

/** Steps of 1-3 tokens and prefill-sized ones (streamed) over every layer of `x`, offload / hybrid / cpu
 *  against fused; on backend `ops` with activations `act` (CUDA: the backend's own). */
class OaiOffloadRunner {
 public:
  OaiOffloadRunner(Ops& ops, DType act) : ops_(ops), act_(act) {}

  Tensor dev(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dt, shape, ops_.device());
    keep_.push_back(ops_.alloc(t.bytes()));
    t.data = keep_.back().data();
    return t;
  }
  template <typename V>
  Tensor put(const Tensor& d, DType host_dt, std::vector<V>& v, std::initializer_list<int64_t> shape) {
    Tensor h(v.data(), host_dt, shape), dv(d.data, d.dtype, shape, ops_.device());
    ops_.copy(h, dv);
    return dv;
  }
  std::vector<float> read(const Tensor& d) {
    std::vector<float> v(static_cast<size_t>(d.numel()));
    ops_.copy(d, Tensor(v.data(), DType::F32, d.shape.data(), d.ndim));
    return v;
  }

  void run(const OaiExperts& ex, int32_t E, int32_t k, int64_t H, std::optional<BankFormat> format) {
    const HostExpertBanks& banks = ex.s.banks;
    const int64_t maxT = 40, L = static_cast<int64_t>(banks.size());
    ResidentExperts fused(ops_, banks);
    const HostExpertBanks plain_banks = ex.plain();
    ResidentExperts plain(ops_, plain_banks);
    MoeRuntimeOptions ro;
    ro.max_tokens = maxT, ro.n_expert_used = k, ro.cpu_threads = 2;
    ro.stream_min_tokens = maxT;  // the prefill-sized steps stream whole layers through the regions
    ro.bank_format = format;
    Tensor dx = dev(act_, {maxT * H}), di = dev(DType::I32, {maxT * k}), dw = dev(DType::F32, {maxT * k});
    Tensor dwant = dev(act_, {maxT * H}), dgot = dev(act_, {maxT * H}), dplain = dev(act_, {maxT * H});
    Tensor dpf = dev(DType::I32, {maxT * k});
    for (const Strategy& st : kStrategies) {
      SCOPED_TRACE(std::string(moe_strategy_name(st.s)) + (st.prefetch ? " + prefetch" : ""));
      MoeRuntimeOptions sro = ro;
      sro.prefetch = st.prefetch;
      OffloadedExperts off(ops_, banks, make_plan(banks, st.s, 2 * E, st.cap), sro);
      if (format) {
        ASSERT_EQ(off.banks().format(), *format);
      }
      std::mt19937 rng(5);
      for (int step = 0; step < 12; ++step) {
        const int64_t T = step % 4 == 3 ? maxT : 1 + step % 3;  // decode sizes and one prefill-sized batch
        for (int64_t layer = 0; layer < L; ++layer) {
          std::vector<int32_t> ids = random_routes(T, k, E, 0.5, rng);
          std::vector<float> x(static_cast<size_t>(T * H)), w(static_cast<size_t>(T * k));
          std::uniform_real_distribution<float> d(-1, 1);
          for (float& f : x) f = 3.0f * d(rng);
          for (float& f : w) f = 0.5f + 0.5f * d(rng);
          Tensor tx = put(dx, DType::F32, x, {T, H}), ti = put(di, DType::I32, ids, {T, k});
          Tensor tw = put(dw, DType::F32, w, {T, k});
          Tensor want(dwant.data, act_, {T, H}, ops_.device()), got(dgot.data, act_, {T, H}, ops_.device());
          Tensor without(dplain.data, act_, {T, H}, ops_.device());
          if (off.prefetch_target(layer, T) >= 0) {  // a guess for a later layer while this one computes
            std::vector<int32_t> guess = random_routes(T, k, E, 0.5, rng);
            off.prefetch(off.prefetch_target(layer, T), put(dpf, DType::I32, guess, {T, k}));
          }
          fused.compute(layer, tx, ti, tw, want);
          off.compute(layer, tx, ti, tw, got);
          plain.compute(layer, tx, ti, tw, without);
          const std::vector<float> a = read(got), b = read(want);
          // the case would catch experts computed without their biases or GLU
          ASSERT_GT(rel_l2(read(without), b), 0.05) << "step " << step << " layer " << layer;
          if (st.s == MoeStrategy::kOffload)  // with or without prefetch, streamed or not
            ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step << " layer " << layer;
          else
            ASSERT_LT(rel_l2(a, b), 2e-2) << "step " << step << " layer " << layer;
        }
      }
      ops_.synchronize();
      EXPECT_NO_THROW(off.check());
    }
  }

 private:
  Ops& ops_;
  DType act_;
  std::vector<Buffer> keep_;
};

/** Three layers of different forms: gpt-oss's (all biases, clamped SwiGLU) in two dtypes, and plain
 *  SwiGLU with a down bias only, so the slot banks differ by form, not only by layout. */
OaiExperts mixed_layers(int32_t E, int64_t H) {
  OaiExperts ex;
  ex.add_layer(E, 256, H, DType::BF16, DType::BF16, 3, ExpertGlu::kSwigluOai, 1);
  ex.add_layer(E, 256, H, DType::MXFP4, DType::MXFP4, 4, ExpertGlu::kSwigluOai, 1);
  ex.add_layer(E, 256, H, DType::Q8_0, DType::Q8_0, 5, ExpertGlu::kSwiglu, 2);
  return ex;
}

/** Two BF16 gpt-oss layers (EC12-codable banks: the decoding gather and streaming kernels). */
OaiExperts bf16_layers(int32_t E, int64_t H) {
  OaiExperts ex;
  ex.add_layer(E, 256, H, DType::BF16, DType::BF16, 6, ExpertGlu::kSwigluOai, 1);
  ex.add_layer(E, 192, H, DType::BF16, DType::BF16, 7, ExpertGlu::kSwigluOai, 1);
  for (size_t l : {0, 1}) ex.s.add_ec12_exceptions(l, 40, static_cast<uint32_t>(l));
  return ex;
}

/** DeepSeek-V4's experts (ExpertGlu::kSwigluClamp, no biases) at a limit that clamps: gate and up have a
 *  standard deviation near 1 here, the limit is 0.5. Two BF16 layers (EC12-codable), and with `q8` a Q8_0
 *  layer too (stored banks only). */
OaiExperts clamp_layers(int32_t E, int64_t H, bool q8) {
  OaiExperts ex;
  ex.add_layer(E, 256, H, DType::BF16, DType::BF16, 11, ExpertGlu::kSwigluClamp, 0);
  ex.add_layer(E, 192, H, DType::BF16, DType::BF16, 12, ExpertGlu::kSwigluClamp, 0);
  if (q8) ex.add_layer(E, 256, H, DType::Q8_0, DType::Q8_0, 13, ExpertGlu::kSwigluClamp, 0);
  for (ExpertBank& b : ex.s.banks) b.glu_limit = 0.5f;
  for (size_t l : {0, 1}) ex.s.add_ec12_exceptions(l, 40, static_cast<uint32_t>(l));
  return ex;
}

// The CPU backend: HostExpertSlots copies the biases' rows as it copies the records.
TEST(OffloadOaiHost, OffloadEqualsFusedHybridAndCpuWithinTolerance) {
  CpuOps ops(2);
  OaiOffloadRunner r(ops, DType::F32);
  const int32_t E = 8, k = 2;
  const int64_t H = 256;
  {
    SCOPED_TRACE("mixed layers, stored banks");
    r.run(mixed_layers(E, H), E, k, H, std::nullopt);
  }
  {
    SCOPED_TRACE("bf16 layers, EC12 banks");
    r.run(bf16_layers(E, H), E, k, H, BankFormat::kEc12);
  }
  {
    SCOPED_TRACE("DeepSeek-V4 clamped SwiGLU layers, stored banks");
    r.run(clamp_layers(E, H, true), E, k, H, std::nullopt);
  }
}

class CudaOffloadOai : public CudaMoeTest {};

TEST_F(CudaOffloadOai, OffloadEqualsFusedHybridAndCpuWithinBf16) {
  OaiOffloadRunner r(*gpu_, DType::BF16);
  const int32_t E = 8, k = 2;
  const int64_t H = 256;
  {
    SCOPED_TRACE("mixed layers, stored banks");
    r.run(mixed_layers(E, H), E, k, H, std::nullopt);
  }
  {
    SCOPED_TRACE("bf16 layers, EC12 banks");
    r.run(bf16_layers(E, H), E, k, H, BankFormat::kEc12);
  }
  {
    SCOPED_TRACE("bf16 layers, stored banks");
    r.run(bf16_layers(E, H), E, k, H, BankFormat::kStored);
  }
}

// DeepSeek-V4's clamped SwiGLU through the GPU expert cache: offload equals fused (the resident CUDA
// experts) bit for bit, hybrid and cpu (the CPU executor's kSwigluClamp) within bf16 tolerance.
TEST_F(CudaOffloadOai, ClampedSwigluOffloadEqualsFusedHybridAndCpu) {
  OaiOffloadRunner r(*gpu_, DType::BF16);
  const int32_t E = 8, k = 2;
  const int64_t H = 256;
  {
    SCOPED_TRACE("bf16 and q8_0 layers, stored banks");
    r.run(clamp_layers(E, H, true), E, k, H, BankFormat::kStored);
  }
  {
    SCOPED_TRACE("bf16 layers, EC12 banks");
    r.run(clamp_layers(E, H, false), E, k, H, BankFormat::kEc12);
  }
}

#ifdef FT_HAVE_CUDA
// One decode step of three gpt-oss layers (24 experts over 16 slots: steps miss and evict) captured as a
// CUDA graph: the admissions, gathers and slot-bias copies, the prefetches (by the copy engines, or the
// gather kernel) are replayed with new routes; every replay equals an eager step, and offload equals fused.
TEST_F(CudaOffloadOai, DecodeStepReplaysAsACudaGraph) {
  OaiExperts ex;
  const int32_t E = 8, k = 2;
  const int64_t H = 128, F = 64;
  constexpr int kLayers = 3;
  for (uint32_t seed : {6u, 7u, 8u})
    ex.add_layer(E, F, H, DType::BF16, DType::BF16, seed, ExpertGlu::kSwigluOai, 1);
  struct Case {
    MoeStrategy s;
    int32_t cap;
    bool dma;
  };
  for (const Case gc : {Case{MoeStrategy::kOffload, -1, true}, Case{MoeStrategy::kOffload, -1, false},
                        Case{MoeStrategy::kHybrid, 1, true}}) {
    SCOPED_TRACE(std::string(moe_strategy_name(gc.s)) + (gc.dma ? "" : ", gather kernel"));
    set_cuda_prefetch_dma(gc.dma);
    OaiOffloadRunner io(*gpu_, DType::BF16);
    MoeRuntimeOptions ro;
    ro.max_tokens = 1, ro.n_expert_used = k, ro.cpu_threads = 2;
    ro.prefetch = true;
    ro.bank_format = BankFormat::kStored;
    const MoePlan plan = make_plan(ex.s.banks, gc.s, 2 * E, gc.cap);
    OffloadedExperts graphed(*gpu_, ex.s.banks, plan, ro), eager(*gpu_, ex.s.banks, plan, ro);
    ResidentExperts fused(*gpu_, ex.s.banks);
    ASSERT_NO_FATAL_FAILURE(expect_graph_replays_equal_eager<kLayers>(
        *gpu_, graphed, eager, gc.s == MoeStrategy::kOffload ? &fused : nullptr, H, k, E, 3.0f,
        [&](DType dt, std::initializer_list<int64_t> shape) { return io.dev(dt, shape); },
        [&](const Tensor& d, DType dt, auto& v, std::initializer_list<int64_t> shape) { io.put(d, dt, v, shape); },
        [&](const Tensor& d) { return io.read(d); }));
    EXPECT_NO_THROW(graphed.check());
    std::vector<MoeLayerStats> st = graphed.stats();
    EXPECT_GT(total_moe_stats(st).misses, 0);
    EXPECT_GT(total_moe_stats(st).prefetched, 0);
  }
  set_cuda_prefetch_dma(true);
}
#endif

}  // namespace
}  // namespace ft::testing
