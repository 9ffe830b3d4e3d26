// ssm_conv: Gated DeltaNet's causal depthwise convolution with SiLU (transformers'
// causal_conv1d_fn / causal_conv1d_update, no bias), each sequence carrying its last K-1 inputs in its
// F32 state slot. Two kernels: the outputs, one thread per (channel, tile of kTile rows of the batch)
// with the window in registers (rows before a sequence's first come from its old state, or are zero
// at position 0), so a long prefill spreads over every SM; then the new states, one thread per
// (channel, sequence), after every output has read the old ones. Reads and writes of a row are
// coalesced over channels. x, out [T, C] F32 or BF16; w F32 [C, K], K <= kMaxTaps (kernels instantiated
// for up to 8 taps and, for Qwen4-Exp's zero-padded dilated PLE conv, up to 16); conv_state F32
// [n_slots, K-1, C]. Rows of sequences with an out-of-range slot are skipped (the CPU backend throws).
// Bytes moved: T * C * 2 activation elements (+ (K-1) C per tile) + S * C * 2 (K-1) * 4 + C * K * 4.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"

#include <type_traits>

namespace ft {
namespace cuda {
namespace {

constexpr int kMaxTaps = 16;
constexpr int kTile = 32;  // rows per thread of the output kernel

/** Input row src of sequence [t0, ...) for channel c: x itself from t0 on, the old state before it
 *  (zero when the sequence starts at position 0). */
template <typename T>
__device__ __forceinline__ float conv_input(const T* x, const float* st, int64_t C, int K, int t0, bool fresh,
                                            int src, int64_t c) {
  if (src >= t0) return to_f(x[static_cast<int64_t>(src) * C + c]);
  return fresh ? 0.0f : st[static_cast<int64_t>(K - 1 - (t0 - src)) * C + c];
}

template <typename T, int kMaxTaps>
__global__ void ssm_conv_kernel(const T* __restrict__ x, const float* __restrict__ w, const float* state,
                                T* out, int64_t C, int K, const int32_t* seq_start, int S, const int32_t* pos,
                                const int32_t* slots, int64_t n_slots) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int tb = blockIdx.y * kTile, te = min(tb + kTile, seq_start[S]);
  if (tb >= te) return;
  int lo = 0, hi = S - 1;  // the sequence of row tb: the last s with seq_start[s] <= tb
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (seq_start[mid] <= tb) lo = mid;
    else hi = mid - 1;
  }
  float wk[kMaxTaps];
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) wk[j] = j < K ? w[c * K + j] : 0.0f;
  int s = lo;
  int t = tb;
  while (t < te) {
    while (seq_start[s + 1] <= t) ++s;  // skip empty sequences
    const int t0 = seq_start[s], t1 = min(seq_start[s + 1], te);
    const int64_t slot = slots[s];
    if (slot < 0 || slot >= n_slots) {
      t = t1;
      continue;
    }
    const float* st = state + slot * (K - 1) * C;
    const bool fresh = pos[t0] == 0;
    float win[kMaxTaps];  // win[j]: input row t - (K - 1) + j
#pragma unroll
    for (int j = 0; j < kMaxTaps; ++j) win[j] = j < K - 1 ? conv_input(x, st, C, K, t0, fresh, t - (K - 1) + j, c) : 0.0f;
    for (; t < t1; ++t) {
      const float xt = to_f(x[static_cast<int64_t>(t) * C + c]);
      float acc = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxTaps; ++j) {
        if (j < K - 1) acc += wk[j] * win[j];
        else if (j == K - 1) acc += wk[j] * xt;
      }
      out[static_cast<int64_t>(t) * C + c] = from_f<T>(silu(acc));
#pragma unroll
      for (int j = 0; j < kMaxTaps - 1; ++j)
        if (j < K - 2) win[j] = win[j + 1];
#pragma unroll
      for (int j = 0; j < kMaxTaps; ++j)
        if (j == K - 2) win[j] = xt;
    }
  }
}

/** The new state of each sequence: its last K-1 input rows (older ones from the old state). */
template <typename T, int kMaxTaps>
__global__ void ssm_conv_state_kernel(const T* __restrict__ x, float* state, int64_t C, int K,
                                      const int32_t* seq_start, const int32_t* pos, const int32_t* slots,
                                      int64_t n_slots) {
  const int s = blockIdx.y;
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  const int t0 = seq_start[s], t1 = seq_start[s + 1];
  const int64_t slot = slots[s];
  if (t1 <= t0 || slot < 0 || slot >= n_slots) return;
  float* st = state + slot * (K - 1) * C;
  const bool fresh = pos[t0] == 0;
  float win[kMaxTaps];
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j) win[j] = j < K - 1 ? conv_input(x, st, C, K, t0, fresh, t1 - (K - 1) + j, c) : 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxTaps; ++j)
    if (j < K - 1) st[static_cast<int64_t>(j) * C + c] = win[j];
}

}  // namespace
}  // namespace cuda

void CudaOps::ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) {
  const int64_t K = op_checks::ssm_conv(batch, x, w, conv_state, out);
  cuda::check_act("ssm_conv", "x", x);
  cuda::check_dev("ssm_conv", "w", w);
  cuda::check_dev("ssm_conv", "conv_state", conv_state);
  if (x.data == out.data) fail(ErrorCode::kInvalidArgument, "ssm_conv: out must not alias x");
  if (K > cuda::kMaxTaps)
    fail(ErrorCode::kUnsupported, "ssm_conv: a kernel of {} taps (the CUDA backend has at most {})", K, cuda::kMaxTaps);
  const int64_t C = x.cols();
  if (batch.n_tokens == 0 || batch.n_seqs == 0) return;
  const unsigned cblocks = static_cast<unsigned>((C + 127) / 128);
  const dim3 grid(cblocks, static_cast<unsigned>((batch.n_tokens + cuda::kTile - 1) / cuda::kTile));
  FT_DISPATCH_ACT("ssm_conv", "x", x.dtype, {
    auto launch = [&](auto taps) {
      constexpr int kTaps = decltype(taps)::value;
      cuda::ssm_conv_kernel<T, kTaps><<<grid, 128, 0, stream_>>>(
          x.ptr<T>(), w.ptr<float>(), conv_state.ptr<float>(), out.ptr<T>(), C, static_cast<int>(K),
          batch.seq_start.ptr<int32_t>(), static_cast<int>(batch.n_seqs), batch.positions.ptr<int32_t>(),
          batch.state_slots.ptr<int32_t>(), conv_state.dim(0));
      cuda::ssm_conv_state_kernel<T, kTaps><<<dim3(cblocks, static_cast<unsigned>(batch.n_seqs)), 128, 0, stream_>>>(
          x.ptr<T>(), conv_state.ptr<float>(), C, static_cast<int>(K), batch.seq_start.ptr<int32_t>(),
          batch.positions.ptr<int32_t>(), batch.state_slots.ptr<int32_t>(), conv_state.dim(0));
    };
    if (K <= 8) launch(std::integral_constant<int, 8>());
    else launch(std::integral_constant<int, cuda::kMaxTaps>());
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
