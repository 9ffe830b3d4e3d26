// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (w + weight_offset). x, out [R, D]
// of one activation dtype (F32 or BF16; may alias); w [D] F32/F16/BF16; fp32 sum of squares.
// Rows of up to 256 (per-head QK-norm): one warp per row. Longer rows (the hidden state): one block
// per row, each thread holding up to 8 elements in registers (rows past 8192: a strided block per
// row, rms_norm_wide_kernel), so a decode step's single row is
// read by hundreds of threads at once instead of one warp's serial loop (measured 22-35 us -> a few).
// add_rms_norm (x += r, then the norm) is the same one-block-per-row kernel with the residual given.
// Decode batches (up to kClusterMaxRows rows) take a cluster of 8 blocks per row that computes the
// same bits (rms_norm_cluster_kernel) and, when a GEMV reads the row's int8 form next
// (CudaOps::prepare_q8), writes that form too.
// Bytes moved: 2 * R * D * element size + D weights (cached); add_rms_norm 4 * R * D * element size.
#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/q8_act.cuh"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void rms_norm_kernel(const T* x, const void* w, int w_code, float eps, float offset, T* out, int64_t R,
                                int64_t D) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  pdl_enter();
  if (r >= R) return;
  const T* xr = x + r * D;
  float ss = 0.0f;
  for (int64_t i = lane; i < D; i += 32) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  T* o = out + r * D;
  for (int64_t i = lane; i < D; i += 32) o[i] = from_f<T>(to_f(xr[i]) * inv * (load_any(w, w_code, i) + offset));
}

/** Rows longer than the row kernel takes (DeepSeek-V4's hyper-connection streams flattened: 4 x 4096):
 *  one block per row, a strided pass for the sum of squares and one for the output (x read twice, the
 *  second from L2). A warp per row took ~200 us for one 16384-element row on an H100 (ncu). */
template <typename T>
__global__ void rms_norm_wide_kernel(const T* x, const void* w, int w_code, float eps, float offset, T* out,
                                     int64_t D) {
  __shared__ float red[32];
  const T* xr = x + blockIdx.x * D;
  T* o = out + blockIdx.x * D;
  pdl_enter();
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  ss = block_sum(ss, red);  // every thread has read its elements: out may alias x
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    o[i] = from_f<T>(to_f(xr[i]) * inv * (load_any(w, w_code, i) + offset));
}

constexpr int kRowPerThread = 8;
constexpr int64_t kClusterMaxRows = 16;  // decode batches: the cluster kernel (8 blocks per row)

/** One block per row: out = rms_norm(x), or with `res`, x += res (rounded to T) first and out =
 *  rms_norm of that (add_rms_norm; out must then not alias x). Every load (x, res, w) is issued
 *  before the first store: a store between them (out may alias x as far as the compiler knows)
 *  would make each wait for the one before. */
template <typename T>
__global__ void rms_norm_row_kernel(T* x, const T* res, const void* w, int w_code, float eps, float offset, T* out,
                                    int64_t D) {
  __shared__ float red[32];
  T* xr = x + blockIdx.x * D;
  const T* rr = res ? res + blockIdx.x * D : nullptr;
  T* o = out + blockIdx.x * D;
  float v[kRowPerThread], wv[kRowPerThread];
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {  // the weights are constant: loaded before the PDL wait
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    wv[u] = i < D ? load_any(w, w_code, i) + offset : 0.0f;
  }
  pdl_enter();
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    v[u] = i >= D ? 0.0f : (rr ? to_f(from_f<T>(to_f(xr[i]) + to_f(rr[i]))) : to_f(xr[i]));
  }
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    if (rr && i < D) xr[i] = from_f<T>(v[u]);
    ss += v[u] * v[u];
  }
  ss = block_sum(ss, red);  // every thread has read its elements: out may alias x (without res)
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    if (i < D) o[i] = from_f<T>(v[u] * inv * wv[u]);
  }
}

