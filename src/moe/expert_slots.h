#pragma once
// ExpertSlots: an expert cache with its storage. A pool of n_slots slots (each slot_bytes, the
// largest expert record), admission of a layer's routed ids (moe/cache_admission.h) and the gather
// that copies missed records from the host banks into their slots. The pool is also seen, per
// layer, as an ExpertBank of n_slots experts in that layer's layout, so Ops::moe_experts computes
// cached experts with slot ids exactly as it computes resident experts with expert ids (same
// kernels: offload and fused give identical results).
//
// Prefill streaming: the last 2 * max_experts slots are also two staging regions of max_experts
// consecutive slots (region r starts at slot n_slots - (2 - r) * max_experts; the empty slots that
// admissions and the preload fill first are the lowest). stream_layer(l, r) maps layer l's
// experts to region r in the admission state (claim_region, cache_admission.h) and fills it in
// expert order: an expert cached in another slot is copied from that slot (device to device) and
// stays cached there, the others come from the host banks (CUDA: on a copy stream, after the work
// queued before it);
// wait_region(r) makes later work wait for that copy; region_bank(l, r) views the region as layer
// l's bank indexed by expert id, so Ops::moe_experts runs with the router's ids on the same kernels
// as fused. While one layer computes from its region, the next layer streams into the other; the
// slots outside the regions keep their experts, so a prefill after decode steps reads the cached
// share of every layer from device memory and only the rest over PCIe.
//
// Biases (gpt-oss): a slot bank is indexed by slot id, so the experts' biases (ExpertBank::gate_bias,
// up_bias, down_bias, indexed by the bank's expert index) travel with the experts: every slot has a
// row of each bias (SlotBiases), written wherever the slot's record is (a miss, a prefetch's miss, a
// streamed layer), from copies of every expert's biases that the implementation keeps (the CUDA one
// on the device, uploaded once). The slot and region banks carry the layers' GLU form and views of
// those rows, so Ops::moe_experts adds the right bias to each pair.
//
// Two implementations: the host twin (this file; the CPU build and the reference) and the CUDA one
// (moe/cuda/moe_cache_slots.cu: device state, admission kernel and UVA gather kernel on the
// backend's stream, no host synchronisation).
// C++17-clean: included from CUDA sources.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "moe/expert_bank.h"
#include "moe/expert_cache.h"

namespace ft {

/** Per-slot rows of the experts' biases: a bias array of [n_slots, width] floats per bias kind (gate,
 *  up, down) and width (a layer's n_ff, or n_embd for down), shared by the layers of that width; row s
 *  of layer l's array holds the bias of the expert slot s holds while that expert is of a layer of
 *  this width (a slot holds one expert at a time, and views of one width never see another width's
 *  rows). */
struct SlotBiases {
  /** [n_layers][3]: layer l's array for bias j (0 gate, 1 up, 2 down), or null (none, a dense layer). */
  std::vector<std::array<float*, 3>> rows;
  float* at(int64_t layer, int j) const {
    return layer >= 0 && static_cast<size_t>(layer) < rows.size() ? rows[static_cast<size_t>(layer)][static_cast<size_t>(j)]
                                                                   : nullptr;
  }
  /** Lays the arrays for n_slots slots of src's layers out from `base` (null: only counts) and returns
   *  the floats they take (0 when no layer has biases). */
  int64_t plan(const ExpertBanks& src, int32_t n_slots, float* base);
};

/** Bias j (0 gate, 1 up, 2 down) of a bank, empty when it has none. */
const Tensor& expert_bias(const ExpertBank& bank, int j);

/** Slot banks shared by the implementations: one bank per distinct layer layout, GLU and set of biases
 *  over a pool at `pool` (n_slots records of slot_bytes each) on `device`; bank_of[l] indexes banks (-1
 *  dense). The banks' biases view rows first_slot .. first_slot + n_slots of `biases` (which must hold
 *  every bias a layer of src has). */
struct SlotBanks {
  std::vector<ExpertBank> banks;
  std::vector<int32_t> bank_of;
  void build(const ExpertBanks& src, uint8_t* pool, int32_t n_slots, Device device, const SlotBiases& biases = {},
             int32_t first_slot = 0);
  const ExpertBank& at(int32_t layer) const;
};

/** The prefetches in flight and the spare counts of the admissions around them (AdmitArgs::spare,
 *  cache_admission.h), kept alike by both ExpertSlots implementations so that their admissions take
 *  the same victims. Every admission (prefetch or real) gets the next index; a new admission spares
 *  every admission back to the oldest prefetch in flight that is not for its own layer and whose
 *  layer has not been admitted yet (its copies may still be filling its slots, and that layer will
 *  use them). A prefetch is due (to be joined before a gather writes slots) once its layer has
 *  been admitted, or when it is more than kMaxAge admissions old (a step that ended early left it
 *  behind). Depth 1 gives the counts of the fixed rule before it: 2 for a prefetch, 1 for the
 *  admission right after one; depth 2: 4 and 3; depth d: 2d - 1 for a layer's admission. A
 *  prefetch always spares at least the 2 admissions before it (prefetch_spare). */
class PrefetchLedger {
 public:
  static constexpr int kMaxInFlight = 5;  // depth 4: the prefetches of the next four layers, plus a new one
  static constexpr int64_t kMaxAge = 10;  // depth 4: a prefetch's layer is admitted 2 x 4 + 1 admissions on
  struct Entry {
    int32_t layer = -1;
    int64_t index = 0;      // the prefetch admission's index
    bool admitted = false;  // its layer's own admission came
    int tag = 0;            // the implementation's buffer for it
  };
  /** Up to kMaxInFlight entries, oldest first (no heap: the ledger runs per layer of a decode step). */
  struct Entries {
    Entry at[kMaxInFlight];
    int n = 0;
    const Entry* begin() const { return at; }
    const Entry* end() const { return at + n; }
    size_t size() const { return static_cast<size_t>(n); }
    bool empty() const { return n == 0; }
    const Entry& operator[](size_t i) const { return at[i]; }
  };

