// kv_write: scatter the batch's new keys/values into their KV pages (CPU backend).
#include <cstring>

#include "backend/op_checks.h"
#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {
namespace cpu {

void check_batch(const char* op, const BatchInfo& b) {
  op_checks::batch(op, b);  // shapes; the CPU also checks the host-side index values below
  const int64_t T = b.n_tokens, S = b.n_seqs;
  const int32_t* si = b.seq_index.ptr<int32_t>();
  const int32_t* pos = b.positions.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (si[t] < 0 || si[t] >= S || pos[t] < 0)
      fail(ErrorCode::kInvalidArgument, "{}: token {} has sequence {} (of {}) and position {}", op, t, si[t], S,
           pos[t]);
}

void check_state_slots(const char* op, const BatchInfo& b, int64_t n_slots) {
  const int32_t* slots = b.state_slots.ptr<int32_t>();
  for (int32_t s = 0; s < b.n_seqs; ++s)
    if (slots[s] < 0 || slots[s] >= n_slots)
      fail(ErrorCode::kInvalidArgument, "{}: sequence {} has state slot {} (of {})", op, s, slots[s], n_slots);
}

PageSlot page_slot(const char* op, const BatchInfo& b, int64_t n_pages, int64_t page_size, int32_t s, int32_t pos) {
  const int64_t blk = pos / page_size;
  if (blk >= b.max_blocks)
    fail(ErrorCode::kInvalidArgument, "{}: position {} of sequence {} needs block {} but the block table has {}", op,
         pos, s, blk, b.max_blocks);
  const int64_t page = b.block_tables.ptr<int32_t>()[s * static_cast<int64_t>(b.max_blocks) + blk];
  if (page < 0 || page >= n_pages)
    fail(ErrorCode::kInvalidArgument, "{}: block {} of sequence {} holds page {} (pool has {})", op, blk, s, page,
         n_pages);
  return {page, pos % page_size};
}

}  // namespace cpu

void CpuOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  op_checks::kv_write("kv_write", batch, k, v, kv);
  cpu::check_batch("kv_write", batch);
  cpu::check_dtype("kv_write", "k", k, DType::F32);
  cpu::check_dtype("kv_write", "v", v, DType::F32);
  cpu::check_dtype("kv_write", "kv.k", kv.k, DType::F32);
  cpu::check_dtype("kv_write", "kv.v", kv.v, DType::F32);
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1), T = batch.n_tokens;
  const int64_t Wk = kv.k.dim(2) * kv.k.dim(3), Wv = kv.v.dim(2) * kv.v.dim(3);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    const auto ps = cpu::page_slot("kv_write", batch, n_pages, page, si[t], pos[t]);
    const int64_t slot = ps.page * page + ps.slot;
    std::memcpy(kv.k.ptr<float>() + slot * Wk, k.ptr<float>() + t * Wk, static_cast<size_t>(Wk) * 4);
    std::memcpy(kv.v.ptr<float>() + slot * Wv, v.ptr<float>() + t * Wv, static_cast<size_t>(Wv) * 4);
  }
}

}  // namespace ft
