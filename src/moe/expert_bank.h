#pragma once
// ExpertBanks: every MoE layer's routed experts copied out of the checkpoint into host memory, one
// contiguous record per (layer, expert) holding gate, up and down in their stored dtype, so one
// copy (a cudaMemcpy, a gather kernel's loop, a memcpy) moves one whole expert. Records of a layer
// are consecutive: record(l, e) = base(l) + e * layout(l).bytes. The memory comes from a
// HostAllocator (pinned + mapped in a CUDA build), filled with parallel reads, then pinned.
// C++17-clean: included from CUDA sources.
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "moe/host_memory.h"

namespace ft {

class ProgressSink;

/** Alignment of each matrix inside a record and of record sizes (16-byte vector loads need 16;
 *  256 keeps every matrix on its own cache lines and suits the GPU's GEMV loads). */
constexpr int64_t kExpertAlign = 256;

/** Where one expert's three matrices sit inside its record. Shapes: gate, up [n_ff, n_embd];
 *  down [n_embd, n_ff]; each in its stored dtype. Offsets and bytes are multiples of kExpertAlign. */
struct ExpertLayout {
  DType gate_type = DType::F32, up_type = DType::F32, down_type = DType::F32;
  int64_t n_ff = 0, n_embd = 0;
  int64_t gate_offset = 0, up_offset = 0, down_offset = 0;  // bytes from the record start
  int64_t bytes = 0;                                        // record size (padded)

  /** Views of the record at `base` (on `device`) as gate/up/down tensors. */
  Tensor gate(uint8_t* base, Device device = Device::kCpu) const;
  Tensor up(uint8_t* base, Device device = Device::kCpu) const;
  Tensor down(uint8_t* base, Device device = Device::kCpu) const;

  bool operator==(const ExpertLayout& o) const;
  bool operator!=(const ExpertLayout& o) const { return !(*this == o); }
};

/** The layout of every expert of `bank` (MoE layer `layer`, for messages). Throws
 *  ft::Error(kInvalidArgument) naming the layer and expert when experts differ in shape or dtype,
 *  or the shapes are not gate/up [F, H], down [H, F]; for an empty bank. */
ExpertLayout expert_layout(const ExpertBank& bank, int64_t layer);

/** How ExpertBanks hold their records. kStored: the checkpoint's dtypes, byte for byte (the slot
 *  layout). kEc12: BF16 matrices coded in 12 bits a value (moe/ec12.h), ~75% of the bytes; the
 *  host views are EC12 tensors, and copy_record (and the GPU gather) decode into the slot layout. */
enum class BankFormat { kStored, kEc12 };
/** "stored" or "ec12", as --moe-bank-format, /v1/stats, /metrics and ft bench --json spell it. */
inline const char* bank_format_name(BankFormat f) { return f == BankFormat::kEc12 ? "ec12" : "stored"; }

/** Whether every layer of `host` can be held as `kEc12`: gate, up and down BF16 with n_ff and n_embd
 *  multiples of 64 (ec12::supports). False for banks without MoE layers. `why`, when given, gets the
 *  first reason it cannot ("" when it can). */
bool ec12_bankable(const std::vector<ExpertBank>& host, std::string* why = nullptr);

/** Appends to `bank` the views of `n` consecutive records starting at `base` (stride layout.bytes). */
void append_record_views(const ExpertLayout& layout, uint8_t* base, int64_t n, Device device, ExpertBank& bank);

class ExpertBanks {
 public:
  /** Copies the routed experts of every layer of `host` (views into the mapped checkpoint, empty
   *  for dense layers; see Model::host_experts) into records, `n_threads` parallel copies (<= 0:
   *  hardware threads; layers are filled roughly in order), then pins each layer's memory with
   *  `alloc`. `layer_filled`, when set, runs once per MoE layer as soon as its records are copied
   *  (on a fill thread), so the caller can release that layer's source; `layer_filled_frees_memory`
   *  says that this gives memory back (Checkpoint::releases_memory). Before allocating, the banks
   *  are checked against `host_room` (empty: host_memory_room(), MemAvailable and the cgroup's
   *  room) by check_bank_host_memory; the fill calls it again before each MoE layer's first record
   *  and, when the records still to write (a releasing checkpoint: the layers in flight) plus
   *  kBankFillReserve exceed it, stops and throws HostMemoryShrunk (host_memory_shrunk: the layer,
   *  the bytes still needed, usable now and at start), the records written so far freed: host
   *  memory taken by another process mid-fill is then an error, not the OOM killer ending the
   *  process halfway through a 60 GB fill. `format` kEc12 codes the records
   *  (a first pass over the experts picks each matrix's code table and counts its exceptions, which
   *  fixes the record size); it needs ec12_bankable(host), else throws kInvalidArgument. `progress`,
   *  when set, sees a phase "expert banks" of the experts' bytes as stored, added as records are
   *  written (kEc12: half in each pass), ended once the banks are pinned.
   *  Throws what expert_layout, the allocator, check_bank_host_memory and layer_filled throw;
   *  HostMemoryShrunk (kOutOfMemory) as above. */
  ExpertBanks(const std::vector<ExpertBank>& host, HostAllocator& alloc, int n_threads = 0,
              const std::function<void(int64_t layer)>& layer_filled = {}, bool layer_filled_frees_memory = false,
              BankFormat format = BankFormat::kStored, ProgressSink* progress = nullptr,
              const HostMemoryProbe& host_room = {});
  ExpertBanks(const ExpertBanks&) = delete;
  ExpertBanks& operator=(const ExpertBanks&) = delete;

