// rope: rotary embedding in place. x [T, n_heads * head_dim] F32 or BF16, positions I32 [T],
// inv_freq F32 [n_rot / 2] on the device. Pair i of each head (normal: dims 2i, 2i+1; NeoX: i,
// i + n_rot/2) rotates by angle positions[t] * inv_freq[i] (fp32, as Hugging Face computes it);
// cos and sin are scaled by attn_factor; dims >= n_rot are untouched. One thread per (token, head,
// pair). Bytes moved: 2 * T * n_heads * n_rot * element size.
#include "backend/op_checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void rope_kernel(T* x, const int32_t* pos, const float* inv_freq, int64_t T_, int64_t n_head, int64_t hd,
                            int64_t half, bool neox, float attn_factor) {
  const int64_t total = T_ * n_head * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = i % half, h = (i / half) % n_head, t = i / (half * n_head);
    const float angle = static_cast<float>(pos[t]) * inv_freq[pair];
    float s, c;
    sincosf(angle, &s, &c);
    c *= attn_factor, s *= attn_factor;
    T* r = x + (t * n_head + h) * hd;
    const int64_t i0 = neox ? pair : 2 * pair, i1 = neox ? pair + half : 2 * pair + 1;
    const float a = to_f(r[i0]), b = to_f(r[i1]);
    r[i0] = from_f<T>(a * c - b * s);
    r[i1] = from_f<T>(b * c + a * s);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::rope(const RopeParams& p, Tensor x, const Tensor& positions) {
  cuda::check_act("rope", "x", x);
  cuda::check_dtype("rope", "positions", positions, {DType::I32});
  cuda::check_dtype("rope", "inv_freq", p.inv_freq, {DType::F32});
  op_checks::rope(p, x, positions);
  const int64_t T = x.rows(), W = x.cols(), hd = p.head_dim, n_rot = p.n_rot;
  const int64_t total = T * (W / hd) * (n_rot / 2);
  if (total == 0) return;
  const bool neox = p.mode == RopeMode::kNeox;
  FT_DISPATCH_ACT("rope", "x", x.dtype, {
    cuda::rope_kernel<T><<<cuda::grid_1d(total, 256), 256, 0, stream_>>>(
        x.ptr<T>(), positions.ptr<int32_t>(), p.inv_freq.ptr<float>(), x.rows(), W / hd, hd, n_rot / 2, neox,
        p.attn_factor);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
