#pragma once
// KvRows: read access to one KV page tensor's head rows for the CPU attention kernels (and the
// compressor's columns of the value pages). F32 pages are read in place; quantized pages
// (--kv-cache-dtype fp8 / q8_0, quant/kv_quant.h) are dequantized a head row at a time into the
// caller's fp32 buffer.
#include <cstdint>

#include "quant/kv_quant.h"
#include "tensor/tensor.h"

namespace ft::cpu {

class KvRows {
 public:
  /** Pages [n_pages, page_size, heads, dim] (F32, or codes F8_E4M3 / I8) and their scales (empty for
   *  F32). The caller checked them (check_kv_pages). */
  KvRows(const Tensor& pages, const Tensor& scales)
      : data_(static_cast<const uint8_t*>(pages.data)),
        scales_(static_cast<const uint8_t*>(scales.data)),
        kv_dtype_(kv_dtype_of_codes(pages.dtype)),
        heads_(pages.dim(2)),
        dim_(pages.dim(3)),
        scale_stride_(scales.empty() ? 0 : scales.dim(3) * dtype_bytes(scales.dtype, 1)) {}

  /** Head `h` (dim values) of page slot `slot` (page * page_size + position within the page): a
   *  pointer into F32 pages, else `buf` (dim floats) filled with the dequantized row. */
  const float* head(int64_t slot, int64_t h, float* buf) const {
    const int64_t row = slot * heads_ + h;
    if (!scales_) return reinterpret_cast<const float*>(data_) + row * dim_;
    kv_dequantize_head(kv_dtype_, data_ + row * dim_, scales_ + row * scale_stride_, dim_, buf);
    return buf;
  }
  /** Columns [c0, c0 + n) of slot `slot`'s row (its heads side by side, as kv_write stores a token's
   *  [heads * dim] values): a pointer into F32 pages, else into `buf` (at least n + 2 dim floats), where
   *  the heads the columns lie in are dequantized whole. */
  const float* cols(int64_t slot, int64_t c0, int64_t n, float* buf) const {
    if (!scales_) return reinterpret_cast<const float*>(data_) + slot * heads_ * dim_ + c0;
    const int64_t h0 = c0 / dim_, h1 = (c0 + n + dim_ - 1) / dim_;
    for (int64_t h = h0; h < h1; ++h) head(slot, h, buf + (h - h0) * dim_);
    return buf + (c0 - h0 * dim_);
  }
  int64_t dim() const { return dim_; }
  int64_t heads() const { return heads_; }

 private:
  const uint8_t* data_;
  const uint8_t* scales_;
  DType kv_dtype_;
  int64_t heads_, dim_, scale_stride_;
};

}  // namespace ft::cpu
