// The GPU expert cache (skipped without a CUDA device; FT_REQUIRE_GPU=1 makes that a failure):
// the admission kernel against the CPU reference on random routes (slot ids, CPU ids, miss lists,
// state, stats, staging regions emptied by streamed layers), the gather's and the streaming copy's
// slot bytes, offload == fused bit for bit (decode steps through the cache, prefill-sized steps
// streamed) and hybrid/cpu within bf16 tolerance through OffloadedExperts on the CUDA backend, and
// a decode step captured in a CUDA graph and replayed with new routes equal to eager execution.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "cuda_moe_test.h"
#include "model_run.h"
#include "moe/host_exchange.h"
#include "moe/offloaded_experts.h"
#include "moe_test_util.h"
#include "tensor/half.h"
#include "util/error.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_ops.h"
#include "moe/graph_replay.h"
#endif

namespace ft::testing {
namespace {

class CudaExpertCache : public CudaMoeTest {
 protected:
  /** Body of OffloadEqualsFusedHybridAndCpuWithinBf16 for stored or EC12 banks. */
  void offload_equals_fused(bool ec12);
};

/** Restores offload's default prefetch copies (the copy engines) when a test that switches them ends. */
struct PrefetchDmaGuard {
  ~PrefetchDmaGuard() { set_cuda_prefetch_dma(true); }
};

void expect_same_state(ExpertCache& a, ExpertCache& b) {
  CacheStateRefs x = a.refs(), y = b.refs();
  const size_t keys = static_cast<size_t>(x.n_layers) * static_cast<size_t>(x.n_expert);
  EXPECT_EQ(*x.tick, *y.tick);
  EXPECT_EQ(std::memcmp(x.slot_of, y.slot_of, keys * 4), 0);
  EXPECT_EQ(std::memcmp(x.owner, y.owner, static_cast<size_t>(x.n_slots) * 4), 0);
  EXPECT_EQ(std::memcmp(x.stamp, y.stamp, static_cast<size_t>(x.n_slots) * 8), 0);
  EXPECT_EQ(std::memcmp(x.stats, y.stats, static_cast<size_t>(x.n_layers) * kCacheStatCount * 8), 0);
}

TEST_F(CudaExpertCache, AdmissionKernelMatchesTheCpuReference) {
  SyntheticExperts s;
  const int32_t E = 16, k = 4, S = 40, max_pairs = 64;
  s.add_layer(E, 64, 256, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(E, 64, 256, DType::Q4_K, DType::Q8_0, 2);
  auto pinned_alloc = make_bank_allocator(*gpu_);
  auto host_alloc = make_host_allocator();
  ExpertBanks pinned(s.banks, *pinned_alloc), plain(s.banks, *host_alloc);
  ASSERT_NE(pinned.device_base(0), nullptr);
  auto dslots = make_expert_slots(*gpu_, pinned, S, max_pairs);
  HostExpertSlots hslots(plain, S, max_pairs);
  ExpertCache dstate(3, E, S, max_pairs), hstate(3, E, S, max_pairs);
  Tensor d_ids = dev(DType::I32, {max_pairs}), d_sid = dev(DType::I32, {max_pairs}), d_cid = dev(DType::I32, {max_pairs});
  std::mt19937 rng(11);
  // Plain caps and the planner's splits (heaviest misses first; bounded by a cap in the last).
  FetchPolicy caps[6] = {-1, -1, 2, 0, -1, 3};
  caps[4].cpu_cost = kFetchCostUnit, caps[4].cpu_token_cost = kFetchCostUnit / 3;
  caps[5].cpu_cost = 3 * kFetchCostUnit;
  for (int step = 0; step < 120; ++step) {
    const int32_t layer = rng() % 2 ? 2 : 0;
    const FetchPolicy cap = caps[step % 6];
    const int64_t T = 1 + rng() % 16;
    std::vector<int32_t> ids = random_routes(T, k, E, step % 3 == 0 ? 0.0 : 1.0, rng);
    if (step % 5 == 0) ids[0] = -1;
    if (step % 7 == 0) ids[ids.size() - 1] = 99;  // out of range: treated as absent on both sides
    std::vector<int32_t> hsid(ids.size()), hcid(ids.size());
    Tensor di = put(d_ids, DType::I32, ids, {T, k});
    Tensor ds(d_sid.data, DType::I32, {T, k}, Device::kCuda), dc(d_cid.data, DType::I32, {T, k}, Device::kCuda);
    dslots->admit(layer, di, cap, ds, dc);
    hslots.admit(layer, Tensor(ids.data(), DType::I32, {T, k}), cap, Tensor(hsid.data(), DType::I32, {T, k}),
                 Tensor(hcid.data(), DType::I32, {T, k}));
    ASSERT_EQ(read_i32(ds), hsid) << "step " << step;
    ASSERT_EQ(read_i32(dc), hcid) << "step " << step;
    const std::vector<CacheMiss> dm = dslots->last_misses(), hm = hslots.last_misses();
    ASSERT_EQ(dm.size(), hm.size());
    for (size_t i = 0; i < dm.size(); ++i) {
      EXPECT_EQ(dm[i].layer, hm[i].layer);
      EXPECT_EQ(dm[i].expert, hm[i].expert);
      EXPECT_EQ(dm[i].slot, hm[i].slot);
    }
    if (step % 4 == 1) {  // a prefetch of predicted routes for the other layer, as the next layer would
      const int32_t other = layer == 0 ? 2 : 0;
      std::vector<int32_t> guess = random_routes(T, k, E, 0.5, rng);
      const FetchPolicy pf = step % 8 == 1 ? FetchPolicy(2) : step % 12 == 5 ? caps[4] : FetchPolicy(-1);
      dslots->prefetch(other, put(d_ids, DType::I32, guess, {T, k}), pf);
      hslots.prefetch(other, Tensor(guess.data(), DType::I32, {T, k}), pf);
      const std::vector<CacheMiss> dm = dslots->last_misses(), hm = hslots.last_misses();
      ASSERT_EQ(dm.size(), hm.size()) << "prefetch at step " << step;
      for (size_t i = 0; i < dm.size(); ++i) EXPECT_EQ(dm[i].slot, hm[i].slot);
    }
    if (step % 9 == 8) {  // a streamed layer empties a staging region on both sides
      ASSERT_EQ(dslots->n_regions(), 2);
      const int32_t share = step % 18 == 17 ? 40000 : 0;  // every other one leaves a CPU share
      dslots->stream_layer(layer, step % 2, share);
      dslots->wait_region(step % 2);
      hslots.stream_layer(layer, step % 2, share);
      // The same routes split alike: the CPU's share by the claim, the rest to the region.
      std::vector<int32_t> hg(T * k), hc(T * k);
      Tensor dg(d_sid.data, DType::I32, {T, k}, Device::kCuda), dcc(d_cid.data, DType::I32, {T, k}, Device::kCuda);
      dslots->split_streamed(step % 2, put(d_ids, DType::I32, ids, {T, k}), dg, dcc);  // a prefetch reused d_ids
      hslots.split_streamed(step % 2, Tensor(ids.data(), DType::I32, {T, k}), Tensor(hg.data(), DType::I32, {T, k}),
                            Tensor(hc.data(), DType::I32, {T, k}));
      ASSERT_EQ(read_i32(dg), hg) << "step " << step;
      ASSERT_EQ(read_i32(dcc), hc) << "step " << step;
      if (share == 0) EXPECT_EQ(hc, std::vector<int32_t>(hc.size(), -1));
    }
    if (step % 10 == 9) {
      dslots->copy_state_to(dstate);
      hslots.copy_state_to(hstate);
      dstate.check_integrity();
      expect_same_state(dstate, hstate);
    }
  }
  // Every occupied slot holds its expert's record, byte for byte (read back through the slot bank).
  for (int32_t slot = 0; slot < S; ++slot) {
    const int32_t key = hstate.owner(slot);
    if (key < 0) continue;
    const int32_t layer = key / E, e = key % E;
    const int64_t bytes = plain.layout(layer).bytes;
    const Tensor& g = dslots->slot_bank(layer).gate[static_cast<size_t>(slot)];
    std::vector<int32_t> got(static_cast<size_t>(bytes / 4));
    gpu_->copy(Tensor(static_cast<uint8_t*>(g.data) - plain.layout(layer).gate_offset, DType::I32, {bytes / 4},
                      Device::kCuda),
               Tensor(got.data(), DType::I32, {bytes / 4}));
    EXPECT_EQ(std::memcmp(got.data(), plain.record(layer, e), static_cast<size_t>(bytes)), 0) << "slot " << slot;
  }
  // A streamed layer's region holds its records in expert order (read back through the region bank).
  dslots->stream_layer(2, 1);
  dslots->wait_region(1);
  const int64_t bytes = plain.layout(2).bytes;
  for (int32_t e = 0; e < E; ++e) {
    const Tensor& g = dslots->region_bank(2, 1).gate[static_cast<size_t>(e)];
    std::vector<int32_t> got(static_cast<size_t>(bytes / 4));
    gpu_->copy(Tensor(static_cast<uint8_t*>(g.data) - plain.layout(2).gate_offset, DType::I32, {bytes / 4},
                      Device::kCuda),
               Tensor(got.data(), DType::I32, {bytes / 4}));
    EXPECT_EQ(std::memcmp(got.data(), plain.record(2, e), static_cast<size_t>(bytes)), 0) << "expert " << e;
  }
}

struct Strategy {
  MoeStrategy s;
  int32_t cap;
  bool prefetch = false;
  int32_t slots_per_expert = 2;  // slots = this x E: 3 leaves slots outside the two staging regions
  bool preload = false;          // MoeRuntimeOptions::preload
};

TEST_F(CudaExpertCache, OffloadEqualsFusedHybridAndCpuWithinBf16) {
  // Twice: a BF16 and a Q8_0 layer (stored banks), then two BF16 layers with exceptions, whose banks
  // are EC12-coded (the decoding gather and streaming kernels).
  for (const bool ec12 : {false, true}) {
    SCOPED_TRACE(ec12 ? "EC12 banks" : "stored banks");
    offload_equals_fused(ec12);
  }
}

void CudaExpertCache::offload_equals_fused(bool ec12) {
  SyntheticExperts s;
  const int32_t E = 8, k = 2;
  const int64_t H = 256, F = 256, maxT = 40;  // quantized rows of 256: 16-byte aligned for the GEMV loads
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 3);
  s.add_layer(E, ec12 ? 192 : F, H, ec12 ? DType::BF16 : DType::Q8_0, ec12 ? DType::BF16 : DType::Q8_0, 4);
  if (ec12)
    for (size_t l : {0, 1}) s.add_ec12_exceptions(l, 40, static_cast<uint32_t>(l));
  ResidentExperts fused(*gpu_, s.banks);
  MoeRuntimeOptions ro;
  ro.max_tokens = maxT, ro.n_expert_used = k, ro.cpu_threads = 4;
  ro.stream_min_tokens = maxT;  // the prefill-sized steps stream whole layers through the regions
  Tensor dx = dev(DType::BF16, {maxT * H}), di = dev(DType::I32, {maxT * k}), dw = dev(DType::F32, {maxT * k});
  Tensor dwant = dev(DType::BF16, {maxT * H}), dgot = dev(DType::BF16, {maxT * H});
  Tensor dpf = dev(DType::I32, {maxT * k});
  // With prefetch, predicted routes are fetched ahead; hybrid + prefetch sends the layer's other
  // misses to the CPU while the prefetch's side gather may still run.
  // These steps run eagerly, so offload's prefetch copies by the gather kernel whatever
  // set_cuda_prefetch_dma says; the copy engines serve captured steps (DecodeStepReplaysAsACudaGraph,
  // DeepPrefetchUnderEvictionEqualsFused).
  for (Strategy st : {Strategy{MoeStrategy::kOffload, -1}, Strategy{MoeStrategy::kOffload, -1, true},
                      Strategy{MoeStrategy::kHybrid, 1}, Strategy{MoeStrategy::kHybrid, 1, true},
                      Strategy{MoeStrategy::kCpu, -1},
                      // Streamed steps copying cached experts device to device, and from the start
                      // with the cache preloaded (in place in the regions, or in the other slots).
                      Strategy{MoeStrategy::kOffload, -1, false, 3}, Strategy{MoeStrategy::kOffload, -1, false, 3, true},
                      Strategy{MoeStrategy::kHybrid, 1, true, 3, true}}) {
    SCOPED_TRACE(std::string(moe_strategy_name(st.s)) + (st.prefetch ? " + prefetch" : "") + " in " +
                 std::to_string(st.slots_per_expert) + " x E slots" + (st.preload ? ", preloaded" : ""));
    MoeRuntimeOptions sro = ro;
    sro.prefetch = st.prefetch, sro.preload = st.preload;
    OffloadedExperts off(*gpu_, s.banks, make_plan(s.banks, st.s, st.slots_per_expert * E, st.cap), sro);
    int64_t kept = 0;  // streamed experts copied from a slot (hits of a streamed step)
    auto total_hits = [&off] {
      int64_t h = 0;
      for (const MoeLayerStats& l : off.stats()) h += l.hits;
      return h;
    };
    ASSERT_EQ(off.banks().format(), ec12 ? BankFormat::kEc12 : BankFormat::kStored);
    std::mt19937 rng(5);
    for (int step = 0; step < 12; ++step) {
      const int64_t T = step % 4 == 3 ? maxT : 1 + step % 3;  // decode sizes and one prefill-sized batch
      for (int64_t layer : {0, 1}) {
        std::vector<int32_t> ids = random_routes(T, k, E, 0.5, rng);
        std::vector<float> x(static_cast<size_t>(T * H)), w(static_cast<size_t>(T * k));
        std::uniform_real_distribution<float> d(-1, 1);
        for (float& f : x) f = d(rng);
        for (float& f : w) f = 0.5f + 0.5f * d(rng);
        Tensor tx = put(dx, DType::F32, x, {T, H}), ti = put(di, DType::I32, ids, {T, k});
        Tensor tw = put(dw, DType::F32, w, {T, k});
        Tensor want(dwant.data, DType::BF16, {T, H}, Device::kCuda), got(dgot.data, DType::BF16, {T, H}, Device::kCuda);
        if (off.prefetch_target(layer, T) >= 0) {  // a guess for layer 1 while layer 0 computes
          std::vector<int32_t> guess = random_routes(T, k, E, 0.5, rng);
          off.prefetch(off.prefetch_target(layer, T), put(dpf, DType::I32, guess, {T, k}));
        }
        const bool streamed = T == maxT && st.s != MoeStrategy::kCpu;
        const int64_t hits_before = streamed ? total_hits() : 0;
        fused.compute(layer, tx, ti, tw, want);
        off.compute(layer, tx, ti, tw, got);
        const std::vector<float> a = read_f32(got), b = read_f32(want);
        if (streamed) kept += total_hits() - hits_before;
        if (st.s == MoeStrategy::kOffload)  // with or without prefetch
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step << " layer " << layer;
        else
          ASSERT_LT(rel_l2(a, b), 2e-2) << "step " << step << " layer " << layer;
      }
    }
    if (st.slots_per_expert == 3) {
      EXPECT_GT(kept, 0);  // the device-to-device path ran
    }
  }
}

#ifdef FT_HAVE_CUDA
struct GraphCase {
  MoeStrategy s;
  int32_t cap;
  const char* cpu_layers;
  bool dma = true;  // offload's prefetch by the copy engines in the captured steps (else the gather kernel)
  int depth = 1;    // MoeRuntimeOptions::prefetch_depth (2d x E slots: 2 and 3 hold every expert)
  BankFormat format = BankFormat::kStored;  // kEc12: copy engines into staging + decode, or the decoding gather
};

// Every strategy's decode step is one graph: offload (admission, gather and the side-stream
// prefetch inside it), hybrid (the CPU's share through moe/host_exchange.h: copy kernel, host
// dispatcher, wait kernel) and cpu / --moe-cpu-layers. Replays with new routes equal eager steps
// bit for bit (same kernels, same CPU executor).
TEST_F(CudaExpertCache, DecodeStepReplaysAsACudaGraph) {
  SyntheticExperts s;
  const int32_t E = 8, k = 2;
  const int64_t H = 128, F = 64;
  constexpr int kLayers = 3;  // 24 experts over 16 slots: steps miss
  for (uint32_t seed : {6u, 7u, 8u}) s.add_layer(E, F, H, DType::BF16, DType::BF16, seed);
  for (size_t l = 0; l < kLayers; ++l) s.add_ec12_exceptions(l, 10, static_cast<uint32_t>(l));
  PrefetchDmaGuard guard;
  const BankFormat kEc12 = BankFormat::kEc12;
  for (GraphCase gc : {GraphCase{MoeStrategy::kOffload, -1, ""}, GraphCase{MoeStrategy::kOffload, -1, "", false},
                       GraphCase{MoeStrategy::kHybrid, 1, ""}, GraphCase{MoeStrategy::kCpu, -1, ""},
                       GraphCase{MoeStrategy::kOffload, -1, "1"}, GraphCase{MoeStrategy::kOffload, -1, "", true, 2},
                       GraphCase{MoeStrategy::kOffload, -1, "", false, 2},
                       GraphCase{MoeStrategy::kOffload, -1, "", true, 1, kEc12},
                       GraphCase{MoeStrategy::kOffload, -1, "", true, 2, kEc12},
                       GraphCase{MoeStrategy::kOffload, -1, "", false, 1, kEc12},
                       GraphCase{MoeStrategy::kOffload, -1, "", true, 3, kEc12},
                       GraphCase{MoeStrategy::kHybrid, 1, "", true, 1, kEc12},
                       GraphCase{MoeStrategy::kCpu, -1, "", true, 1, kEc12}}) {
    SCOPED_TRACE(std::string(moe_strategy_name(gc.s)) + ", cpu layers: " + gc.cpu_layers +
                 (gc.dma ? "" : ", gather kernel") + ", depth " + std::to_string(gc.depth) +
                 (gc.format == kEc12 ? ", EC12 banks" : ""));
    set_cuda_prefetch_dma(gc.dma);
    const bool cached = gc.s != MoeStrategy::kCpu, with_cpu = gc.s != MoeStrategy::kOffload || gc.cpu_layers[0];
    MoeRuntimeOptions ro;
    ro.max_tokens = 1, ro.n_expert_used = k, ro.cpu_threads = 2;
    ro.prefetch = cached;  // the prefetches' copies are forked and joined inside the graph
    ro.prefetch_depth = gc.depth;
    ro.bank_format = gc.format;
    const MoePlan plan = make_plan(s.banks, gc.s, cached ? 2 * gc.depth * E : 0, gc.cap, gc.cpu_layers);
    const auto n_slots = static_cast<int32_t>(plan.cache.n_slots);  // depth 2: every expert (24 of 32)
    OffloadedExperts graphed(*gpu_, s.banks, plan, ro), eager(*gpu_, s.banks, plan, ro);
    ResidentExperts fused(*gpu_, s.banks);
    const bool exact = gc.s == MoeStrategy::kOffload && !gc.cpu_layers[0];  // offload == fused, bit for bit
    ASSERT_NO_FATAL_FAILURE(expect_graph_replays_equal_eager<kLayers>(
        *gpu_, graphed, eager, exact ? &fused : nullptr, H, k, E, 1.0f,
        [&](DType dt, std::initializer_list<int64_t> shape) { return dev(dt, shape); },
        [&](const Tensor& d, DType dt, auto& v, std::initializer_list<int64_t> shape) { put(d, dt, v, shape); },
        [&](const Tensor& d) { return read_f32(d); }));
    EXPECT_NO_THROW(graphed.check());  // no exchange failed or timed out
    const std::vector<MoeLayerStats> gs = graphed.stats(), es = eager.stats();
    for (int l = 0; l < kLayers; ++l) EXPECT_EQ(gs[l].cpu_experts, es[l].cpu_experts) << l;
    EXPECT_EQ(total_moe_stats(gs).cpu_experts > 0, with_cpu);
    if (!cached) continue;
    // A step's kLayers cache layers predict at most kLayers - 1 ahead (choose_prefetch_depth's reach).
    EXPECT_EQ(graphed.prefetch_depth(), std::min(gc.depth, kLayers - 1));
    ExpertCache a(kLayers, E, n_slots, k), b(kLayers, E, n_slots, k);
    graphed.slots()->copy_state_to(a);
    eager.slots()->copy_state_to(b);
    a.check_integrity();
    expect_same_state(a, b);
    EXPECT_GT(a.stats(2).prefetched, 0);
    if (gc.cpu_layers[0]) continue;  // two cache layers: all their experts fit in the 16 slots
    EXPECT_GT(a.stats(0).misses, 0);
    EXPECT_GT(a.stats(0).hits, 0);
  }
}

// A device-side wait whose dispatcher never finishes gives up after its limit: the stream goes on,
// the output is left as it was, and check() reports it; the next wait, while the dispatcher is
// still stuck, gives up at once. A watchdog frees the dispatcher after 5 s, so a wait kernel that
// never gave up fails the timing checks instead of hanging the test.
TEST_F(CudaExpertCache, ExchangeWaitTimesOutWithoutHangingTheGpu) {
  auto alloc = make_bank_allocator(*gpu_);
  const int64_t H = 256;
  ExchangeBuffers buf(*alloc, 1, H, 2);
  std::atomic<bool> release{false};
  ExchangeDispatcher disp(
      buf,
      [&](const ExchangeRequest& r) {  // writes the request's number: a late result is told apart
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        auto* o = static_cast<float*>(r.out.data);
        for (int64_t i = 0; i < r.out.numel(); ++i) o[i] = static_cast<float>(r.seq);
      },
      0);
  std::thread watchdog([&] {
    for (int i = 0; i < 5000 && !release.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    release = true;
  });
  std::unique_ptr<ExchangeDevice> xd = make_exchange_device(*gpu_, buf, disp);
  xd->ack_timeout_s = 2.0, xd->done_timeout_s = 0.1;
  Tensor x = dev(DType::BF16, {1, H}), ids = dev(DType::I32, {1, 2}), w = dev(DType::F32, {1, 2});
  Tensor out = dev(DType::F32, {1, H});
  for (Tensor* t : {&x, &ids, &w, &out}) gpu_->zero(*t);
  auto seconds = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  auto t0 = std::chrono::steady_clock::now();
  xd->post(0, x, ids, w);
  xd->collect(out, true);
  gpu_->synchronize();  // returns: the wait kernel gave up after 0.1 s
  EXPECT_LT(seconds(t0), 1.5);
  try {
    xd->check();
    ADD_FAILURE() << "no timeout reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("started: yes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_f32(out)[0], 0.0f);
  t0 = std::chrono::steady_clock::now();
  xd->post(0, x, ids, w);  // the dispatcher still holds request 1
  xd->collect(out, true);
  gpu_->synchronize();
  EXPECT_LT(seconds(t0), 1.5);  // at once, not after the 2 s ack limit
  EXPECT_THROW(xd->check(), Error);
  EXPECT_EQ(read_f32(out)[0], 0.0f);
  release = true;
  watchdog.join();
  t0 = std::chrono::steady_clock::now();  // the dispatcher catches up: request 1, then 2
  while (std::atomic_ref<uint64_t>(buf.host.ctrl->done_seq).load() < 2 && seconds(t0) < 5.0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  xd->ack_timeout_s = xd->done_timeout_s = 10.0;
  xd->post(0, x, ids, w);
  xd->collect(out, false);
  gpu_->synchronize();
  EXPECT_NO_THROW(xd->check());
  EXPECT_EQ(read_f32(out)[0], 3.0f);  // request 3's own result
}


// A step that throws while it is being captured, after a prefetch was queued, must leave the
// cache usable: the prefetch's side work belonged to the dropped graph and never ran, so the next
// eager step must not wait on its event (it did, and every later step failed).
TEST_F(CudaExpertCache, AbandonedCaptureAfterAPrefetchLeavesEagerStepsWorking) {
  SyntheticExperts s;
  const int32_t E = 8, k = 2;
  const int64_t H = 128, F = 64;
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 11);
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 12);
  MoeRuntimeOptions ro;
  ro.max_tokens = 1, ro.n_expert_used = k, ro.cpu_threads = 1, ro.prefetch = true;
  const MoePlan plan = make_plan(s.banks, MoeStrategy::kOffload, 2 * E);
  OffloadedExperts off(*gpu_, s.banks, plan, ro);
  ResidentExperts fused(*gpu_, s.banks);
  Tensor x = dev(DType::BF16, {1, H}), w = dev(DType::F32, {1, k}), guess = dev(DType::I32, {1, k});
  Tensor ids[2] = {dev(DType::I32, {1, k}), dev(DType::I32, {1, k})};
  Tensor got = dev(DType::BF16, {1, H}), want = dev(DType::BF16, {1, H});
  std::mt19937 rng(13);
  std::vector<float> xv(H), wv(k, 0.5f);
  std::uniform_real_distribution<float> d(-1, 1);
  for (float& f : xv) f = d(rng);
  put(x, DType::F32, xv, {1, H});
  put(w, DType::F32, wv, {1, k});
  auto routes = [&](Tensor& t) {
    std::vector<int32_t> v = random_routes(1, k, E, 0.0, rng);
    put(t, DType::I32, v, {1, k});
  };
  auto layer0 = [&] {
    off.prefetch(off.prefetch_target(0, 1), guess);
    off.compute(0, x, ids[0], w, got);
  };
  routes(ids[0]), routes(ids[1]), routes(guess);
  layer0();  // eager warm-up: scratch exists before the capture
  off.compute(1, x, ids[1], w, got);
  EXPECT_THROW(gpu_->capture([&] {
    layer0();
    fail(ErrorCode::kInternal, "the step failed after its prefetch");
  }),
               Error);
  for (int step = 0; step < 4; ++step) {
    routes(ids[0]), routes(ids[1]), routes(guess);
    for (int l : {0, 1}) {
      if (l == 0) layer0(); else off.compute(1, x, ids[1], w, got);
      fused.compute(l, x, ids[l], w, want);
      const std::vector<float> a = read_f32(got), b = read_f32(want);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step << " layer " << l;
    }
  }
  ExpertCache state(2, E, 2 * E, k);
  off.slots()->copy_state_to(state);
  state.check_integrity();
}
// Prefetch depths 2 to 4 under eviction on the GPU: twelve MoE layers of 4 experts in 2d x E slots
// (16, 24 and 32 of 48), so admissions evict while d prefetches' copies are in flight; predictions
// right about half the time; copies by the copy engines (each step after the first three captured as a graph: eager
// steps use the gather kernel), by the gather kernel, and EC12 banks decoded by the gather or
// copied by the copy engines into staging and decoded from there (graphs too). Offload equals
// fused bit for bit.
TEST_F(CudaExpertCache, DeepPrefetchUnderEvictionEqualsFused) {
  SyntheticExperts s;
  const int32_t E = 4, k = 2, kLayers = 12;
  const int64_t H = 256, F = 256;
  for (int32_t l = 0; l < kLayers; ++l) s.add_layer(E, F, H, DType::BF16, DType::BF16, 20 + l);
  for (int32_t l = 0; l < kLayers; ++l) s.add_ec12_exceptions(static_cast<size_t>(l), 20, static_cast<uint32_t>(l));
  ResidentExperts fused(*gpu_, s.banks);
  PrefetchDmaGuard guard;
  // Depth 2: stored banks by the copy engines, by the gather kernel; EC12 banks: gather, copy
  // engines. Depths 3 and 4 with the copy engines (depth 3 in both formats).
  for (int mode : {0, 1, 2, 3, 4, 5, 6}) {
    const bool dma = mode == 0 || mode == 3 || mode >= 4, ec12 = mode == 2 || mode == 3 || mode == 5 || mode == 6;
    const int depth = mode == 6 ? 4 : mode >= 4 ? 3 : 2;
    SCOPED_TRACE(std::string(ec12 ? "EC12 banks, " : "stored banks, ") + (dma ? "copy engines" : "gather kernel") +
                 ", depth " + std::to_string(depth));
    set_cuda_prefetch_dma(dma);
    MoeRuntimeOptions ro;
    ro.max_tokens = 4, ro.n_expert_used = k, ro.cpu_threads = 1, ro.prefetch = true, ro.prefetch_depth = depth;
    ro.bank_format = ec12 ? BankFormat::kEc12 : BankFormat::kStored;
    OffloadedExperts off(*gpu_, s.banks, make_plan(s.banks, MoeStrategy::kOffload, 2 * depth * E), ro);
    ASSERT_EQ(off.prefetch_depth(), depth);
    // Per layer: inputs and both outputs, so a step's layers queue without a host wait between them
    // (the copies of two prefetches then overlap the admissions that must spare their slots).
    Tensor x[kLayers], w[kLayers], ids[kLayers], guess[kLayers], got[kLayers], want[kLayers];
    for (int32_t l = 0; l < kLayers; ++l) {
      x[l] = dev(DType::BF16, {4 * H}), w[l] = dev(DType::F32, {4 * k});
      ids[l] = dev(DType::I32, {4 * k}), guess[l] = dev(DType::I32, {4 * k});
      got[l] = dev(DType::BF16, {4 * H}), want[l] = dev(DType::BF16, {4 * H});
    }
    std::mt19937 rng(17);
    for (int step = 0; step < 30; ++step) {
      const int64_t T = 1 + step % 3;
      Tensor tx[kLayers], tw[kLayers], ti[kLayers], tg[kLayers], tgot[kLayers], twant[kLayers];
      for (int32_t l = 0; l < kLayers; ++l) {
        std::vector<int32_t> v = random_routes(T, k, E, 0.0, rng);
        std::vector<int32_t> g = rng() % 2 ? v : random_routes(T, k, E, 0.0, rng);
        std::vector<float> xv(static_cast<size_t>(T * H)), wv(static_cast<size_t>(T * k));
        std::uniform_real_distribution<float> d(-1, 1);
        for (float& f : xv) f = d(rng);
        for (float& f : wv) f = 0.5f + 0.5f * d(rng);
        ti[l] = put(ids[l], DType::I32, v, {T, k}), tg[l] = put(guess[l], DType::I32, g, {T, k});
        tx[l] = put(x[l], DType::F32, xv, {T, H}), tw[l] = put(w[l], DType::F32, wv, {T, k});
        tgot[l] = Tensor(got[l].data, DType::BF16, {T, H}, Device::kCuda);
        twant[l] = Tensor(want[l].data, DType::BF16, {T, H}, Device::kCuda);
      }
      auto body = [&] {
        for (int32_t l = 0; l < kLayers; ++l) {
          const PrefetchTargets t = off.prefetch_targets(l, T);
          for (int i = 0; i < t.n; ++i) off.prefetch(t.layer[i], tg[t.layer[i]]);
          off.compute(l, tx[l], ti[l], tw[l], tgot[l]);
        }
      };
      std::unique_ptr<StepGraph> graph;  // kept until the outputs are read
      if ((dma || ec12) && step >= 3) {  // every T ran eagerly once: scratch exists
        graph = gpu_->capture(body);
        graph->launch();
      } else {
        body();
      }
      for (int32_t l = 0; l < kLayers; ++l) fused.compute(l, tx[l], ti[l], tw[l], twant[l]);
      for (int32_t l = 0; l < kLayers; ++l) {
        const std::vector<float> a = read_f32(tgot[l]), b = read_f32(twant[l]);
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "step " << step << " layer " << l;
      }
    }
    EXPECT_NO_THROW(off.check());
    ExpertCache state(kLayers, E, 2 * depth * E, k);
    off.slots()->copy_state_to(state);
    state.check_integrity();
    const MoeLayerStats total = total_moe_stats(off.stats());
    EXPECT_GT(total.prefetched, 0);
    EXPECT_GT(total.misses, 0);
  }
}
#endif

}  // namespace
}  // namespace ft::testing
