#include "engine/graph_runner.h"

#include <algorithm>

#include "engine/engine.h"
#include "kv/kv_cache.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

void stage_swa_tables(const std::vector<StepItem>& items, int64_t rows, int64_t mb, int32_t pad_page,
                      std::vector<int32_t>& out) {
  out.assign(static_cast<size_t>(rows * mb), 0);
  for (int64_t s = 0; s < rows; ++s) {
    int32_t* row = out.data() + s * mb;
    if (s >= static_cast<int64_t>(items.size())) {
      row[0] = pad_page;  // a graph's padding row
      continue;
    }
    const std::vector<int32_t>& pages = *items[static_cast<size_t>(s)].swa_pages;
    for (size_t j = 0; j < pages.size(); ++j) row[j] = std::max(pages[j], 0);
  }
}

int64_t GraphRunner::max_batch(bool graphs, int64_t cuda_graph_max_bs, int64_t max_seqs, int64_t max_step_tokens,
                               int64_t max_logit_rows) {
  return graphs ? std::min<int64_t>({cuda_graph_max_bs, max_seqs, max_step_tokens, max_logit_rows}) : 0;
}

void GraphRunner::reserve_inputs(Ops& ops, int64_t max_bs, int32_t max_blocks, bool swa) {
  ops_ = &ops;
  max_bs_ = max_bs;
  max_blocks_ = max_blocks;
  in_ = Inputs(max_bs, max_blocks, swa);
  d_in_buf_ = ops.alloc(in_.count * 4);
  d_in_ = Tensor(d_in_buf_.data(), DType::I32, {in_.count}, ops.device());
  h_in_ = ops.alloc_host(in_.count * 4);
}

void GraphRunner::plan(Ops& ops, const KvCache& kv, int32_t page_size, const Tensor& logits, Forward forward) {
  ops_ = &ops;
  kv_ = &kv;
  forward_ = std::move(forward);
  pad_page_ = kv.pool().n_pages();  // the spare page
  if (kv.swa_pool()) swa_pad_page_ = kv.swa_pool()->n_pages();
  if (kv.state_pool()) pad_state_slot_ = kv.state_pool()->n_pages();
  for (int64_t b = 1; b < max_bs_; b *= 2) sizes_.push_back(static_cast<int32_t>(b));
  sizes_.push_back(static_cast<int32_t>(max_bs_));
  // One graph per size and key-range bound: the backend's short-range form, then the whole capacity.
  const int32_t capacity = max_blocks_ * page_size, short_len = ops.decode_short_kv_len();
  if (short_len > 0 && short_len < capacity) kv_lens_.push_back(short_len);
  kv_lens_.push_back(capacity);
  for (int32_t b : sizes_) {
    for (int32_t kv_len : kv_lens_) {
      auto gs = std::make_unique<Step>();
      gs->bs = b;
      BatchInfo& bi = gs->batch;
      bi.n_tokens = bi.n_seqs = b;
      bi.max_blocks = max_blocks_;
      bi.max_kv_len = kv_len;  // the bound, not the step's: launch shapes never change
      auto in = [&](int64_t off, std::initializer_list<int64_t> shape) {
        return Tensor(d_in_.ptr<int32_t>() + off, DType::I32, shape, d_in_.device);
      };
      bi.positions = in(in_.pos, {b});
      bi.seq_index = in(in_.seq, {b});
      bi.seq_start = in(in_.start, {b + 1});
      bi.block_tables = in(in_.tables, {b, max_blocks_});
      bi.n_valid = in(in_.valid, {1});
      if (kv.state_pool()) bi.state_slots = in(in_.slots, {b});
      gs->swa_batch = bi;
      gs->swa_batch.block_tables = in(in_.swa_tables, {b, max_blocks_});
      gs->ids = in(in_.ids, {b});
      gs->rows = in(in_.rows, {b});
      gs->logits = logits.slice(0, b);
      steps_.push_back(std::move(gs));
    }
  }
}

