#pragma once
// Scheduler: continuous batching policy as plain bookkeeping (no model, no threads, no HTTP).
//
// Every step the engine asks schedule() for a plan: which sequences run and how many of their tokens
// (a prefill chunk or one decode token). Requests join and leave between any two steps:
//  1. every running sequence with one token left to compute (decoding) gets it;
//  2. running sequences still prefilling, then waiting ones in FIFO order, get prefill chunks while
//     the step's prefill budget (max_prefill_tokens) lasts, so a long prompt is split over several
//     steps and never stalls the decodes of the others;
//  3. at most max_running sequences hold KV at once; the rest wait (a full queue refuses new ones).
// A waiting sequence first looks up the prefix cache: whole pages of its prompt that another sequence
// computed are shared (only the rest is prefilled). Pages a sequence fills are offered to the cache
// after each step. When the pool runs short, unreferenced cached pages are evicted (LRU); if that is
// not enough, the youngest running sequence is preempted (its pages are returned and it waits again at
// the front of the queue, to be recomputed, mostly from the prefix cache).
//
// Page ownership: a sequence's block table is `pages`; the first `nodes.size()` entries are prefix-cache
// nodes it references, the rest are private pages it took from the pool. check_integrity() verifies that
// pool, cache and sequences account for every page exactly once.
//
// Sliding-window layers (KvPools::swa): a sequence also holds `swa_pages`, indexed like `pages`; after
// each step the entries below the window of its next position are released (-1), so its
// sliding-window KV stays near window + one chunk however long it grows. An entry j < nodes.size()
// that is not -1 is the node's swa page, on which the sequence holds a swa reference; the cache keeps
// released swa pages of its nodes until the swa pool needs them. A prefix hit is shortened to the
// longest one whose window's swa pages are all still cached.
//
// Recurrent layers (KvPools::states): a running sequence also holds one state slot, taken at
// admission and returned with its pages (finish, cancel, preemption). The state is what the whole
// prefix left behind, which pages do not hold, so the prefix cache keeps snapshots of it in slots of
// the same pool: a prefill chunk is cut to end at the last page boundary before the sequence's last
// known token, and after that step the slot is copied into a snapshot the boundary's node keeps
// (StepPlan::state_saves). A hit is shortened to its deepest node with a snapshot, which is copied
// into the sequence's slot before its first step (StepPlan::state_restores). When the pool runs
// short, snapshots of nodes nobody uses are dropped, least recently used first.
//
// Lower tiers (LowerTiers, kv/page_store.h; issue 39): with a host tier, a node the prefix cache
// evicts is copied there first (PrefixCache's eviction hook); with a disk tier, every node a sequence
// adds is written there in the background (after its step, the state snapshot included). Admission
// continues a prefix hit past the device's nodes page by page through the tiers (host first): each
// page found takes a device page (its swa page and snapshot slot where it has them), gets its KV
// copied back and is inserted as a node, so it counts as cached tokens like a device hit. Copies are
// synchronous on the engine thread between steps (the CPU backend's pages are host memory). So that the
// disk tier's files are not read there, submit() asks the disk tier to read ahead (PageStore::prefetch)
// the pages of the new sequence's prompt past the device's nodes that the host tier does not hold and
// the disk tier does: by its admission they are mostly in memory.
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "kv/page_pool.h"
#include "kv/prefix_cache.h"

namespace ft {

struct SchedulerConfig {
  int32_t max_running = 16;          // --max-running-requests
  int32_t max_prefill_tokens = 512;  // --max-prefill-tokens: prefill tokens per step (>= 1)
  int32_t max_waiting = 1024;        // requests queued beyond max_running; more are refused (HTTP 503)
  int64_t max_seq_len = 4096;        // model context limit (prompt + generated tokens)
  bool prefix_cache = true;          // share whole pages of equal prompt prefixes
  /** Tokens one step may hold, decodes included (0: no limit beyond max_prefill_tokens + max_running):
   *  the prefill budget of a step is what its decodes leave of it. */
  int64_t max_step_tokens = 0;
  /** Logit rows one step may return (0: no limit): one a sequence, one a token for a chunk that keeps
   *  its prompt's logits (logit_rows()). Must be >= max_running when set. */
  int64_t max_logit_rows = 0;
  /** Admit a sequence only when the full pool's pages for its prompt + max_new_tokens are free, and take
   *  them then (sliding-window pages still follow the window): a running sequence never runs short, so
   *  none is preempted (engine/generate.h). Off: pages are taken as the sequence grows. */
  bool reserve_at_admission = false;
  /** Decodes wait while a running sequence is still prefilling or a waiting one could be admitted, so a
   *  batch's prompts are all computed before its first decode step and each decode step holds the
   *  whole batch (ft bench times the two phases apart). Decodes still run when nothing else can. */
  bool prefill_before_decode = false;

