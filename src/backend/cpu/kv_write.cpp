// kv_write: scatter the batch's new keys/values into their KV pages (CPU backend).
#include <cstring>
#include <tuple>

#include "backend/op_checks.h"
#include "backend/cpu/cpu_ops.h"
#include "quant/kv_quant.h"
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

void check_kv_page_tensor(const char* op, const char* name, const Tensor& pages, const Tensor& scales) {
  check_cpu(op, name, pages);
  if (scales.empty()) {
    check_dtype(op, name, pages, DType::F32);
    return;
  }
  const DType kd = kv_dtype_of_codes(pages.dtype);
  if (!kv_is_quantized(kd))
    fail(ErrorCode::kInvalidArgument, "{}: {} has scales but is {} (quantized KV pages are F8_E4M3 or I8)", op, name,
         dtype_name(pages.dtype));
  check_cpu(op, "kv scales", scales);
  check_dtype(op, "kv scales", scales, kv_scale_dtype(kd));
  if (pages.ndim != 4 || scales.ndim != 4 || scales.dim(0) != pages.dim(0) || scales.dim(1) != pages.dim(1) ||
      scales.dim(2) != pages.dim(2) || scales.dim(3) != kv_scales_per_head(kd, pages.dim(3)))
    fail(ErrorCode::kInvalidArgument, "{}: scales {} do not fit {} pages {}", op, scales.str(), name, pages.str());
}

void check_kv_pages(const char* op, const KvLayer& kv) {
  check_kv_page_tensor(op, "kv.k", kv.k, kv.k_scale);
  check_kv_page_tensor(op, "kv.v", kv.v, kv.v_scale);
  if (kv.k.dtype != kv.v.dtype)
    fail(ErrorCode::kInvalidArgument, "{}: kv.k is {} but kv.v is {}", op, dtype_name(kv.k.dtype), dtype_name(kv.v.dtype));
}

}  // namespace cpu

void CpuOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  op_checks::kv_write("kv_write", batch, k, v, kv);
  cpu::check_batch("kv_write", batch);
  cpu::check_dtype("kv_write", "k", k, DType::F32);
  cpu::check_dtype("kv_write", "v", v, DType::F32);
  cpu::check_kv_pages("kv_write", kv);
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1), T = batch.n_tokens;
  const int64_t Wk = kv.k.dim(2) * kv.k.dim(3), Wv = kv.v.dim(2) * kv.v.dim(3);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    const auto ps = cpu::page_slot("kv_write", batch, n_pages, page, si[t], pos[t]);
    const int64_t slot = ps.page * page + ps.slot;
    if (!kv.quantized()) {
      std::memcpy(kv.k.ptr<float>() + slot * Wk, k.ptr<float>() + t * Wk, static_cast<size_t>(Wk) * 4);
      std::memcpy(kv.v.ptr<float>() + slot * Wv, v.ptr<float>() + t * Wv, static_cast<size_t>(Wv) * 4);
      continue;
    }
    // Quantized pages: each head row of the token to its codes and scales.
    for (const auto& [src, pages, scales] : {std::tuple<const Tensor*, const Tensor*, const Tensor*>{&k, &kv.k, &kv.k_scale},
                                             {&v, &kv.v, &kv.v_scale}}) {
      const DType kd = kv_dtype_of_codes(pages->dtype);
      const int64_t heads = pages->dim(2), dim = pages->dim(3);
      const int64_t scale_bytes = scales->dim(3) * dtype_bytes(scales->dtype, 1);
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t row = slot * heads + h;
        kv_quantize_head(kd, src->ptr<float>() + t * heads * dim + h * dim, dim,
                         static_cast<uint8_t*>(pages->data) + row * dim,
                         static_cast<uint8_t*>(scales->data) + row * scale_bytes);
      }
    }
  }
}

}  // namespace ft