/** rms_norm_row_kernel's result, bit for bit, from a cluster of kRowPerThread blocks per row (grid
 *  (kRowPerThread, R), cluster along x), which also writes out's int8 form (q8_act.cuh) for the GEMV
 *  that reads it next when q8 is not null. Every block loads the whole row with the row kernel's layout (thread i holds
 *  elements i + u * blockDim.x) and computes the same sum of squares; after a cluster barrier (every
 *  block has read x, which is then written) block b stores the elements of u = b, whose 32-element
 *  chunks are one per warp, and quantizes them. H200, qwen3-30b-a3b q4_k: +2.9% at batch 1, +3.4%
 *  at batch 8, +4.5% after a 4k prompt, against the row kernel and a quantize launch. A single block
 *  quantizing the row's chunks in turn was 5% slower than the separate launch. Without the int8 form
 *  (bf16 weights) it still beats the row kernel: bf16 batch 1 239.0 / 239.9 -> 248.4 tok/s (one
 *  lease): 8 blocks load the row at once and each stores an eighth. */
template <typename T>
__global__ void rms_norm_cluster_kernel(T* x, const T* res, const void* w, int w_code, float eps, float offset, T* out,
                                        int64_t D, int8_t* q8) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // launched only where clusters_possible()
  __shared__ float red[32];
  const int b = static_cast<int>(blockIdx.x);
  const int64_t row = blockIdx.y, mine = threadIdx.x + static_cast<int64_t>(b) * blockDim.x;
  T* xr = x + row * D;
  const T* rr = res ? res + row * D : nullptr;
  const float wv = mine < D ? load_any(w, w_code, mine) + offset : 0.0f;  // constant: before the PDL wait
  pdl_enter();
  float v[kRowPerThread];
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(u) * blockDim.x;
    v[u] = i >= D ? 0.0f : (rr ? to_f(from_f<T>(to_f(xr[i]) + to_f(rr[i]))) : to_f(xr[i]));
  }
  float ss = 0.0f, vb = 0.0f;
#pragma unroll
  for (int u = 0; u < kRowPerThread; ++u) {
    ss += v[u] * v[u];
    if (u == b) vb = v[u];
  }
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  cooperative_groups::this_cluster().sync();  // every block of the row has read x and res
  if (mine >= D) return;  // whole warps (D a multiple of 32)
  if (rr) xr[mine] = from_f<T>(vb);
  const T y = from_f<T>(vb * inv * wv);
  out[row * D + mine] = y;
  if (q8) quantize_q8_lane(to_f(y), q8, Q8Layout(gridDim.y, D), row * D + mine, (row * D + mine) / 32);
#endif
}

/** Whether rms_norm_row_kernel takes rows of D elements (a block of up to 1024 threads, kRowPerThread each). */
bool row_kernel_fits(int64_t D) { return D > 256 && D <= 1024 * kRowPerThread; }

/** Queues rms_norm_cluster_kernel for up to kClusterMaxRows rows of a multiple of 32 elements when
 *  `clusters` (clusters_possible), writing out's int8 form into q8 when not null (q8 requires that
 *  case); otherwise rms_norm_row_kernel over R rows. res may be null. */
void launch_row(const char* op, const Tensor& x, const void* res, const Tensor& w, int w_code, const RmsNormParams& p,
                Tensor out, void* q8, bool clusters, cudaStream_t stream) {
  const int64_t R = x.rows(), D = x.cols();
  const int threads = static_cast<int>(std::min<int64_t>(1024, ((D + kRowPerThread - 1) / kRowPerThread + 31) / 32 * 32));
  const bool cluster = clusters && R <= kClusterMaxRows && D % 32 == 0;
  FT_CHECK(cluster || !q8);  // prepare_q8 records the form only for such rows
  if (cluster) {
    FT_DISPATCH_ACT(op, "x", x.dtype, {
      launch_pdl_cluster(rms_norm_cluster_kernel<T>, dim3(kRowPerThread, static_cast<unsigned>(R)), dim3(kRowPerThread),
                         threads, 0, stream, x.ptr<T>(), static_cast<const T*>(res), w.data, w_code, p.eps,
                         p.weight_offset, out.ptr<T>(), D, static_cast<int8_t*>(q8));
    });
    return;
  }
  FT_DISPATCH_ACT(op, "x", x.dtype, {
    launch_pdl(rms_norm_row_kernel<T>, static_cast<unsigned>(R), threads, 0, stream, x.ptr<T>(),
               static_cast<const T*>(res), w.data, w_code, p.eps, p.weight_offset, out.ptr<T>(), D);
  });
}

}  // namespace
}  // namespace cuda

