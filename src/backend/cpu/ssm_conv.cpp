// ssm_conv on the CPU: Gated DeltaNet's causal depthwise convolution with SiLU (transformers'
// causal_conv1d_fn / causal_conv1d_update), each sequence carrying its last K-1 inputs in its state
// slot. Parallel over channels; each output is the same K-term sum in the same order whatever the batch.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) {
  const int64_t K = op_checks::ssm_conv(batch, x, w, conv_state, out);
  cpu::check_batch("ssm_conv", batch);
  cpu::check_dtype("ssm_conv", "x", x, DType::F32);
  cpu::check_dtype("ssm_conv", "out", out, DType::F32);
  if (x.data == out.data) fail(ErrorCode::kInvalidArgument, "ssm_conv: out must not alias x");
  const int64_t C = x.cols(), n_slots = conv_state.dim(0);
  const int32_t* start = batch.seq_start.ptr<int32_t>();
  const int32_t* pos = batch.positions.ptr<int32_t>();
  cpu::check_state_slots("ssm_conv", batch, n_slots);
  const int32_t* slots = batch.state_slots.ptr<int32_t>();
  const float* xs = x.ptr<float>();
  const float* ws = w.ptr<float>();
  float* st = conv_state.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (C * batch.n_tokens > 16384)
  for (int64_t c = 0; c < C; ++c) {
    std::vector<float> win(static_cast<size_t>(K));  // win[j]: input at offset j - (K-1) from the current token
    for (int32_t s = 0; s < batch.n_seqs; ++s) {
      const int64_t t0 = start[s], t1 = start[s + 1];
      if (t1 <= t0) continue;
      float* slot = st + static_cast<int64_t>(slots[s]) * (K - 1) * C;
      const bool fresh = pos[t0] == 0;
      for (int64_t j = 0; j < K - 1; ++j) win[static_cast<size_t>(j)] = fresh ? 0.0f : slot[j * C + c];
      for (int64_t t = t0; t < t1; ++t) {
        win[static_cast<size_t>(K - 1)] = xs[t * C + c];
        float acc = 0.0f;
        for (int64_t j = 0; j < K; ++j) acc += ws[c * K + j] * win[static_cast<size_t>(j)];
        o[t * C + c] = acc / (1.0f + std::exp(-acc));
        for (int64_t j = 0; j + 1 < K; ++j) win[static_cast<size_t>(j)] = win[static_cast<size_t>(j + 1)];
      }
      for (int64_t j = 0; j < K - 1; ++j) slot[j * C + c] = win[static_cast<size_t>(j)];
    }
  }
}

}  // namespace ft
