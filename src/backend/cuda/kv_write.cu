// kv_write: stores the batch's new keys/values into their pages. Token t (sequence s =
// seq_index[t], position p = positions[t]) goes to page block_tables[s, p / page_size], slot
// p % page_size. k [T, Wk] and v [T, Wv] F32 or BF16 (one dtype); kv.k [n_pages, page_size, heads_k,
// dim_k] and kv.v [n_pages, page_size, heads_v, dim_v] F32 or BF16 (one dtype; converted on the way),
// Wk = heads_k * dim_k and Wv = heads_v * dim_v: equal for GQA, different for MLA (the latent c in kv.k,
// the RoPE key in kv.v). Quantized pages (--kv-cache-dtype fp8 / q8_0: F8_E4M3 or I8 codes with
// kv.k_scale / kv.v_scale; kv_quant.cuh) get each head row's codes and scales exactly as the CPU's
// kv_quantize_head computes them (same amax, scale formula, rounding and E4M3 saturation), one warp
// a head row. Entries whose sequence, block or page is out of range are skipped (the CPU
// backend throws; validate block tables on the host). Throws kInvalidArgument for shapes
// (op_checks::kv_write), kUnsupported for other dtypes.
// Bytes moved: T * (Wk + Wv) * (src + dst element size) + index reads.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kv_quant.cuh"

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

/** Quantized pages (FORM kKvFp8 or kKvQ8): one warp per head row, k's T * Gk rows first, then v's
 *  T * Gv. A row's codes go to codes[row * D ..] and its scales to scales[row * sph ..], row = (page *
 *  page_size + slot) * G + h, as the CPU's kv_write (kv_quantize_row_warp: the CPU's math). */
template <int FORM>
__global__ void kv_write_quant_kernel(const void* k, const void* v, int src_code, uint8_t* kc, uint8_t* vc, void* ks,
                                      void* vs, int64_t T, int Gk, int Dk, int Gv, int Dv, int64_t page_size,
                                      int64_t n_pages, const int32_t* pos, const int32_t* seq, int64_t n_seqs,
                                      const int32_t* bt, int max_blocks) {
  const int64_t nk = T * Gk, n_rows = nk + T * Gv;
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; r < n_rows; r += warps) {
    const bool is_k = r < nk;  // warp-uniform from here on
    const int64_t j = is_k ? r : r - nk;  // source row: (t, h) of a [T, G * D] input
    const int G = is_k ? Gk : Gv, D = is_k ? Dk : Dv;
    const int64_t t = j / G;
    const int h = static_cast<int>(j - t * G);
    const int64_t p = pos[t], blk = p / page_size;
    if (p < 0 || blk >= max_blocks || seq[t] < 0 || seq[t] >= n_seqs) continue;
    const int64_t page = bt[static_cast<int64_t>(seq[t]) * max_blocks + blk];
    if (page < 0 || page >= n_pages) continue;
    const int64_t row = (page * page_size + p % page_size) * G + h;
    const void* src = is_k ? k : v;
    const int64_t s0 = j * D;
    kv_quantize_row_warp<FORM>([&](int d) { return load_any(src, src_code, s0 + d); }, D, (is_k ? kc : vc) + row * D,
                               is_k ? ks : vs, row);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  cuda::check_kv_write("kv_write", batch, k, v, kv);
  const int64_t n_pages = kv.k.dim(0), page = kv.k.dim(1), T = batch.n_tokens;
  const int64_t Wk = kv.k.dim(2) * kv.k.dim(3), Wv = kv.v.dim(2) * kv.v.dim(3);
  if (T * (Wk + Wv) == 0) return;
  if (kv.quantized()) {
    const int form = cuda::check_kv_pages("kv_write", kv);  // checked above: kKvFp8 or kKvQ8
    const int64_t rows = T * (kv.k.dim(2) + kv.v.dim(2));
    auto* kernel = form == cuda::kKvFp8 ? cuda::kv_write_quant_kernel<cuda::kKvFp8> : cuda::kv_write_quant_kernel<cuda::kKvQ8>;
    kernel<<<cuda::grid_1d(rows * 32, 256), 256, 0, stream_>>>(
        k.data, v.data, cuda::float_code("kv_write", "k", k.dtype), static_cast<uint8_t*>(kv.k.data),
        static_cast<uint8_t*>(kv.v.data), kv.k_scale.data, kv.v_scale.data, T, static_cast<int>(kv.k.dim(2)),
        static_cast<int>(kv.k.dim(3)), static_cast<int>(kv.v.dim(2)), static_cast<int>(kv.v.dim(3)), page, n_pages,
        batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(), batch.n_seqs, batch.block_tables.ptr<int32_t>(),
        batch.max_blocks);
    FT_CUDA_LAUNCH_CHECK();
    return;
  }
  cuda::kv_write_kernel<<<cuda::grid_1d(T * (Wk + Wv), 256), 256, 0, stream_>>>(
      k.data, v.data, cuda::float_code("kv_write", "k", k.dtype), kv.k.data, kv.v.data, kv.k.dtype == DType::F32, T,
      Wk, Wv, page, n_pages, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(), batch.n_seqs,
      batch.block_tables.ptr<int32_t>(), batch.max_blocks);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
