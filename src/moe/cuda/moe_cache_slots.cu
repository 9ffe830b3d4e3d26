// CudaExpertSlots: the expert cache on the GPU. Device arrays hold the admission state
// (moe/cache_admission.h), the slot pool and the per-admission outputs; admit() queues the
// admission kernel and the gather kernel on the backend's stream: no host synchronisation, fixed
// launch shapes, so a decode step that calls it can be captured in a CUDA graph and replayed with
// new routes. The slot pool is exposed per layer as an ExpertBank of device views, so
// CudaOps::moe_experts computes with slot ids exactly as with resident expert ids.
// Prefill streaming fills a staging region with a layer's records on a second stream (a gather
// kernel with a small grid, so the SMs keep computing the previous layer; EC12 banks decode on the
// way): experts the cache holds in other slots are copied from there, the rest read from the host
// banks. Ordered by events: the copy starts after the work queued before stream_layer, and
// wait_region makes the backend's stream wait for it.
// Offload's prefetch in a captured step goes to the copy engines through a host thread
// (moe_cache_copy.h; EC12 records through a device staging ring and a decode), other prefetches to
// the gather kernel on a side stream.
// Biases (gpt-oss): every expert's biases stay resident on the device (uploaded once, indexed by
// expert id), and each slot has a row of each (SlotBiases, moe/expert_slots.h) that the slot bank's
// bias views read by slot id: after every admission and prefetch admission a small kernel copies the
// misses' rows from the resident copies (moe_cache_bias.cu), and a streamed layer's rows are one
// device-to-device copy; so offload, hybrid and prefetch compute the same biased experts as fused.
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "moe/cuda/moe_cache_copy.h"
#include "backend/cuda/pdl.cuh"
#include "moe/cuda/moe_cache_kernels.h"
#include "backend/cuda_factory.h"
#include "backend/op_checks.h"
#include "moe/cuda/cuda_factories.h"
#include "moe/expert_slots.h"
#include "util/log.h"