  /** Throws ft::Error(kInvalidArgument) naming the field for a value out of range. */
  void validate() const;
};

enum class SeqState : uint8_t { kWaiting, kRunning, kFinished };

/** One request's tokens and KV bookkeeping. */
struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;   // prompt, then generated tokens
  int32_t n_prompt = 0;
  int32_t max_new_tokens = 0;    // generation budget (the caller stops at it; used for admission checks)
  int32_t n_computed = 0;        // tokens whose KV is in the pages (positions [0, n_computed))
  int32_t n_cached = 0;          // prompt tokens taken from the prefix cache at first admission (-1: not yet)
  bool admitted_once = false;
  int32_t n_preempted = 0;
  uint64_t after = 0;            // admitted only once this sequence's prompt is computed (0: none)
  bool prompt_logits = false;    // its prefill chunks return a logit row a token (logit_rows())
  SeqState state = SeqState::kWaiting;
  std::vector<int32_t> pages;                 // block table: page of positions [j*page, (j+1)*page)
  std::vector<PrefixCache::NodeId> nodes;     // cache nodes backing pages[0, nodes.size())
  std::vector<int32_t> swa_pages;             // sliding-window pages, indexed like pages (-1: released)
  int32_t n_swa_released = 0;                 // swa_pages[0, n_swa_released) are -1
  int32_t state_slot = -1;                    // recurrent-state slot while running (KvPools::states)
  int32_t restore_from = -1;                  // snapshot to copy into state_slot before the next step
  int32_t snapshot_slot = -1;                 // snapshot being saved by the planned step (see complete)

  int32_t n_generated() const { return static_cast<int32_t>(tokens.size()) - n_prompt; }
};

/** One sequence's share of a step: compute tokens [start, start + n_tokens) at those positions. */
struct ScheduledSeq {
  Sequence* seq = nullptr;
  int32_t start = 0;
  int32_t n_tokens = 0;
  bool sample = false;  // the chunk ends at the last known token: the step yields its next token
};

/** Logit rows a planned chunk returns: one a token when its sequence keeps its prompt's logits and the
 *  chunk starts in the prompt, else one (its last token's). */
inline int32_t logit_rows(const ScheduledSeq& e) {
  return e.seq->prompt_logits && e.start < e.seq->n_prompt ? e.n_tokens : 1;
}

struct StepPlan {
  std::vector<ScheduledSeq> seqs;  // decodes first, then prefill chunks
  int32_t n_tokens = 0;
  int32_t n_prefill_tokens = 0;
  int32_t n_decode = 0;
  std::vector<uint64_t> preempted;  // sequences moved back to the queue while planning
  /** Recurrent-state copies the step needs before its forward (a hit's snapshot into the sequence's
   *  slot) and after it (a slot saved as a snapshot for the prefix cache). */
  std::vector<StateCopy> state_restores, state_saves;
  bool empty() const { return seqs.empty(); }
};

class Scheduler {
 public:
  /** `pools` (the KV pages, or one PagePool; must outlive the scheduler). Throws ft::Error for a bad
   *  config. */
  Scheduler(const SchedulerConfig& config, KvPools pools, LowerTiers tiers = {});
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /** Positions one sequence may use: min(max_seq_len, every page of the pool). */
  int64_t context_limit() const;

