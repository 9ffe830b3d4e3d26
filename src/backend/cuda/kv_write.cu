// kv_write: stores the batch's new keys/values into their pages. Token t (sequence s =
// seq_index[t], position p = positions[t]) goes to page block_tables[s, p / page_size], slot
// p % page_size. k [T, Wk] and v [T, Wv] F32 or BF16 (one dtype); kv.k [n_pages, page_size, heads_k,
// dim_k] and kv.v [n_pages, page_size, heads_v, dim_v] F32 or BF16 (one dtype; converted on the way),
// Wk = heads_k * dim_k and Wv = heads_v * dim_v: equal for GQA, different for MLA (the latent c in kv.k,
// the RoPE key in kv.v). Entries whose sequence, block or page is out of range are skipped (the CPU
// backend throws; validate block tables on the host). Throws kInvalidArgument for shapes
// (op_checks::kv_write), kUnsupported for other dtypes.
// Bytes moved: T * (Wk + Wv) * (src + dst element size) + index reads.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

/** Element i of the flat [T * (Wk + Wv)] index space: k's T * Wk elements first, then v's. */
__global__ void kv_write_kernel(const void* k, const void* v, int src_code, void* kc, void* vc, bool dst_f32,
                                int64_t T, int64_t Wk, int64_t Wv, int64_t page_size, int64_t n_pages,
                                const int32_t* pos, const int32_t* seq, int64_t n_seqs, const int32_t* bt,
                                int max_blocks) {
  const int64_t nk = T * Wk, total = nk + T * Wv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool is_k = i < nk;
    const int64_t j = is_k ? i : i - nk, W = is_k ? Wk : Wv;
    const int64_t t = j / W, w = j - t * W;
    const int64_t p = pos[t], blk = p / page_size;
    if (p < 0 || blk >= max_blocks || seq[t] < 0 || seq[t] >= n_seqs) continue;
    const int64_t page = bt[static_cast<int64_t>(seq[t]) * max_blocks + blk];
    if (page < 0 || page >= n_pages) continue;
    const int64_t dst = (page * page_size + p % page_size) * W + w;
    const float x = load_any(is_k ? k : v, src_code, j);
    void* c = is_k ? kc : vc;
    if (dst_f32) static_cast<float*>(c)[dst] = x;
    else static_cast<bf16*>(c)[dst] = __float2bfloat16_rn(x);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  forget_prepared();
  cuda::check_kv_write("kv_write", batch, k, v, kv);
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1), T = batch.n_tokens;
  const int64_t Wk = kv.k.dim(2) * kv.k.dim(3), Wv = kv.v.dim(2) * kv.v.dim(3);
  if (T * (Wk + Wv) == 0) return;
  cuda::kv_write_kernel<<<cuda::grid_1d(T * (Wk + Wv), 256), 256, 0, stream_>>>(
      k.data, v.data, cuda::float_code("kv_write", "k", k.dtype), kv.k.data, kv.v.data, kv.k.dtype == DType::F32, T,
      Wk, Wv, page, n_pages, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(), batch.n_seqs,
      batch.block_tables.ptr<int32_t>(), batch.max_blocks);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