void CudaOps::add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                           ActQ8* out_q8) {
  if (out_q8) *out_q8 = ActQ8{};  // until out's form is written
  const int64_t D = x.cols();
  if (!cuda::row_kernel_fits(D)) return Ops::add_rms_norm(p, x, r, w, out, out_q8);  // other row lengths: unfused
  cuda::check_act("add_rms_norm", "x", x);
  cuda::check_act("add_rms_norm", "r", r);
  cuda::check_act("add_rms_norm", "out", out);
  cuda::check_same_shape("add_rms_norm", "r", r, x);
  cuda::check_same_shape("add_rms_norm", "out", out, x);
  cuda::check_same_dtype("add_rms_norm", "r", r, x);
  cuda::check_same_dtype("add_rms_norm", "out", out, x);
  cuda::check_dev("add_rms_norm", "w", w);
  if (w.numel() != D)
    fail(ErrorCode::kInvalidArgument, "add_rms_norm: weight {} must have {} elements (the row length of x {})", w.str(),
         D, x.str());
  if (out.data == x.data || out.data == r.data)
    fail(ErrorCode::kInvalidArgument, "add_rms_norm: out must not alias x or r");
  const int w_code = cuda::float_code("add_rms_norm", "w", w.dtype);
  if (x.rows() > 0)
    cuda::launch_row("add_rms_norm", x, r.data, w, w_code, p, out,
                     cuda::clusters_possible(device_) ? prepare_q8(out, out_q8) : nullptr,
                     cuda::clusters_possible(device_), stream_);
}

void CudaOps::rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8) {
  if (out_q8) *out_q8 = ActQ8{};  // until out's form is written
  cuda::check_act("rms_norm", "x", x);
  cuda::check_act("rms_norm", "out", out);
  cuda::check_same_shape("rms_norm", "out", out, x);
  cuda::check_same_dtype("rms_norm", "out", out, x);
  cuda::check_dev("rms_norm", "w", w);
  const int w_code = cuda::float_code("rms_norm", "w", w.dtype);
  const int64_t R = x.rows(), D = x.cols();
  if (w.numel() != D)
    fail(ErrorCode::kInvalidArgument, "rms_norm: weight {} must have {} elements (the row length of x {})", w.str(), D,
         x.str());
  if (R == 0) return;
  if (cuda::row_kernel_fits(D)) return cuda::launch_row("rms_norm", x, nullptr, w, w_code, p, out,
                                                    cuda::clusters_possible(device_) ? prepare_q8(out, out_q8) : nullptr,
                                                    cuda::clusters_possible(device_), stream_);
  if (D > 256) {  // longer than the row kernel takes
    FT_DISPATCH_ACT("rms_norm", "x", x.dtype, {
      cuda::launch_pdl(cuda::rms_norm_wide_kernel<T>, static_cast<unsigned>(R), 1024, 0, stream_, x.ptr<T>(), w.data,
                       w_code, p.eps, p.weight_offset, out.ptr<T>(), D);
    });
    return;
  }
  const unsigned blocks = static_cast<unsigned>((R + 3) / 4);
  FT_DISPATCH_ACT("rms_norm", "x", x.dtype, {
    cuda::launch_pdl(cuda::rms_norm_kernel<T>, blocks, 128, 0, stream_, x.ptr<T>(), w.data, w_code, p.eps,
                     p.weight_offset, out.ptr<T>(), R, D);
  });
}

}  // namespace ft