  /** Queues a sequence (prompt ids, generation budget). Throws ft::Error: kInvalidArgument for an empty
   *  prompt or a duplicate id, kContextLength when prompt + max_new_tokens > context_limit() (naming the
   *  numbers), kOverloaded when max_waiting sequences already wait.
   *  `after` (0: none) names an earlier sequence with the same prompt (the choices of one request, OpenAI's
   *  `n`): with the prefix cache on, this one is admitted only once that one's prompt is computed (or it
   *  ended), so it takes the prompt's whole pages from the cache and computes only the partial last page.
   *  Admission stays FIFO: a sequence that waits for its leader holds back those queued behind it.
   *  `prompt_logits`: its prefill chunks return every token's logits (logit_rows()), so they are cut to
   *  the step's max_logit_rows. */
  void submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new_tokens, uint64_t after = 0,
              bool prompt_logits = false);

  /** Plans the next step (see the header comment). Sequences in the plan stay valid until the next call
   *  to submit/schedule/finish/cancel. An empty plan means nothing can run. */
  StepPlan schedule();

  /** Records that the plan ran: advances n_computed of every planned sequence and offers the pages it
   *  filled to the prefix cache. Call before append(). */
  void complete(const StepPlan& plan);

  /** Appends a generated token to a running sequence (its KV is computed by the next step). */
  void append(uint64_t id, int32_t token);

  /** Ends a sequence (finished or cancelled, waiting or running): its pages go back to the pool or the
   *  prefix cache at once. Returns false for an unknown id. */
  bool finish(uint64_t id);

  /** Moves every running sequence back to the waiting queue's front, oldest first (its pages and
   *  state slot are released; it recomputes its KV when it runs again, so nothing is dropped) and
   *  empties the prefix cache (every node evicted, through the lower tiers' hook), so that no page or
   *  state slot of the pools is held: what set_pools needs. Returns the ids moved, oldest first. */
  std::vector<uint64_t> release_all_kv();
  /** Uses `pools` from now on (the old ones may be gone), with a new, empty prefix cache over them.
   *  Throws ft::Error(kInternal), changing nothing, while a sequence or the prefix cache holds a page
   *  (release_all_kv first), and as the constructor does for pools this config cannot use. */
  void set_pools(KvPools pools);

  const Sequence* find(uint64_t id) const;
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  bool idle() const { return running_.empty() && waiting_.empty(); }

  /** Pages held by sequences (private pages plus cache pages they reference). */
  int32_t pages_in_use() const;
  /** Pages held by the prefix cache and referenced by no sequence. */
  int32_t pages_cached_idle() const { return cache_->n_unreferenced(); }
  /** Pages in the prefix cache (referenced or not). */
  int32_t pages_cached() const { return cache_->n_pages(); }
  /** Recurrent-state slots held by sequences, theirs and the snapshots their steps are saving (0
   *  without recurrent layers). */
  int32_t state_slots_in_use() const;
  /** Recurrent-state snapshots the prefix cache holds. */
  int32_t state_snapshots() const { return cache_->n_states(); }
  /** Sliding-window pages held by sequences (private ones plus cached ones in their windows); 0
   *  without a sliding-window pool. */
  int32_t swa_pages_in_use() const;
  const PagePool& pool() const { return *pool_; }
  const KvPools& pools() const { return pools_; }
  const SchedulerConfig& config() const { return config_; }

  /** Pages of prefix hits taken from the device's prefix cache, the host tier and the disk tier, since start. */
  struct TierHits {
    int64_t device = 0, host = 0, disk = 0;
  };
  TierHits tier_hits() const { return hits_; }
  const LowerTiers& tiers() const { return tiers_; }

  /** Verifies the prefix cache and that pool, cache and sequences hold every page exactly once, with
   *  block tables covering each running sequence's computed tokens. Throws ft::Error(kInternal). */
  void check_integrity() const;

 private:
  bool alloc_pages(int32_t n, std::vector<int32_t>& out);
  bool alloc_swa_pages(int32_t n, std::vector<int32_t>& out);
  bool reserve(Sequence& s, int64_t n_positions);
  void release_pages(Sequence& s);
  void cache_full_pages(Sequence& s);
  void release_swa_below_window(Sequence& s);
  void shorten_to_cached_window(Sequence& s, std::vector<int32_t> node_swa_pages);
  /** Extends s's prefix hit (nodes up to n_computed) page by page from the lower tiers while whole
   *  pages of tokens[0, max_tokens) are found there and device pages can be had; `swa_pages` (each
   *  node's swa page) grows with it. */
  void extend_from_tiers(Sequence& s, std::vector<int32_t>& swa_pages, int64_t max_tokens);
  /** Asks the disk tier to read ahead the pages extend_from_tiers() would take from it for s if it
   *  were admitted now (index lookups only: cheap). */
  void read_ahead(const Sequence& s);
  /** Writes the nodes s added to the cache (s.nodes[from, ..)) to the disk tier. */
  void write_through(const Sequence& s, size_t from);
  int32_t positions_available(const Sequence& s) const;
  void check_swa_integrity() const;
  void preempt(Sequence& s, StepPlan& plan);
  /** Admits the queue's front with a first chunk within `budget` tokens and `rows` logit rows (both
   *  reduced by what it takes); false when it does not fit. */
  bool admit(Sequence& s, int32_t& budget, int64_t& rows, StepPlan& plan);
  /** Whether s's leader (Sequence::after) has computed its prompt or is gone. */
  bool leader_ready(const Sequence& s) const;
  /** Recurrent layers: a chunk of `s` cut to end at its snapshot boundary when it would cross it. */
  int32_t cut_at_snapshot(const Sequence& s, int32_t chunk) const;
  /** Position after which `s`'s state is snapshotted: the last page boundary before its last known
   *  token (0: none). */
  int32_t snapshot_boundary(const Sequence& s) const;
  /** Keeps the deepest node of a hit with a state snapshot (releases the rest) and marks its
   *  snapshot for restoring. */
  void shorten_to_state_snapshot(Sequence& s);
  /** A free state slot, dropping an unused snapshot when none is free; -1 when all are in use. */
  int32_t take_state_slot();
  /** Records the plan's state copies (restores of admitted hits, snapshots of chunks ending at their
   *  boundary). */
  StepPlan& finish_plan(StepPlan& plan);

  SchedulerConfig config_;
  KvPools pools_;
  PagePool* pool_;
  PagePool* swa_pool_;  // nullptr: no sliding-window layers
  std::unique_ptr<PrefixCache> cache_;  // replaced with the pools (set_pools)
  LowerTiers tiers_;
  TierHits hits_;
  std::unordered_map<uint64_t, std::unique_ptr<Sequence>> seqs_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order (oldest first)
};

}  // namespace ft
