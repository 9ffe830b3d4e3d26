// rope: rotary position embedding in place, GGML normal (adjacent pairs) or NeoX (split halves)
// layout, partial rotary dims (CPU backend). Angle = position * inv_freq[i] in fp32, as Hugging
// Face computes it (inv_freq @ position_ids in float32, then cos/sin).
#include <cmath>

#include "backend/op_checks.h"
#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::rope(const RopeParams& p, Tensor x, const Tensor& positions) {
  cpu::check_dtype("rope", "x", x, DType::F32);
  cpu::check_dtype("rope", "positions", positions, DType::I32);
  cpu::check_dtype("rope", "inv_freq", p.inv_freq, DType::F32);
  op_checks::rope(p, x, positions);
  const int64_t T = x.rows(), W = x.cols(), hd = p.head_dim, n_rot = p.n_rot;
  const int64_t n_head = W / hd, half = n_rot / 2;
  const float* inv = p.inv_freq.ptr<float>();
  const int32_t* pos = positions.ptr<int32_t>();
  float* data = x.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * W > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float fp = static_cast<float>(pos[t]);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = fp * inv[i];
      const float c = std::cos(angle) * p.attn_factor, s = std::sin(angle) * p.attn_factor;
      for (int64_t h = 0; h < n_head; ++h) {
        float* r = data + t * W + h * hd;
        const int64_t i0 = p.mode == RopeMode::kNormal ? 2 * i : i;
        const int64_t i1 = p.mode == RopeMode::kNormal ? 2 * i + 1 : i + half;
        const float a = r[i0], b = r[i1];
        r[i0] = a * c - b * s;
        r[i1] = b * c + a * s;
      }
    }
  }
}

}  // namespace ft
