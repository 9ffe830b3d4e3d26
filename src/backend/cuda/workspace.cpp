// CudaOps::workspace_bytes: the device memory the backend's scratch regions (CudaOps::Scratch) grow
// to over steps of a given shape, from the same layout functions the ops carve their regions with,
// so the memory plan can count it against --gpu-memory-limit before the expert cache takes the rest.
#include <algorithm>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gated_delta_chunked.h"
#include "backend/cuda/launch.h"

namespace ft {

namespace {
constexpr int64_t kRuntimeAllowanceBytes = 256ll << 20;
}  // namespace

int64_t CudaOps::workspace_bytes(const WorkspaceShape& s) const {
  const int64_t T = std::max<int64_t>(s.tokens, 1), es = activations_ == DType::F32 ? 4 : 2;
  int64_t total = kCublasWorkspaceBytes;
  // matmul: F32 activations converted to bf16 for cuBLAS; MLA's head_matmul splits them into two
  // bf16 halves (4 bytes an element) in the same region.
  total += region_bytes(T * std::max(s.max_matmul_k, s.n_head * s.head_dim) * 4);
  total += region_bytes(cuda::kDequantTileBytes);  // a decoded tile of a quantized weight
  if (s.moe_top_k > 0 && s.moe_ffn > 0)
    total += region_bytes(cuda::moe_scratch_layout(T, s.moe_top_k, s.hidden, s.moe_ffn, s.moe_n_expert, es, false).bytes);
  if (s.n_head > 0)
    total += region_bytes(cuda::attention_scratch_bound(std::max<int64_t>(s.max_seqs, 1), s.n_head, s.head_dim,
                                                        s.max_kv_len, sm_count_));
  if (s.lin_v_heads > 0 && cuda::gated_delta_chunked_supported(static_cast<int>(s.lin_k_dim), static_cast<int>(s.lin_v_dim)))
    total += region_bytes(cuda::gated_delta_chunked_scratch_bytes(static_cast<int>(s.lin_v_heads), static_cast<int>(s.lin_k_dim),
                                                                  static_cast<int>(s.lin_v_dim),
                                                                  static_cast<int>(std::max<int64_t>(s.max_seqs, 1))));
  // The small regions (sampling state, decode int8 activations, completion counters, router
  // flags): a few MiB each at most, 1 MiB minimum each.
  total += 8 * region_bytes(1 << 20) + region_bytes(std::max<int64_t>(s.logit_rows, 1) * 64 * 1024);
  // Outside the regions: kernels the runtime loads on first use (lazy module loading) and the decode
  // graphs' executables. Measured on an H100 (qwen3-next-80b-a3b Q4_K, --gpu-memory-limit 24): the
  // regions' estimate left 0.21 GiB of such memory over the limit.
  total += kRuntimeAllowanceBytes;
  return total;
}

}  // namespace ft
