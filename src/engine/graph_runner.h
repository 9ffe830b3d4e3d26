#pragma once
// GraphRunner: the engine's decode steps recorded once and replayed as graphs (Ops::capture; CUDA
// graphs). A pure decode batch of S sequences is padded to the next recorded batch size (1, 2, 4, ...,
// --cuda-graph-max-bs) and runs the graph of the first key-range bound its longest range fits
// (Ops::decode_short_kv_len, then the KV pool's capacity). The graphs read their inputs from one
// device block, uploaded in one copy per step from pinned host memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace ft {

class KvCache;
struct StepItem;  // engine/step_batch.h

/** A step's inputs staged in host memory, I32 (Engine::step builds them; GraphRunner pads them): token
 *  ids, positions and sequence index [T], sequence starts [S + 1], logit rows [R], recurrent-state slots
 *  [S] (models with recurrent layers), block tables and sliding-window block tables [S, mb]. */
struct StepStaging {
  std::vector<int32_t> ids, pos, seq, start, rows, slots, tables, swa_tables;
};

/** Copies item s's sliding-window block table into row s of `out` ([rows, mb]; released entries read
 *  page 0, which no kernel reads below a window; rows past the items are a graph's padding rows, on
 *  `pad_page`, the pool's spare page). */
void stage_swa_tables(const std::vector<StepItem>& items, int64_t rows, int64_t mb, int32_t pad_page,
                      std::vector<int32_t>& out);

class GraphRunner {
 public:
  /** One forward of the model over a batch (Engine::forward): batch, sliding-window batch (nullptr
   *  without that pool), token ids [T], logit rows [R], logits [R, n_vocab]. */
  using Forward = std::function<void(const BatchInfo& batch, const BatchInfo* swa_batch, const Tensor& ids,
                                     const Tensor& rows, const Tensor& logits)>;

  /** Element offsets (I32) of a decode graph's inputs in one block, for batches of up to `bs`
   *  sequences of `mb` pages: ids, positions, sequences, starts (bs + 1), logit rows, the valid count,
   *  the recurrent-state slots [bs], the sliding-window pool's block tables [bs, mb] when `swa`, then the
   *  block tables [bs, mb] last (a smaller batch's tables are a prefix of that region). */
  struct Inputs {
    Inputs() = default;
    Inputs(int64_t bs, int64_t mb, bool swa)
        : ids(0), pos(bs), seq(2 * bs), start(3 * bs), rows(4 * bs + 1), valid(5 * bs + 1), slots(5 * bs + 2),
          swa_tables(6 * bs + 2), tables(6 * bs + 2 + (swa ? bs * mb : 0)), count(tables + bs * mb) {}
    int64_t ids = 0, pos = 0, seq = 0, start = 0, rows = 0, valid = 0, slots = 0, swa_tables = 0, tables = 0,
            count = 0;
  };

  /** One padded decode batch size's and key-range bound's fixed inputs (views of the input block and
   *  the engine's logits) and graph. */
  struct Step {
    int32_t bs = 0;
    BatchInfo batch, swa_batch;  // swa_batch: the sliding-window pool's tables (when the cache has one)
    Tensor ids, rows, logits;
    std::unique_ptr<StepGraph> graph;
    bool failed = false;  // recording failed once: this size and bound run eagerly from now on
  };

  /** The largest padded batch: min(--cuda-graph-max-bs, max_seqs, max_step_tokens, max_logit_rows) on a
   *  backend that records graphs (`graphs`), else 0 (every step eager). */
  static int64_t max_batch(bool graphs, int64_t cuda_graph_max_bs, int64_t max_seqs, int64_t max_step_tokens,
                           int64_t max_logit_rows);

  /** Allocates the input block for batches of up to `max_bs` (> 0) sequences of `max_blocks` pages: I32
   *  [Inputs::count] on the device (Ops::alloc), then its pinned staging (Ops::alloc_host). Throws what
   *  the allocators throw. */
  void reserve_inputs(Ops& ops, int64_t max_bs, int32_t max_blocks, bool swa);
  /** Device bytes of the input block (0 before reserve_inputs). */
  int64_t device_bytes() const { return d_in_buf_.bytes(); }

  /** Plans the graph steps once the KV cache exists: the batch sizes 1, 2, 4, ... up to the reserved
   *  maximum, times the key-range bounds; the padding rows use the pools' spare page and state slot.
   *  `logits` is the engine's device logits [>= max_bs, n_vocab]; `forward` runs one step. */
  void plan(Ops& ops, const KvCache& kv, int32_t page_size, const Tensor& logits, Forward forward);

  /** The graph step for a pure decode batch (every item one token, one logit row), or nullptr (eager:
   *  graphs off, another kind of step, more sequences than recorded, a range past the pool, or a
   *  recording that failed). */
  Step* step_for(const std::vector<StepItem>& items);
  /** Pads `h` (the staged inputs of `items`) to gs.bs rows, uploads them and replays the graph (the
   *  first time: runs the step eagerly, then records it; a failed recording is logged and the size
   *  runs eagerly from then on). */
  void run(Step& gs, const std::vector<StepItem>& items, StepStaging& h);
  /** The step's upload finished (the engine waited for the stream): the staging may be written. */
  void upload_done() { in_busy_ = false; }
  /** Forgets the recorded graphs (the next step of each size records again). The caller synchronizes
   *  first: a replay may still be running. */
  void drop();

  /** Padded decode batch sizes replayed as graphs, ascending (empty: graphs off). */
  const std::vector<int32_t>& batch_sizes() const { return sizes_; }
  /** Decode steps replayed from a graph so far (recording steps excluded). */
  int64_t replays() const { return replays_; }

 private:
  Ops* ops_ = nullptr;
  const KvCache* kv_ = nullptr;
  Forward forward_;
  int32_t max_blocks_ = 0;
  int64_t max_bs_ = 0;
  Inputs in_;
  Buffer d_in_buf_;    // the device block
  Tensor d_in_;        // I32 [in_.count] over d_in_buf_
  Buffer h_in_;        // its host staging (Ops::alloc_host)
  bool in_busy_ = false;  // an upload from h_in_ may still be in flight
  std::vector<int32_t> sizes_;
  /** Key-range bounds of the recorded graphs, ascending (Ops::decode_short_kv_len, then the pool's
   *  capacity): a step takes the graph of the first bound its longest range fits. */
  std::vector<int32_t> kv_lens_;
  std::vector<std::unique_ptr<Step>> steps_;  // [size][kv-len bound], row-major
  int32_t pad_page_ = -1;                     // spare KV page of the padding rows
  int32_t swa_pad_page_ = -1;                 // the sliding-window pool's spare page
  int32_t pad_state_slot_ = -1;               // the spare recurrent-state slot
  int64_t replays_ = 0;
};

}  // namespace ft