GraphRunner::Step* GraphRunner::step_for(const std::vector<StepItem>& items) {
  if (sizes_.empty()) return nullptr;
  for (const StepItem& it : items)
    if (it.n != 1 || it.n_logits != 1) return nullptr;
  const auto S = static_cast<int32_t>(items.size());
  const auto at = std::lower_bound(sizes_.begin(), sizes_.end(), S);
  if (at == sizes_.end()) return nullptr;
  int64_t kv_len = 0;  // the step's longest key range
  for (const StepItem& it : items) kv_len = std::max(kv_len, it.start + 1);
  const auto len = std::lower_bound(kv_lens_.begin(), kv_lens_.end(), kv_len);
  if (len == kv_lens_.end()) return nullptr;  // past the pool (the step's checks refused it already)
  const size_t i = static_cast<size_t>(at - sizes_.begin()) * kv_lens_.size() +
                   static_cast<size_t>(len - kv_lens_.begin());
  Step* gs = steps_[i].get();
  return gs->failed ? nullptr : gs;
}

void GraphRunner::run(Step& gs, const std::vector<StepItem>& items, StepStaging& h) {
  const int32_t b = gs.bs;
  const auto S = static_cast<int32_t>(items.size());
  for (int32_t s = S; s < b; ++s) {  // padding rows: token 0 at position 0 of the spare page
    h.ids.push_back(0);
    h.pos.push_back(0);
    h.seq.push_back(s);
    h.rows.push_back(s);
    h.start.push_back(s + 1);
    if (kv_->state_pool()) h.slots.push_back(pad_state_slot_);
  }
  h.tables.assign(static_cast<size_t>(b) * max_blocks_, 0);
  for (int32_t s = 0; s < b; ++s) {
    int32_t* row = h.tables.data() + static_cast<int64_t>(s) * max_blocks_;
    if (s < S) {
      const std::vector<int32_t>& pages = *items[static_cast<size_t>(s)].pages;
      std::copy(pages.begin(), pages.end(), row);
    } else {
      row[0] = pad_page_;
    }
  }
  // Staged in pinned memory at the graph's offsets, then one copy up to the end of the used tables.
  // The copy of the step before has completed when that step waited for its logits, copied after it;
  // one that threw before then may still be reading the block.
  if (in_busy_) ops_->synchronize();
  in_busy_ = true;
  auto* in = static_cast<int32_t*>(h_in_.data());
  auto put = [&](const std::vector<int32_t>& v, int64_t off) { std::copy(v.begin(), v.end(), in + off); };
  put(h.ids, in_.ids);
  put(h.pos, in_.pos);
  put(h.seq, in_.seq);
  put(h.start, in_.start);
  put(h.rows, in_.rows);
  in[in_.valid] = S;
  put(h.slots, in_.slots);
  put(h.tables, in_.tables);
  if (kv_->swa_pool()) {
    stage_swa_tables(items, b, max_blocks_, swa_pad_page_, h.swa_tables);
    put(h.swa_tables, in_.swa_tables);
  }
  const int64_t used = in_.tables + static_cast<int64_t>(h.tables.size());
  ops_->copy(Tensor(in, DType::I32, {used}), Tensor(d_in_.ptr<int32_t>(), DType::I32, {used}, d_in_.device));
  if (gs.graph && gs.graph->valid()) {
    gs.graph->launch();
    ++replays_;
    return;
  }
  gs.graph.reset();
  // Eager first: this step's result, and every one-time scratch region sized before recording.
  const bool swa = kv_->swa_pool() != nullptr;
  forward_(gs.batch, swa ? &gs.swa_batch : nullptr, gs.ids, gs.rows, gs.logits);
  try {
    Step* g = &gs;
    gs.graph = ops_->capture([this, g, swa] { forward_(g->batch, swa ? &g->swa_batch : nullptr, g->ids, g->rows, g->logits); });
  } catch (const Error& e) {  // this step's result came from the eager run; later ones stay eager
    spdlog::warn("engine: decode batch size {} with key ranges up to {} runs eagerly (graph recording failed: {})", b,
                 gs.batch.max_kv_len, e.what());
    gs.failed = true;
  }
}

void GraphRunner::drop() {
  for (auto& gs : steps_) gs->graph.reset();
}

}  // namespace ft
