#pragma once
// The attention sink (AttentionParams::sinks, gpt-oss; transformers GptOssAttention) applied to a
// finished online-softmax state: one extra logit per query head in the softmax's denominator that
// contributes no value. Shared by the attention kernels (attention.cu, attention_decode.cu,
// attention_tc.cu), which fold it in exactly once, where a row's output is normalised (after the
// split-K merge, never per split). Device code only.
#include <cuda_runtime.h>

namespace ft::cuda {

/** The factor c with out = o * c for a row's state (m, l, o): m the running max, l = sum exp(s - m),
 *  o = sum exp(s - m) v, all in natural-log units, and `sink` the head's logit (not scaled):
 *  c = exp(m - M) / (l exp(m - M) + exp(sink - M)), M = max(m, sink). A row without keys (m = -inf,
 *  l = 0) gets 0. Never overflows: both exponents are <= 0. */
__device__ __forceinline__ float sink_scale(float m, float l, float sink) {
  const float M = fmaxf(m, sink);
  const float c = __expf(m - M);
  return c / fmaf(l, c, __expf(sink - M));
}

/** sink_scale for a state kept in base 2 (m and sink2 = sink * log2(e); l = sum 2^(s - m)): the
 *  tensor-core kernel's units. */
__device__ __forceinline__ float sink_scale2(float m, float l, float sink2) {
  const float M = fmaxf(m, sink2);
  const float c = exp2f(m - M);
  return c / fmaf(l, c, exp2f(sink2 - M));
}

}  // namespace ft::cuda
