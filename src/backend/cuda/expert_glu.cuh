#pragma once
// The gated unit between a routed expert's gate/up and down projections (ExpertGlu, backend/ops.h),
// shared by the kernels that apply it: the expert GEMVs' epilogues (gemv.cuh, gemv_q8.cu), the grouped
// prefill GEMM (moe_grouped_gemm.cu) and the elementwise kernel of the unfused paths (moe_glu.cu).
// Device code only.
#include <cuda_runtime.h>

#include "backend/cuda/common.cuh"

namespace ft::cuda {

/** ExpertGlu as the kernels take it (an int in their argument structs). */
constexpr int kGluSwiglu = 0, kGluSwigluOai = 1, kGluGeluTanh = 2, kGluSwigluClamp = 3;

/** h for gate g and up u (the biases already added): kGluSwiglu silu(g) * u; kGluGeluTanh gelu_tanh(g) * u; kGluSwigluOai
 *  (gpt-oss, transformers GptOssExperts) g' = min(g, limit), u' = clamp(u, -limit, limit),
 *  h = (u' + 1) * g' * sigmoid(alpha * g'), written as CpuOps::moe_experts writes it; kGluSwigluClamp
 *  (DeepSeek-V4, transformers DeepseekV4Experts) h = silu(min(g, limit)) * clamp(u, -limit, limit), as
 *  swiglu_clamp.cu (alpha unused). fp32. */
__device__ __forceinline__ float expert_glu(int kind, float alpha, float limit, float g, float u) {
  if (kind == kGluSwigluOai) {
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return (u + 1.0f) * (g / (1.0f + __expf(-alpha * g)));
  }
  if (kind == kGluSwigluClamp) {
    g = fminf(g, limit);
    return g / (1.0f + expf(-g)) * fminf(fmaxf(u, -limit), limit);
  }
  if (kind == kGluGeluTanh) {  // PyTorch's GELU approximate="tanh", as cpu::gelu_tanh
    const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
    return 0.5f * g * (1.0f + tanhf(inner)) * u;
  }
  return silu(g) * u;
}

}  // namespace ft::cuda
