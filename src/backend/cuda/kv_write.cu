// kv_write: stores the batch's new keys/values into their pages. Token t (sequence s =
// seq_index[t], position p = positions[t]) goes to page block_tables[s, p / page_size], slot
// p % page_size. k, v [T, n_head_kv * head_dim] F32 or BF16; kv pages [n_pages, page_size,
// n_head_kv, head_dim] F32 or BF16 (converted on the way). Entries whose sequence, block or page is
// out of range are skipped (the CPU backend throws; validate block tables on the host).
// Bytes moved: 2 * T * W * (src + dst element size) + index reads.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

__global__ void kv_write_kernel(const void* k, const void* v, int src_code, void* kc, void* vc, bool dst_f32,
                                int64_t T, int64_t W, int64_t page_size, int64_t n_pages, const int32_t* pos,
                                const int32_t* seq, int64_t n_seqs, const int32_t* bt, int max_blocks) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < T * W;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / W, w = i % W;
    const int64_t p = pos[t], blk = p / page_size;
    if (p < 0 || blk >= max_blocks || seq[t] < 0 || seq[t] >= n_seqs) continue;
    const int64_t page = bt[static_cast<int64_t>(seq[t]) * max_blocks + blk];
    if (page < 0 || page >= n_pages) continue;
    const int64_t dst = (page * page_size + p % page_size) * W + w;
    const float kv = load_any(k, src_code, i), vv = load_any(v, src_code, i);
    if (dst_f32) {
      static_cast<float*>(kc)[dst] = kv;
      static_cast<float*>(vc)[dst] = vv;
    } else {
      static_cast<bf16*>(kc)[dst] = __float2bfloat16_rn(kv);
      static_cast<bf16*>(vc)[dst] = __float2bfloat16_rn(vv);
    }
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  forget_prepared();
  cuda::check_kv_write("kv_write", batch, k, v, kv);
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1), W = kv.k.dim(2) * kv.k.dim(3), T = batch.n_tokens;
  if (k.rows() != T || k.cols() != W)
    fail(ErrorCode::kInvalidArgument, "kv_write: k {} must be [{}, {}] (tokens, kv heads x head_dim)", k.str(), T, W);
  if (T * W == 0) return;
  cuda::kv_write_kernel<<<cuda::grid_1d(T * W, 256), 256, 0, stream_>>>(
      k.data, v.data, cuda::float_code("kv_write", "k", k.dtype), kv.k.data, kv.v.data, kv.k.dtype == DType::F32, T, W,
      page, n_pages, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(), batch.n_seqs, batch.block_tables.ptr<int32_t>(),
      batch.max_blocks);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