  /** The spare count of a prefetch admission about to be made: at least 2, since the admission
   *  just before it may be the layer about to compute (hybrid prefetches after its own admission). */
  int32_t prefetch_spare() const { return std::max(spare_for(-1), 2); }
  /** Records the prefetch admission just made for `layer` (after prefetch_spare()). The caller keeps
   *  in_flight() below kMaxInFlight (take_oldest()); throws ft::Error(kInternal) otherwise. */
  void add_prefetch(int32_t layer, int tag);
  /** A real admission of `layer` about to be made: returns its spare count, records it and marks
   *  the prefetches for `layer` admitted. */
  int32_t admit(int32_t layer);
  /** Removes and returns the due prefetches, oldest first. */
  Entries take_due();
  /** Removes and returns the oldest prefetch in flight. Throws ft::Error(kInternal) when none is. */
  Entry take_oldest();
  /** Removes and returns every prefetch in flight, oldest first. */
  Entries take_all();
  int in_flight() const { return pending_.n; }
  /** Whether a prefetch in flight uses `tag`. */
  bool uses(int tag) const;

 private:
  int32_t spare_for(int32_t layer) const;
  int64_t next_ = 1;
  Entries pending_;
};

class ExpertSlots {
 public:
  virtual ~ExpertSlots() = default;

  virtual int32_t n_slots() const = 0;
  /** Where the slots, ids and outputs live. */
  virtual Device device() const = 0;

  /** Admission + gather for MoE layer `layer`: ids I32 [T, k] (expert ids, < 0 absent) ->
   *  slot_ids I32 [T, k] (slot per pair, -1 where not computed from a slot) and cpu_ids I32 [T, k]
   *  (expert id where the CPU must compute the pair, else -1; may be an empty tensor), all on
   *  device(). policy: which misses are fetched (cache_admission.h FetchPolicy; a plain cap < 0
   *  fetches all); the others go to cpu_ids.
   *  When this returns (host) or in stream order (CUDA), the slots named by slot_ids hold their
   *  experts. Throws ft::Error(kInvalidArgument) for a layer without experts, T * k over the
   *  max_pairs the slots were made for, or mismatched shapes. */
  void admit(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids, Tensor cpu_ids) {
    admit_routes(layer, ids, policy, slot_ids, cpu_ids);
    gather_misses();
  }
  /** admit() in two parts, so a caller can queue other work between them (hybrid: the copy of the
   *  CPU's inputs to the host, which must not wait for the gather): the admission (outputs final;
   *  the missed slots do not hold their experts yet), then the gather of that admission's misses. */
  virtual void admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids, Tensor cpu_ids) = 0;
  virtual void gather_misses() = 0;

