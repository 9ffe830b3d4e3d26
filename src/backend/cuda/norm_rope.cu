// norm_rope: per-head RMSNorm (QK-norm) then rotary embedding, in place, in one kernel: x [T, n_heads *
// head_dim] F32 or BF16, w [head_dim] F32/F16/BF16, positions I32 [T], inv_freq F32 [n_rot / 2].
// One warp per (token, head): lane l holds dims l, l + 32, ... (the order rms_norm.cu sums in), the
// normalised head goes through shared memory so each lane can read its rotation partner (NeoX: i and
// i + n_rot/2; normal: 2i and 2i+1), angles and cos/sin scaling as rope.cu. Saves a launch and a
// round trip of the head through memory per call. qk_norm_rope does q's and k's heads in one launch. Bytes moved: 2 * T * n_heads * head_dim * element size.
#include "backend/op_checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kNrWarps = 4, kNrMaxHeadDim = 256;

/** One tensor's heads: x [T, n_head * hd] with its norm weight. */
template <typename T>
struct NrHeads {
  T* x;
  const void* w;
  int w_code;
  int64_t rows, n_head;  // rows = T * n_head
};

/** Rows 0 .. a.rows - 1 are a's heads, the next b.rows are b's (q and k in one launch). */
template <typename T>
__global__ void __launch_bounds__(kNrWarps * 32)
    norm_rope_kernel(NrHeads<T> a, NrHeads<T> b, float eps, float offset, const int32_t* pos, const float* inv_freq,
                     int hd, int n_rot, bool neox, float attn_factor) {
  __shared__ float head[kNrWarps][kNrMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t row = blockIdx.x * static_cast<int64_t>(kNrWarps) + warp;  // token * n_head + head
  const bool first = row < a.rows;
  if (!first) row -= a.rows;
  if (row >= (first ? a.rows : b.rows)) return;
  const void* w = first ? a.w : b.w;
  const int w_code = first ? a.w_code : b.w_code;
  const int64_t n_head = first ? a.n_head : b.n_head;
  T* r = (first ? a.x : b.x) + row * hd;
  const float p = static_cast<float>(pos[static_cast<uint32_t>(row) / static_cast<uint32_t>(n_head)]);  // rows < 2^31
  const int half = n_rot / 2;
  constexpr int kPer = kNrMaxHeadDim / 32;
  // Every global load first (x, the norm weight, the rotation frequencies): a dependent chain of
  // round trips was most of this kernel's time.
  float xv[kPer], wv[kPer], fr[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = lane + 32 * u;
    const bool in = i < hd;
    xv[u] = in ? to_f(r[i]) : 0.0f;
    wv[u] = in ? load_any(w, w_code, i) + offset : 0.0f;
    const int pair = neox ? (i < half ? i : i - half) : i / 2;
    fr[u] = in && i < n_rot ? inv_freq[pair] : 0.0f;
  }
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) ss += xv[u] * xv[u];
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (lane + 32 * u < hd) head[warp][lane + 32 * u] = xv[u] * inv * wv[u];
  __syncwarp();
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = lane + 32 * u;
    if (i >= hd) break;
    float out = head[warp][i];
    if (i < n_rot) {
      const int pair = neox ? (i < half ? i : i - half) : i / 2;
      const bool lead = neox ? i < half : (i % 2 == 0);
      const int i0 = neox ? pair : 2 * pair, i1 = neox ? pair + half : 2 * pair + 1;
      float sn, cs;
      sincosf(p * fr[u], &sn, &cs);
      cs *= attn_factor, sn *= attn_factor;
      const float a0 = head[warp][i0], a1 = head[warp][i1];
      out = lead ? a0 * cs - a1 * sn : a1 * cs + a0 * sn;
    }
    r[i] = from_f<T>(out);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                        const Tensor& positions) {
  qk_norm_rope(np, w, Tensor(), p, x, Tensor(), positions);
}

void CudaOps::qk_norm_rope(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p, Tensor q,
                           Tensor k, const Tensor& positions) {
  const bool has_k = !k.empty();
  cuda::check_dtype("norm_rope", "positions", positions, {DType::I32});
  cuda::check_dtype("norm_rope", "inv_freq", p.inv_freq, {DType::F32});
  for (int i = 0; i < (has_k ? 2 : 1); ++i) {
    const Tensor& x = i == 0 ? q : k;
    const Tensor& w = i == 0 ? wq : wk;
    cuda::check_act("norm_rope", "x", x);
    cuda::check_dev("norm_rope", "w", w);
    op_checks::rope(p, x, positions);
    if (w.numel() != p.head_dim)
      fail(ErrorCode::kInvalidArgument, "norm_rope: weight {} must have head_dim {} elements", w.str(), p.head_dim);
  }
  if (has_k) cuda::check_same_dtype("norm_rope", "k", k, q);
  if (p.head_dim > cuda::kNrMaxHeadDim) {  // unfused
    Ops::norm_rope(np, wq, p, q, positions);
    if (has_k) Ops::norm_rope(np, wk, p, k, positions);
    return;
  }
  const int64_t hq = q.cols() / p.head_dim, hk = has_k ? k.cols() / p.head_dim : 0;
  const int64_t rows = q.rows() * hq + (has_k ? k.rows() * hk : 0);
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kNrWarps - 1) / cuda::kNrWarps);
  FT_DISPATCH_ACT("norm_rope", "x", q.dtype, {
    const cuda::NrHeads<T> a{q.ptr<T>(), wq.data, cuda::float_code("norm_rope", "w", wq.dtype), q.rows() * hq, hq};
    const cuda::NrHeads<T> b{has_k ? k.ptr<T>() : nullptr, has_k ? wk.data : nullptr,
                             has_k ? cuda::float_code("norm_rope", "w", wk.dtype) : 0, has_k ? k.rows() * hk : 0,
                             hk > 0 ? hk : 1};
    cuda::norm_rope_kernel<T><<<blocks, cuda::kNrWarps * 32, 0, stream_>>>(
        a, b, np.eps, np.weight_offset, positions.ptr<int32_t>(), p.inv_freq.ptr<float>(), p.head_dim, p.n_rot,
        p.mode == RopeMode::kNeox, p.attn_factor);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
