#pragma once
// The int8 form of an activation that the integer-dot GEMV (gemv_q8.cu) reads: per 32-element chunk
// two int8 terms and a scale, x ~= d * (q1 + q2 / 254), and the chunk's sum as quantized. Written by
// quantize_q8_kernel before a GEMV, or beside its own work by a kernel that writes or reads the whole
// activation (CudaOps::prepare_q8: the norms' cluster kernel and the fused router, through
// quantize_q8_lane; the decode attention, attention_decode.cu's store_out4), with the same bytes
// either way.
#include "backend/cuda/common.cuh"

namespace ft::cuda {

/** Offsets of the parts of a q8 activation of `rows` x K elements: q1 int8 [rows, K] at 0, q2 int8
 *  [rows, K], xd (scales) and xs (sums) F32 [rows, K / 32]. Total: xs + rows * (K / 32) * 4 bytes. */
struct Q8Layout {
  int64_t q2, xd, xs;
  __host__ __device__ Q8Layout(int64_t rows, int64_t K) {
    const int64_t qbytes = (rows * K + 15) & ~int64_t{15};
    q2 = qbytes, xd = 2 * qbytes, xs = 2 * qbytes + rows * (K / 32) * 4;
  }
  __host__ __device__ static int64_t bytes(int64_t rows, int64_t K) { return Q8Layout(rows, K).xs + rows * (K / 32) * 4; }
};

/** Quantizes one 32-element chunk held one element per lane (a whole warp calls it, v = this lane's
 *  element, as stored in the activation's dtype): q1 = round(v / d), d = max|v| / 127, then q2 =
 *  round((v - d q1) / (d / 254)); element e (row * K + column) of the q8 layout at base, chunk
 *  index ci (row * K / 32 + column / 32). */
__device__ __forceinline__ void quantize_q8_lane(float v, int8_t* base, const Q8Layout& lay, int64_t e, int64_t ci) {
  const float d = warp_max(fabsf(v)) / 127.0f;
  int a = 0, c = 0;
  if (d > 0.0f) {
    a = __float2int_rn(v / d);
    c = max(-127, min(127, __float2int_rn((v - d * static_cast<float>(a)) * (254.0f / d))));
  }
  const float sum = warp_sum(d * fmaf(static_cast<float>(c), 1.0f / 254.0f, static_cast<float>(a)));
  base[e] = static_cast<int8_t>(a);
  base[lay.q2 + e] = static_cast<int8_t>(c);
  if ((threadIdx.x & 31) == 0) {
    reinterpret_cast<float*>(base + lay.xd)[ci] = d;
    reinterpret_cast<float*>(base + lay.xs)[ci] = sum;
  }
}

}  // namespace ft::cuda
