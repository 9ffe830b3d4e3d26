#pragma once
// The chunked (WY / UT-transform) form of the gated delta rule for prefill (gated_delta_chunked.cu);
// gated_delta_rule.cu picks it for batches with long sequences and keeps the recurrent kernel for
// decode. Only included from src/backend/cuda/*.cu.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

/** Arguments of launch_gated_delta_chunked; shapes and meanings as Ops::gated_delta_rule. */
struct GatedDeltaChunkedArgs {
  const void* qkv = nullptr;  // [T, 2 Hk dk + Hv dv], activation dtype (F32 when act_f32, else BF16)
  bool act_f32 = true;
  const void* a = nullptr;    // [T, Hv], dtype code ab_code (float_code)
  const void* b = nullptr;
  int ab_code = 0;
  const float* a_log = nullptr, *dt_bias = nullptr;  // [Hv]
  float* state = nullptr;     // F32 [n_slots, Hv, dk, dv]
  int64_t n_slots = 0;
  void* out = nullptr;        // [T, Hv dv], activation dtype
  int Hk = 0, Hv = 0, dk = 0, dv = 0;
  bool v_tiled = false;
  float l2_eps = 1e-6f;
  const int32_t* seq_start = nullptr;  // [S + 1]
  const int32_t* pos = nullptr;        // [T]
  const int32_t* slots = nullptr;      // [S]
  int S = 0;
  int64_t T = 0;
};

/** True when the chunked kernels take these head sizes (dk 32, 64 or 128, dv a multiple of
 *  16 up to 256). */
bool gated_delta_chunked_supported(int dk, int dv);

/** Scratch bytes launch_gated_delta_chunked needs for Hv value heads of sizes dk, dv. */
int64_t gated_delta_chunked_scratch_bytes(int Hv, int dk, int dv, int S);

/** Runs the gated delta rule over every sequence of the batch in chunks of 64 tokens (aligned to each
 *  sequence's first row) on `stream`, with `scratch` (gated_delta_chunked_scratch_bytes) for the
 *  per-chunk intermediates. Same results as the recurrent form up to fp32 rounding. */
void launch_gated_delta_chunked(const GatedDeltaChunkedArgs& a, void* scratch, cudaStream_t stream);

}  // namespace ft::cuda