  /** Prefetch (--moe-prefetch): a prefetch admission (cache_admission.h) of predicted ids I32
   *  [T, k] on device() for `layer`, the misses `policy` fetches (its cap, < 0: all), and the copy of
   *  those misses; later admissions spare its slots until its layer is admitted (PrefetchLedger).
   *  A caller may issue the prefetches for layers l + 1 and l + 2 before layer l's admit_routes.
   *  CUDA: the copies run after the work queued before and behind the previous prefetch's (at most
   *  PrefetchLedger::kMaxInFlight in flight, each with its own miss list), so the link does not
   *  idle between layers: offload's by the copy engines in a captured step (a host thread,
   *  moe_cache_copy.h; an eager step's by the gather kernel, moe_cache_slots.cu says why), a
   *  capped prefetch's (hybrid: the layer's CPU share is exchanged over the same link) by a gather
   *  kernel with few blocks on a side stream, so the exchange's reads wait less behind them.
   *  gather_misses waits for the prefetches the ledger says are due, stream_layer and the
   *  inspection calls for all (a captured step stays one graph). Host: done on return. Throws
   *  like admit. */
  virtual void prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) = 0;
  /** Waits for every prefetch in flight (CUDA: queues the waits on the backend's stream) and forgets
   *  them, so no later admission spares their slots: after a preload of the cache at start, whose
   *  layers are not admitted next. */
  virtual void finish_prefetches() = 0;

  /** The pool as `layer`'s bank: n_slots experts with that layer's layout, on device(). */
  virtual const ExpertBank& slot_bank(int32_t layer) const = 0;

  /** Staging regions for prefill streaming: 2 (the pool's last 2 max_experts slots) when the pool
   *  holds that many, else 0. Only two, so a prefill leaves the experts cached in the other slots in
   *  place and streams past them (stream_layer copies a cached expert's slot rather than its host
   *  record). */
  virtual int32_t n_regions() const { return n_regions_; }
  /** The first slot of region r (r < n_regions() of a single pool): n_slots - (2 - r) max_experts. */
  int32_t region_first(int32_t r) const { return regions_first_ + r * region_width_; }
  /** Starts streaming `layer`'s records into region `region` (see the top of this file): in queue
   *  order after all work queued before, so slots other work still reads are not overwritten early;
   *  the region's slots then hold the layer's experts in the cache. With `cpu_share_q16` > 0 the
   *  claim leaves that share (1/65536) of the uncached experts to the CPU (claim_region,
   *  cache_admission.h): not copied, not cached; split_streamed tells their routes apart. Host: done
   *  on return. Throws kInvalidArgument for a layer without experts, a region outside
   *  [0, n_regions()) or a share outside [0, 65536]. */
  virtual void stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16 = 0) = 0;
  /** After stream_layer(layer, region, share): routes `ids` [T, k] I32 on device() into gpu_ids (the
   *  id, for region_bank; -1 where the CPU computes it) and cpu_ids (the id where the region's claim
   *  left the expert to the CPU, else -1), both [T, k] I32 on device(); in queue order, so it reads
   *  the claim of the last stream_layer into `region` queued before it. Throws kInvalidArgument for
   *  a bad region or tensors of other shapes, types or devices. */
  virtual void split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) = 0;
  /** Makes work queued after this call wait until the last stream_layer into `region` finished
   *  (host: nothing to wait for). */
  virtual void wait_region(int32_t region) = 0;
  /** Region `region` as `layer`'s bank: max_experts experts, expert e in slot region_first(region) + e.
   *  Throws kInvalidArgument for a layer without experts or a bad region. */
  virtual const ExpertBank& region_bank(int32_t layer, int32_t region) const;

  /** Throws ft::Error(kInternal) when copies queued since the last check failed or timed out (their
   *  step's results are then wrong); called after a step. Host and the gather kernel: nothing to
   *  check. */
  virtual void check() {}

  /** Per-layer counters since creation (CUDA: read back from the device, synchronizing). */
  virtual std::vector<CacheLayerStats> stats() = 0;

  // ---- inspection (tests, debugging; CUDA: synchronizes) ----
  /** Copies the admission state (map, owners, stamps, tick, stats) into `dst`, which must have the
   *  same layers, map width and slots. Throws kInvalidArgument otherwise. */
  virtual void copy_state_to(ExpertCache& dst) = 0;
  /** The last admission's miss list (a prefetch admission's when that came last). */
  virtual std::vector<CacheMiss> last_misses() = 0;

 protected:
  /** Sets up the regions' banks over `pool` (n_slots slots of src.slot_bytes() on `device`), their
   *  biases over the slots' rows of `biases`. */
  void build_regions(const ExpertBanks& src, uint8_t* pool, int32_t n_slots, Device device,
                     const SlotBiases& biases = {});
  /** Checks stream_layer's arguments; returns the region's first slot. */
  int32_t check_stream_args(const ExpertBanks& src, int32_t layer, int32_t region, int32_t cpu_share_q16 = 0) const;
  /** Checks split_streamed's arguments (on `device`). */
  void check_split_args(Device device, int32_t region, const Tensor& ids, const Tensor& gpu_ids,
                        const Tensor& cpu_ids) const;

 private:
  int32_t n_regions_ = 0;
  int32_t regions_first_ = 0;       // the first region's first slot
  int32_t region_width_ = 0;        // max_experts
  std::vector<SlotBanks> regions_;  // [n_regions]
};


