#pragma once
// Host-side argument checks of the CUDA backend's op entries. Each throws ft::Error naming the op
// and the argument: kInvalidArgument for a wrong shape or device, kUnsupported for a dtype the
// CUDA kernels do not handle.
#include <initializer_list>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace ft::cuda {

/** `t` is non-empty and on the CUDA device. */
void check_dev(const char* op, const char* arg, const Tensor& t);
/** check_dev, and dtype is one of `allowed`. */
void check_dtype(const char* op, const char* arg, const Tensor& t, std::initializer_list<DType> allowed);
/** F32 or BF16 (an activation tensor) on the device. */
void check_act(const char* op, const char* arg, const Tensor& t);
/** Same ndim and dims as `ref`. */
void check_same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& ref);
/** Same dtype as `ref`. */
void check_same_dtype(const char* op, const char* arg, const Tensor& t, const Tensor& ref);
/** 0 = F32, 1 = F16, 2 = BF16 (the codes the kernels' load_any takes); throws kUnsupported otherwise. */
int float_code(const char* op, const char* arg, DType t);
/** The BatchInfo index tensors: I32 on the device with the shapes its integers announce. */
void check_batch(const char* op, const BatchInfo& b);
/** KV pages on the device: kv.k, kv.v F32 or BF16 (one dtype) without scales (returns 0, kKvFloat of
 *  attention_args.h), or quantized (--kv-cache-dtype fp8 / q8_0; quant/kv_quant.h): F8_E4M3 or I8 codes
 *  (one dtype) with k_scale / v_scale of the scale dtype, [pages, page_size, heads, scales a head]
 *  (returns 1 = kKvFp8 or 2 = kKvQ8). kUnsupported for other dtypes, kInvalidArgument for scales that do
 *  not fit their pages. */
int check_kv_pages(const char* op, const KvLayer& kv);
/** The same for one page tensor `name` and its scales `scale_name` (empty for F32 / BF16 pages), for
 *  the ops that read or write only kv.k or only kv.v (compress_kv, attention_compressed): returns 0
 *  (kKvFloat), 1 (kKvFp8) or 2 (kKvQ8). */
int check_kv_page_tensor(const char* op, const char* name, const char* scale_name, const Tensor& pages,
                         const Tensor& scales);
/** A KV write's arguments (kv_write, qk_norm_rope_store): k, v activations of one dtype; kv pages as
 *  check_kv_pages (quantized pages only where the caller quantizes: kv_write); then op_checks::kv_write (batch; pages 4-D [pages, page_size, heads, dim]
 *  of one count and size, k [T, Wk] and v [T, Wv] with their widths, which may differ: MLA's latent and
 *  RoPE-key pages). Callers that need equal shapes (qk_norm_rope_store) check that themselves. */
void check_kv_write(const char* op, const BatchInfo& batch, const Tensor& k, const Tensor& v, const KvLayer& kv);

}  // namespace ft::cuda