namespace ft {
namespace {

cuda::Switch g_prefetch_dma("FT_MOE_PREFETCH_DMA");  // set_cuda_prefetch_dma
// The copier thread polls this long after a request before it sleeps: a decode step's layers come
// every few hundred microseconds (the exchange dispatcher's CUDA setting).
constexpr int kDmaSpinUs = 2000;

class CudaExpertSlots final : public ExpertSlots {
 public:
  CudaExpertSlots(CudaOps& ops, const ExpertBanks& banks, int32_t n_slots, int32_t max_pairs)
      : ops_(ops), banks_(banks), host_(static_cast<int32_t>(banks.n_layers()), banks.max_experts(), n_slots, max_pairs) {
    if (banks.n_moe_layers() == 0) fail(ErrorCode::kInvalidArgument, "expert slots: the model has no routed experts");
    const int32_t L = host_.n_layers(), E = host_.n_expert();
    std::vector<uint64_t> base(static_cast<size_t>(L), 0);
    std::vector<int64_t> rec(static_cast<size_t>(L), 0);
    for (int32_t l = 0; l < L; ++l) {
      if (banks.n_expert(l) == 0) continue;
      if (!banks.device_base(l))
        fail(ErrorCode::kInvalidArgument, "expert slots: layer {}'s expert bank is not pinned for a GPU (allocate the "
             "banks with make_pinned_host_allocator)", l);
      base[static_cast<size_t>(l)] = reinterpret_cast<uint64_t>(banks.device_base(l));
      rec[static_cast<size_t>(l)] = banks.record_bytes(l);
    }
    // EC12 banks: where each layer's coded matrices sit and where they decode to (the gather decodes).
    const bool ec12 = banks.format() == BankFormat::kEc12;
    std::vector<cuda::Ec12Layer> ec12_layers(ec12 ? static_cast<size_t>(L) : 0);
    int32_t ec12_items = 0;
    for (int32_t l = 0; ec12 && l < L; ++l) {
      if (banks.n_expert(l) == 0) continue;
      const ExpertLayout &rl = banks.record_layout(l), &sl = banks.layout(l);
      const int64_t ro[3] = {rl.gate_offset, rl.up_offset, rl.down_offset};
      const int64_t so[3] = {sl.gate_offset, sl.up_offset, sl.down_offset};
      const int64_t rows[3] = {sl.n_ff, sl.n_ff, sl.n_embd}, cols[3] = {sl.n_embd, sl.n_embd, sl.n_ff};
      cuda::Ec12Layer& el = ec12_layers[static_cast<size_t>(l)];
      el = cuda::make_ec12_layer(ro, so, rows, cols);
      ec12_items = std::max(ec12_items, el.items[0] + el.items[1] + el.items[2]);
    }
    max_misses_ = std::min(max_pairs, E);
    auto carve = [&](int64_t bytes) {
      const int64_t off = state_bytes_;
      state_bytes_ += (bytes + 255) / 256 * 256;
      return off;
    };
    const int64_t o_map = carve(int64_t{4} * L * E), o_owner = carve(int64_t{4} * n_slots),
                  o_stamp = carve(int64_t{8} * n_slots), o_tick = carve(8), o_stats = carve(int64_t{8} * L * kCacheStatCount),
                  o_miss = carve(static_cast<int64_t>(sizeof(CacheMiss)) * max_misses_), o_nmiss = carve(4),
                  o_pf_miss = carve(int64_t{kPf} * static_cast<int64_t>(sizeof(CacheMiss)) * max_misses_),
                  o_pf_nmiss = carve(int64_t{4} * kPf),
                  o_base = carve(int64_t{8} * L), o_rec = carve(int64_t{8} * L),
                  o_ec12 = carve(static_cast<int64_t>(sizeof(cuda::Ec12Layer)) * static_cast<int64_t>(ec12_layers.size())),
                  o_keep = carve(int64_t{4} * 2 * E);
    state_ = ops.alloc(state_bytes_);
    uint8_t* d = static_cast<uint8_t*>(state_.data());
    dev_.n_layers = L, dev_.n_expert = E, dev_.n_slots = n_slots;
    dev_.slot_of = reinterpret_cast<int32_t*>(d + o_map);
    dev_.owner = reinterpret_cast<int32_t*>(d + o_owner);
    dev_.stamp = reinterpret_cast<int64_t*>(d + o_stamp);
    dev_.tick = reinterpret_cast<int64_t*>(d + o_tick);
    dev_.stats = reinterpret_cast<int64_t*>(d + o_stats);
    stream_keep_ = reinterpret_cast<int32_t*>(d + o_keep);
    misses_ = reinterpret_cast<CacheMiss*>(d + o_miss);
    n_misses_ = reinterpret_cast<int32_t*>(d + o_nmiss);
    gather_.misses = misses_, gather_.n_misses = n_misses_, gather_.max_misses = max_misses_;
    gather_.host_base = reinterpret_cast<uint64_t*>(d + o_base);
    gather_.record_bytes = reinterpret_cast<int64_t*>(d + o_rec);
    gather_.max_record_bytes = *std::max_element(rec.begin(), rec.end());
    gather_.slot_bytes = banks.slot_bytes();
    if (ec12) {
      gather_.ec12 = reinterpret_cast<const cuda::Ec12Layer*>(d + o_ec12);
      gather_.ec12_items = ec12_items;
    }
    // A miss list per prefetch in flight: a prefetch's copies may still read one while the next
    // prefetch admission writes another, and no admission waits for them.
    for (int p = 0; p < kPf; ++p) {
      Prefetch& f = pf_[p];
      f.misses = reinterpret_cast<CacheMiss*>(d + o_pf_miss) + p * max_misses_;
      f.n_misses = reinterpret_cast<int32_t*>(d + o_pf_nmiss) + p;
      f.gather = gather_;
      f.gather.misses = f.misses, f.gather.n_misses = f.n_misses;
    }
    upload(host_);  // empty state
    cudaStream_t st = ops.stream();
    FT_CUDA_CHECK(cudaMemsetAsync(n_misses_, 0, 4, st));
    FT_CUDA_CHECK(cudaMemsetAsync(pf_[0].n_misses, 0, 4 * kPf, st));
    FT_CUDA_CHECK(cudaMemcpyAsync(const_cast<uint64_t*>(gather_.host_base), base.data(), base.size() * 8,
                                  cudaMemcpyHostToDevice, st));
    FT_CUDA_CHECK(cudaMemcpyAsync(const_cast<int64_t*>(gather_.record_bytes), rec.data(), rec.size() * 8,
                                  cudaMemcpyHostToDevice, st));
    if (ec12)
      FT_CUDA_CHECK(cudaMemcpyAsync(const_cast<cuda::Ec12Layer*>(gather_.ec12), ec12_layers.data(),
                                    ec12_layers.size() * sizeof(cuda::Ec12Layer), cudaMemcpyHostToDevice, st));
    pool_ = ops.alloc(static_cast<int64_t>(n_slots) * banks.slot_bytes());
    gather_.pool = static_cast<uint8_t*>(pool_.data());
    for (Prefetch& f : pf_) f.gather.pool = gather_.pool;
    setup_biases(n_slots);
    slot_banks_.build(banks, gather_.pool, n_slots, Device::kCuda, biases_);
    FT_CUDA_CHECK(cudaStreamSynchronize(st));  // host vectors above go out of scope
    gather_blocks_ = 4 * ops.sm_count();
    // The prefetch gather runs beside the layer's kernels: a few blocks keep PCIe busy (8 to 66
    // measured the same on the H200), while the main gather's 4 per SM there, each with its host
    // reads in flight, stalled the co-running kernels and the copy did not overlap at all
    // (bench/RESULTS.md, "Prefetch").
    prefetch_blocks_ = std::max(8, ops.sm_count() / 4);
    // A hybrid layer's prefetch shares the link with the CPU exchange's reads of host memory (the
    // wait kernel's poll, then the CPU's result), which queue behind the reads the gather has in
    // flight, 16 KiB per block: 33 blocks held the wait ~50 us past the CPU's answer, 8 keep the
    // link as busy (H200, hybrid skew 0 at cap 2: 42.4 -> 45.5 tok/s; 16 blocks 42.9, 4 blocks
    // 35.3; offload skew 1.0 with 8 blocks: 66.7 -> 65.0, so offload keeps the larger grid).
    // EC12 banks read 25% fewer bytes through the link and decode on the way, and there 8 blocks
    // left hybrid's fetches short (H200, skew 0, one lease: 8 blocks 42.9 tok/s at a calibrated cap
    // 1, 16 blocks 44.8, the offload prefetch's 33 blocks 48.7 at cap 2; stored banks at 8: 43.9).
    hybrid_prefetch_blocks_ =
        banks.format() == BankFormat::kEc12 ? prefetch_blocks_ : std::max(4, ops.sm_count() / 16);
    build_regions(banks, gather_.pool, n_slots, Device::kCuda, biases_);
    prefetch_slots_ = ops.alloc(int64_t{4} * max_pairs);
    // Offload's prefetch (no fetch cap) by the copy engines: a host thread copies each miss
    // (moe_cache_copy.h). Hybrid layers keep the gather kernel (their host cores are the CPU
    // executor's, and their fewer gather blocks are tuned against the exchange's reads). EC12
    // records go through a small device staging ring and are decoded from there into their slots
    // (HBM to HBM, with the prefetch's grid): the decoding gather read the link at ~47 GB/s of coded
    // bytes against the copy engines' ~54 (bench/CUDA_NOTES.md, "Session 21").
    if (g_prefetch_dma.on()) {
      try {
        const int64_t staging = cuda::DmaPrefetch::staging_bytes(gather_);
        if (staging > 0) staging_ = ops.alloc(staging);
        dma_ = std::make_unique<cuda::DmaPrefetch>(banks, gather_, n_slots, max_misses_, ops.device_index(), kDmaSpinUs,
                                                   static_cast<uint8_t*>(staging_.data()), prefetch_blocks_);
      } catch (const Error& e) {
        if (e.code() != ErrorCode::kUnsupported) throw;
        spdlog::warn("{}; the prefetch uses the gather kernel", e.what());
      }
    }
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&side_stream_, cudaStreamNonBlocking));
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&prefetch_queued_, cudaEventDisableTiming));
    for (Prefetch& f : pf_) FT_CUDA_CHECK(cudaEventCreateWithFlags(&f.done, cudaEventDisableTiming));
    if (n_regions() > 0) {
      FT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      FT_CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
      copied_.assign(static_cast<size_t>(n_regions()), nullptr);
      for (cudaEvent_t& e : copied_) FT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }

  ~CudaExpertSlots() override {
    if (dma_) {  // no queued wait may outlive the copier's thread
      cudaStreamSynchronize(ops_.stream());
      dma_.reset();
    }
    if (side_stream_) {
      cudaStreamSynchronize(side_stream_);
      cudaStreamDestroy(side_stream_);
    }
    if (prefetch_queued_) cudaEventDestroy(prefetch_queued_);
    for (Prefetch& f : pf_)
      if (f.done) cudaEventDestroy(f.done);
    if (copy_stream_) {
      cudaStreamSynchronize(copy_stream_);
      cudaStreamDestroy(copy_stream_);
    }
    if (queued_) cudaEventDestroy(queued_);
    for (cudaEvent_t e : copied_)
      if (e) cudaEventDestroy(e);
  }

  int32_t n_slots() const override { return host_.n_slots(); }
  Device device() const override { return Device::kCuda; }

  void admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids, Tensor cpu_ids) override {
    check_admit_args(banks_, Device::kCuda, host_.max_pairs(), layer, ids, slot_ids, cpu_ids);
    // No join here: the admission touches only the state, which the side gather does not; its
    // victims may be slots that gather still writes, so gather_misses joins before its own copies.
    AdmitArgs a;
    a.layer = layer, a.n_pairs = static_cast<int32_t>(ids.numel()), a.policy = policy;
    a.spare = ledger_.admit(layer);  // the prefetches for later layers may still be filling theirs
    a.record_bytes = banks_.record_bytes(layer);
    a.ids = ids.ptr<int32_t>(), a.slot_ids = slot_ids.ptr<int32_t>();
    a.cpu_ids = cpu_ids.empty() ? nullptr : cpu_ids.ptr<int32_t>();
    a.misses = misses_, a.n_misses = n_misses_;
    cuda::launch_cache_admit(dev_, a, ops_.stream());
    last_was_prefetch_ = false;
  }

  void gather_misses() override {
    // The layer's experts and its misses' slots come after the copies of the prefetches the
    // ledger says are due: the ones for this layer and any left behind (the admission spared the
    // slots of the others, made for later layers).
    for (const PrefetchLedger::Entry& e : ledger_.take_due()) join(e.tag);
    cuda::launch_cache_gather(gather_, gather_blocks_, ops_.stream());
    copy_miss_biases(misses_, n_misses_);
  }

  void prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) override {
    Tensor sid(prefetch_slots_.data(), DType::I32, ids.shape.data(), ids.ndim, Device::kCuda);
    check_admit_args(banks_, Device::kCuda, host_.max_pairs(), layer, ids, sid, Tensor());
    while (ledger_.in_flight() >= PrefetchLedger::kMaxInFlight) join(ledger_.take_oldest().tag);
    int tag = 0;
    while (ledger_.uses(tag)) ++tag;  // a miss list no prefetch in flight reads
    Prefetch& f = pf_[tag];
    AdmitArgs a;
    a.layer = layer, a.n_pairs = static_cast<int32_t>(ids.numel()), a.policy = policy, a.prefetch = true;
    a.spare = ledger_.prefetch_spare();
    a.record_bytes = banks_.record_bytes(layer);
    a.ids = ids.ptr<int32_t>(), a.slot_ids = sid.ptr<int32_t>();
    a.misses = f.misses, a.n_misses = f.n_misses;
    cudaStream_t st = ops_.stream();
    cuda::launch_cache_admit(dev_, a, st);
    copy_miss_biases(f.misses, f.n_misses);  // now, on this stream: the victims' rows are free (moe_cache_bias.cu)
    // The copy engines only in a captured step (a graph). Eager steps with them did not finish on the
    // H200: qwen3-30b-a3b bf16 under offload with a 16-token prompt (its prefill takes the admission
    // path eagerly; ft bench ran past 90 s against ~10 s), and hybrid's start-up calibration, whose
    // prompt step is eager, each time it was tried. Why is not known: GPU tests with 300-400 eager
    // layers of small experts pass either way (bench/CUDA_NOTES.md, "Session 20"). Eager steps use
    // the gather kernel, as before the copy engines came (session 19).
    const unsigned long long capture = capture_id();
    f.dma = dma_ && policy.fetches_all() && capture != 0;
    if (f.dma) {
      dma_->publish(f.misses, f.n_misses, tag, st);
    } else {
      FT_CUDA_CHECK(cudaEventRecord(prefetch_queued_, st));
      FT_CUDA_CHECK(cudaStreamWaitEvent(side_stream_, prefetch_queued_, 0));
      cuda::launch_cache_gather(f.gather, policy.fetches_all() ? prefetch_blocks_ : hybrid_prefetch_blocks_, side_stream_);
      FT_CUDA_CHECK(cudaEventRecord(f.done, side_stream_));
    }
    f.capture_id = capture;
    ledger_.add_prefetch(layer, tag);
    last_was_prefetch_ = true;
    last_pf_ = tag;
  }

  void stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16 = 0) override {
    const int32_t first = check_stream_args(banks_, layer, region, cpu_share_q16), n = banks_.n_expert(layer);
    join_prefetches();
    last_was_prefetch_ = false;
    const int64_t rb = banks_.record_bytes(layer);
    cudaStream_t st = ops_.stream();
    int32_t* keep = stream_keep_ + static_cast<int64_t>(region) * banks_.max_experts();  // read by this region's copy only
    cuda::launch_cache_claim_region(dev_, layer, first, n, rb, keep, region_first(0), st, cpu_share_q16);
    const cuda::SlotBiasLayer& bl = bias_layers_[static_cast<size_t>(layer)];
    for (int j = 0; j < 3; ++j)  // the layer's biases into the region's rows, device to device
      if (bl.src[j])
        FT_CUDA_CHECK(cudaMemcpyAsync(bl.dst[j] + static_cast<int64_t>(first) * bl.width[j], bl.src[j],
                                      static_cast<size_t>(n) * static_cast<size_t>(bl.width[j]) * 4,
                                      cudaMemcpyDeviceToDevice, st));
    FT_CUDA_CHECK(cudaEventRecord(queued_, st));  // the copy stream takes the wait when it is queued
    FT_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, queued_, 0));
    // Decoded on the way in: the decoding gather, on the copy stream all the same, with the prefetch's
    // small grid: it runs beside the previous layer's prefill kernels, and the main gather's 4 blocks
    // per SM, each holding its SM for the whole layer, kept those off their SMs (H200, 8k prefill of
    // qwen3-30b-a3b bf16: 5,001 tok/s with 4 per SM against 7,694 with stored banks' copy engines).
    // Experts cached outside the region are copied from their slots (claim_region's keep list), the
    // rest read from the banks over UVA: stored banks by the plain gather with the same grid (the
    // copy engines would need the keep list on the host, a synchronisation per layer).
    if (gather_.ec12)
      cuda::launch_cache_stream_ec12(gather_, layer, first, n, prefetch_blocks_, copy_stream_, nullptr, keep);
    else
      cuda::launch_cache_stream(gather_, layer, first, n, keep, prefetch_blocks_, copy_stream_);
    FT_CUDA_CHECK(cudaEventRecord(copied_[static_cast<size_t>(region)], copy_stream_));
  }

  void finish_prefetches() override { join_prefetches(); }

  void split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) override {
    check_split_args(Device::kCuda, region, ids, gpu_ids, cpu_ids);
    const int32_t* keep = stream_keep_ + static_cast<int64_t>(region) * banks_.max_experts();
    cuda::launch_stream_split(ids.ptr<int32_t>(), keep, banks_.max_experts(), ids.numel(), gpu_ids.ptr<int32_t>(),
                              cpu_ids.ptr<int32_t>(), ops_.stream());
  }

  void wait_region(int32_t region) override {
    if (region < 0 || region >= n_regions())
      fail(ErrorCode::kInvalidArgument, "expert slots: staging region {} outside [0, {})", region, n_regions());
    FT_CUDA_CHECK(cudaStreamWaitEvent(ops_.stream(), copied_[static_cast<size_t>(region)], 0));
  }

  const ExpertBank& slot_bank(int32_t layer) const override { return slot_banks_.at(layer); }

  void check() override {
    if (dma_) dma_->check();
  }

  std::vector<CacheLayerStats> stats() override {
    download();
    std::vector<CacheLayerStats> out;
    for (int32_t l = 0; l < host_.n_layers(); ++l) out.push_back(host_.stats(l));
    return out;
  }

  void copy_state_to(ExpertCache& dst) override {
    host_.check_same_geometry(dst);
    download();
    dst = host_;
  }

  std::vector<CacheMiss> last_misses() override {
    int32_t n = 0;
    const bool pf = last_was_prefetch_;
    const CacheMiss* list = pf ? pf_[last_pf_].misses : misses_;
    FT_CUDA_CHECK(cudaMemcpyAsync(&n, pf ? pf_[last_pf_].n_misses : n_misses_, 4, cudaMemcpyDeviceToHost,
                                  ops_.stream()));
    FT_CUDA_CHECK(cudaStreamSynchronize(ops_.stream()));
    std::vector<CacheMiss> out(static_cast<size_t>(n));
    if (n > 0) {
      FT_CUDA_CHECK(cudaMemcpyAsync(out.data(), list, sizeof(CacheMiss) * out.size(), cudaMemcpyDeviceToHost,
                                    ops_.stream()));
      FT_CUDA_CHECK(cudaStreamSynchronize(ops_.stream()));
    }
    return out;
  }

 private:
  /** One prefetch: its miss list, its side gather's arguments and the event after that gather. */
  struct Prefetch {
    CacheMiss* misses = nullptr;
    int32_t* n_misses = nullptr;
    cuda::GatherArgs gather;
    cudaEvent_t done = nullptr;
    unsigned long long capture_id = 0;  // the stream capture it was queued in (0: none)
    bool dma = false;                   // copied by dma_ (else the side stream's gather)
  };

  /** The id of the backend stream's active capture, 0 when it is not capturing. */
  unsigned long long capture_id() const {
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    FT_CUDA_CHECK(cudaStreamGetCaptureInfo(ops_.stream(), &cs, &id));
    return cs == cudaStreamCaptureStatusActive ? id : 0;
  }

  /** Makes the backend's stream wait for the copies of prefetch `tag`. A prefetch queued inside a
   *  capture that has since ended without joining it (the step threw and the capture was
   *  abandoned) never ran: its event belongs to the dropped graph, so there is nothing to wait for. */
  void join(int tag) {
    const Prefetch& f = pf_[tag];
    if (f.capture_id != 0 && capture_id() != f.capture_id) return;
    if (f.dma) return dma_->wait(tag, ops_.stream());
    FT_CUDA_CHECK(cudaStreamWaitEvent(ops_.stream(), f.done, 0));
  }
  void join_prefetches() {
    for (const PrefetchLedger::Entry& e : ledger_.take_all()) join(e.tag);
  }

  /** Uploads every layer's biases (banks_.bank(l), host F32) once and lays out the slots' rows
   *  (biases_), when any layer has biases; blocking. Throws kInvalidArgument for biases that are not
   *  F32 [n_expert, width] host tensors. */
  void setup_biases(int32_t n_slots) {
    const int32_t L = host_.n_layers();
    bias_layers_.assign(static_cast<size_t>(L), cuda::SlotBiasLayer{});
    int64_t resident = 0;  // floats
    for (int32_t l = 0; l < L; ++l) {
      if (banks_.n_expert(l) == 0) continue;
      const ExpertBank& b = banks_.bank(l);
      op_checks::expert_bank_extras("expert slots", b, banks_.layout(l).n_embd);
      for (int j = 0; j < 3; ++j) {
        const Tensor& t = expert_bias(b, j);
        if (t.empty()) continue;
        if (t.device != Device::kCpu)
          fail(ErrorCode::kInvalidArgument, "expert slots: layer {}'s bias {} must be a host tensor", l, t.str());
        resident += t.numel();
      }
    }
    if (resident == 0) return;
    const int64_t rows = biases_.plan(banks_, n_slots, nullptr);
    bias_store_ = ops_.alloc((resident + rows) * 4);
    float* d = static_cast<float*>(bias_store_.data());
    biases_.plan(banks_, n_slots, d + resident);  // the slots' rows after the resident copies
    cudaStream_t st = ops_.stream();
    for (int32_t l = 0; l < L; ++l) {
      if (banks_.n_expert(l) == 0) continue;
      for (int j = 0; j < 3; ++j) {
        const Tensor& t = expert_bias(banks_.bank(l), j);
        if (t.empty()) continue;
        FT_CUDA_CHECK(cudaMemcpyAsync(d, t.data, static_cast<size_t>(t.bytes()), cudaMemcpyHostToDevice, st));
        cuda::SlotBiasLayer& bl = bias_layers_[static_cast<size_t>(l)];
        bl.src[j] = d, bl.dst[j] = biases_.at(l, j), bl.width[j] = static_cast<int32_t>(t.dim(1));
        d += t.numel();
      }
    }
    FT_CUDA_CHECK(cudaMemsetAsync(d, 0, static_cast<size_t>(rows) * 4, st));  // the rows, back to back
    bias_table_ = ops_.alloc(static_cast<int64_t>(sizeof(cuda::SlotBiasLayer)) * L);
    FT_CUDA_CHECK(cudaMemcpyAsync(bias_table_.data(), bias_layers_.data(), sizeof(cuda::SlotBiasLayer) * bias_layers_.size(),
                                  cudaMemcpyHostToDevice, st));
    FT_CUDA_CHECK(cudaStreamSynchronize(st));  // the host biases may be views the caller releases later
    has_bias_ = true;
  }

  /** Queues the copy of the biases of an admission's misses into their slots' rows (nothing without
   *  biases). */
  void copy_miss_biases(const CacheMiss* misses, const int32_t* n_misses) {
    if (!has_bias_) return;
    cuda::SlotBiasArgs a;
    a.misses = misses, a.n_misses = n_misses, a.max_misses = max_misses_;
    a.layers = static_cast<const cuda::SlotBiasLayer*>(bias_table_.data());
    cuda::launch_cache_bias_copy(a, ops_.stream());
  }

  /** Copies a host state into the device arrays (blocking). */
  void upload(ExpertCache& src) {
    transfer(src.refs(), cudaMemcpyHostToDevice);
  }
  /** Copies the device state into host_ (blocking). */
  void download() {
    join_prefetches();  // so the synchronisation below also covers the prefetch gathers
    transfer(host_.refs(), cudaMemcpyDeviceToHost);
  }

  void transfer(const CacheStateRefs& h, cudaMemcpyKind kind) {
    cudaStream_t st = ops_.stream();
    const size_t n_keys = static_cast<size_t>(h.n_layers) * static_cast<size_t>(h.n_expert);
    const size_t n_slots = static_cast<size_t>(h.n_slots);
    const size_t n_stats = static_cast<size_t>(h.n_layers) * kCacheStatCount;
    const bool up = kind == cudaMemcpyHostToDevice;
    auto copy = [&](void* hp, void* dp, size_t bytes) {
      FT_CUDA_CHECK(cudaMemcpyAsync(up ? dp : hp, up ? hp : dp, bytes, kind, st));
    };
    copy(h.slot_of, dev_.slot_of, n_keys * 4);
    copy(h.owner, dev_.owner, n_slots * 4);
    copy(h.stamp, dev_.stamp, n_slots * 8);
    copy(h.tick, dev_.tick, 8);
    copy(h.stats, dev_.stats, n_stats * 8);
    FT_CUDA_CHECK(cudaStreamSynchronize(st));
  }

  CudaOps& ops_;
  const ExpertBanks& banks_;
  ExpertCache host_;  // geometry, and the staging copy of the device state
  Buffer state_, pool_;
  Buffer staging_;  // the copy-engine prefetch's EC12 records before their decode (DmaPrefetch::staging_bytes)
  int64_t state_bytes_ = 0;
  CacheStateRefs dev_;
  CacheMiss* misses_ = nullptr;                        // the last admission's misses (gather_misses)
  int32_t* n_misses_ = nullptr;
  int32_t max_misses_ = 0;
  cuda::GatherArgs gather_;
  int gather_blocks_ = 1;
  int prefetch_blocks_ = 1;         // the prefetch gather's grid (offload)
  int hybrid_prefetch_blocks_ = 1;  // and for a hybrid layer (a capped or planned FetchPolicy)
  SlotBanks slot_banks_;
  // Biases (setup_biases): every expert's, resident, then the slots' rows (biases_), in bias_store_.
  Buffer bias_store_, bias_table_;                     // bias_table_: bias_layers_ on the device
  std::vector<cuda::SlotBiasLayer> bias_layers_;       // [n_layers] (device addresses)
  SlotBiases biases_;
  bool has_bias_ = false;
  Buffer prefetch_slots_;                              // I32 [max_pairs]: the prefetch admission's slot ids
  cudaStream_t side_stream_ = nullptr;                 // prefetch gathers
  cudaEvent_t prefetch_queued_ = nullptr;              // the work queued before a prefetch's gather
  static constexpr int kPf = PrefetchLedger::kMaxInFlight;
  static_assert(kCopyRingEntries >= kPf, "the copy ring holds every prefetch in flight");
  Prefetch pf_[kPf];                                   // by tag: a prefetch's miss list, copies, event
  PrefetchLedger ledger_;                              // the prefetches in flight, spare counts
  int last_pf_ = 0;                                    // the last prefetch made
  bool last_was_prefetch_ = false;                     // last_misses() reports the prefetch's list
  std::unique_ptr<cuda::DmaPrefetch> dma_;             // offload's prefetch copies, or null (after staging_)
  cudaStream_t copy_stream_ = nullptr;                 // prefill streaming copies
  int32_t* stream_keep_ = nullptr;                     // [2][max_experts] each region's claim: cached slot, -1 or kStreamOnCpu
  cudaEvent_t queued_ = nullptr;                       // the work queued before a stream_layer
  std::vector<cudaEvent_t> copied_;                    // per region: its last copy done
};

}  // namespace

void set_cuda_prefetch_dma(bool enabled) { g_prefetch_dma.set(enabled); }

std::unique_ptr<ExpertSlots> make_cuda_expert_slots(Ops& ops, const ExpertBanks& banks, int32_t n_slots,
                                                    int32_t max_pairs) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (!cuda_ops)
    fail(ErrorCode::kInvalidArgument,
         "expert slots: a GPU expert cache needs the cuda backend itself, not {} (bench --profile-ops profiles the "
         "fused MoE strategy only on CUDA)",
         ops.name());
  return std::make_unique<CudaExpertSlots>(*cuda_ops, banks, n_slots, max_pairs);
}

}  // namespace ft