/** The host twin: slots in host memory, admission by ExpertCache, gather by memcpy. */
class HostExpertSlots final : public ExpertSlots {
 public:
  /** `n_slots` (>= banks.max_experts()) slots for admissions of up to `max_pairs` pairs. Throws
   *  kInvalidArgument for a bad count (from ExpertCache), kOutOfMemory. */
  HostExpertSlots(const ExpertBanks& banks, int32_t n_slots, int32_t max_pairs);

  int32_t n_slots() const override { return cache_.n_slots(); }
  Device device() const override { return Device::kCpu; }
  void admit_routes(int32_t layer, const Tensor& ids, FetchPolicy policy, Tensor slot_ids, Tensor cpu_ids) override;
  void gather_misses() override;
  void prefetch(int32_t layer, const Tensor& ids, FetchPolicy policy) override;
  void finish_prefetches() override { ledger_.take_all(); }
  void stream_layer(int32_t layer, int32_t region, int32_t cpu_share_q16 = 0) override;
  void split_streamed(int32_t region, const Tensor& ids, Tensor gpu_ids, Tensor cpu_ids) override;
  void wait_region(int32_t) override {}
  const ExpertBank& slot_bank(int32_t layer) const override { return slot_banks_.at(layer); }
  std::vector<CacheLayerStats> stats() override;
  void copy_state_to(ExpertCache& dst) override;
  std::vector<CacheMiss> last_misses() override;

  /** The admission state (tests). */
  const ExpertCache& cache() const { return cache_; }
  /** Host address of `slot`'s bytes. */
  const uint8_t* slot_data(int32_t slot) const;

 private:
  /** Copies the biases of (layer, expert) into slot `slot`'s rows of biases_. */
  void copy_biases(int32_t layer, int32_t expert, int32_t slot);

  const ExpertBanks& banks_;
  ExpertCache cache_;
  Buffer pool_;
  Buffer bias_pool_;      // the SlotBiases arrays, back to back
  SlotBiases biases_;
  SlotBanks slot_banks_;
  std::vector<int32_t> prefetch_slots_;  // [max_pairs] the prefetch admission's slot ids (unused)
  std::vector<int32_t> stream_src_;      // [2][max_experts] each region's claim: cached slot, -1 or kStreamOnCpu
  PrefetchLedger ledger_;                // spare counts, as the CUDA slots keep them
};

/** The slots for `ops`'s device: HostExpertSlots on the CPU backend, the CUDA expert cache on CudaOps
 *  (`banks` pinned for its device). Defined once per build: moe/device_factories.cpp without CUDA (the
 *  CPU twin only; kUnsupported for another backend), moe/cuda/device_factories.cpp with it. */
std::unique_ptr<ExpertSlots> make_expert_slots(Ops& ops, const ExpertBanks& banks, int32_t n_slots, int32_t max_pairs);

/** For expert caches made from now on on the CUDA backend: offload's next-layer prefetch in a
 *  captured step (a CUDA graph; eager steps always use the gather kernel) copies its experts with
 *  the copy engines, driven by a host thread (true, the default unless
 *  FT_MOE_PREFETCH_DMA=0; moe_cache_copy.h in moe/cuda/), or with the gather kernel on a side
 *  stream (false). Both fill the same slots; for tests and A/B measurements. Defined in
 *  moe/cuda/moe_cache_slots.cu; in a build without CUDA (moe/device_factories.cpp) it does nothing. */
void set_cuda_prefetch_dma(bool enabled);

/** Validates admit()'s tensors: ids, slot_ids (and cpu_ids unless empty) I32 [T, k] on `device`,
 *  T * k <= max_pairs, layer has experts. Throws kInvalidArgument naming the tensor. */
void check_admit_args(const ExpertBanks& banks, Device device, int32_t max_pairs, int32_t layer, const Tensor& ids,
                      const Tensor& slot_ids, const Tensor& cpu_ids);

}  // namespace ft
