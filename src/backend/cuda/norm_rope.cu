// norm_rope: per-head RMSNorm (QK-norm) then rotary embedding, in place, in one kernel: x [T, n_heads *
// head_dim] F32 or BF16, w [head_dim] F32/F16/BF16, positions I32 [T], inv_freq F32 [n_rot / 2].
// One warp per (token, head): lane l holds dims l, l + 32, ... (the order rms_norm.cu sums in), the
// normalised head goes through shared memory so each lane can read its rotation partner (NeoX: i and
// i + n_rot/2; normal: 2i and 2i+1), angles and cos/sin scaling as rope.cu. Saves a launch and a
// round trip of the head through memory per call. Bytes moved: 2 * T * n_heads * head_dim * element size.
#include "backend/op_checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kNrWarps = 4, kNrMaxHeadDim = 256;

template <typename T>
__global__ void __launch_bounds__(kNrWarps * 32)
    norm_rope_kernel(T* x, const void* w, int w_code, float eps, float offset, const int32_t* pos, const float* inv_freq,
                     int64_t rows, int64_t n_head, int hd, int n_rot, bool neox, float attn_factor) {
  __shared__ float head[kNrWarps][kNrMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kNrWarps) + warp;  // token * n_head + head
  if (row >= rows) return;
  T* r = x + row * hd;
  float ss = 0.0f;
  for (int i = lane; i < hd; i += 32) {
    const float v = to_f(r[i]);
    head[warp][i] = v;
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
  for (int i = lane; i < hd; i += 32) head[warp][i] = head[warp][i] * inv * (load_any(w, w_code, i) + offset);
  __syncwarp();
  const float p = static_cast<float>(pos[row / n_head]);
  const int half = n_rot / 2;
  for (int i = lane; i < hd; i += 32) {
    float out = head[warp][i];
    if (i < n_rot) {
      const int pair = neox ? (i < half ? i : i - half) : i / 2;
      const bool first = neox ? i < half : (i % 2 == 0);
      const int i0 = neox ? pair : 2 * pair, i1 = neox ? pair + half : 2 * pair + 1;
      float s, c;
      sincosf(p * inv_freq[pair], &s, &c);
      c *= attn_factor, s *= attn_factor;
      const float a = head[warp][i0], b = head[warp][i1];
      out = first ? a * c - b * s : b * c + a * s;
    }
    r[i] = from_f<T>(out);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                        const Tensor& positions) {
  cuda::check_act("norm_rope", "x", x);
  cuda::check_dev("norm_rope", "w", w);
  cuda::check_dtype("norm_rope", "positions", positions, {DType::I32});
  cuda::check_dtype("norm_rope", "inv_freq", p.inv_freq, {DType::F32});
  op_checks::rope(p, x, positions);
  if (w.numel() != p.head_dim)
    fail(ErrorCode::kInvalidArgument, "norm_rope: weight {} must have head_dim {} elements", w.str(), p.head_dim);
  if (p.head_dim > cuda::kNrMaxHeadDim) return Ops::norm_rope(np, w, p, x, positions);  // unfused
  const int w_code = cuda::float_code("norm_rope", "w", w.dtype);
  const int64_t n_head = x.cols() / p.head_dim, rows = x.rows() * n_head;
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kNrWarps - 1) / cuda::kNrWarps);
  FT_DISPATCH_ACT("norm_rope", "x", x.dtype, {
    cuda::norm_rope_kernel<T><<<blocks, cuda::kNrWarps * 32, 0, stream_>>>(
        x.ptr<T>(), w.data, w_code, np.eps, np.weight_offset, positions.ptr<int32_t>(), p.inv_freq.ptr<float>(), rows,
        n_head, p.head_dim, p.n_rot, p.mode == RopeMode::kNeox, p.attn_factor);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