  /** Layers, dense ones included (same indexing as the model's layers). */
  int64_t n_layers() const { return static_cast<int64_t>(layers_.size()); }
  /** Layers with routed experts. */
  int64_t n_moe_layers() const { return n_moe_layers_; }
  /** Experts of `layer` (0 for a dense layer). Throws kInvalidArgument for a layer out of range. */
  int32_t n_expert(int64_t layer) const { return at(layer).n_expert; }
  /** Largest n_expert over layers (the cache's map width). */
  int32_t max_experts() const { return max_experts_; }
  /** The records' form. */
  BankFormat format() const { return format_; }
  /** Largest slot layout over layers: the size of one cache slot. */
  int64_t slot_bytes() const { return slot_bytes_; }
  /** Sum of all records' bytes (host memory). */
  int64_t total_bytes() const { return total_bytes_; }
  /** Slot layout of `layer`: one expert as the cache's slots and the GPU kernels hold it, in the
   *  checkpoint's dtypes (throws kInvalidArgument for a dense layer). */
  const ExpertLayout& layout(int64_t layer) const;
  /** Layout of `layer`'s host records: layout(layer) for kStored; for kEc12, EC12 matrices (their
   *  offsets and the record's bytes). Throws kInvalidArgument for a dense layer. */
  const ExpertLayout& record_layout(int64_t layer) const;
  /** Bytes of one host record of `layer` (what a copy into the cache reads). */
  int64_t record_bytes(int64_t layer) const { return record_layout(layer).bytes; }
  /** Host address of the record of (layer, expert). Throws kInvalidArgument out of range. */
  const uint8_t* record(int64_t layer, int32_t expert) const;
  /** Writes the record of (layer, expert) to `dst` in the slot layout (layout(layer).bytes bytes):
   *  a copy for kStored, a decode for kEc12 (the checkpoint's exact bits; padding zero). Throws
   *  kInvalidArgument out of range. */
  void copy_record(int64_t layer, int32_t expert, uint8_t* dst) const;
  /** Host address of `layer`'s first record (nullptr for a dense layer). */
  const uint8_t* host_base(int64_t layer) const { return at(layer).base; }
  /** Address device kernels read `layer`'s first record at (UVA), nullptr when not pinned for a
   *  device or a dense layer. */
  const void* device_base(int64_t layer) const { return at(layer).device; }
  /** Host views of `layer`'s experts (the input of CpuOps::moe_experts and the CPU executor), with
   *  the host bank's glu, glu_alpha, glu_limit and bias tensors (which stay the caller's: the
   *  records hold the matrices only). */
  const ExpertBank& bank(int64_t layer) const { return at(layer).views; }

  /** A view of this bank's layers in `layers`, the others read as dense: the same records, host and
   *  device addresses and format, no memory of its own (it must not outlive *this); slot_bytes(),
   *  max_experts(), n_moe_layers() and total_bytes() count those layers only. An expert cache of one
   *  slot class (moe/classed_expert_slots.h) is made over it. Throws kInvalidArgument for a layer
   *  out of range or without experts, or no layers. */
  std::unique_ptr<ExpertBanks> view(const std::vector<int64_t>& layers) const;

 private:
  ExpertBanks() = default;
  struct Layer {
    ExpertLayout layout;  // slot layout
    ExpertLayout record;  // host record layout
    std::array<int64_t, 3> ec12_capacity = {0, 0, 0};  // kEc12: exceptions a gate / up / down matrix has room for
    int32_t n_expert = 0;
    Buffer memory;
    uint8_t* base = nullptr;
    void* device = nullptr;
    ExpertBank views;
  };
  const Layer& at(int64_t layer) const;

  std::vector<Layer> layers_;
  BankFormat format_ = BankFormat::kStored;
  int64_t n_moe_layers_ = 0;
  int32_t max_experts_ = 0;
  int64_t slot_bytes_ = 0;
  int64_t total_bytes_ = 0;
};

}  // namespace ft
