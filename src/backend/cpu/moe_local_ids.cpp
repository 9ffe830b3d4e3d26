// moe_local_ids: expert parallelism's routes masked to one rank's block of experts (CPU backend).
#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) {
  op_checks::moe_local_ids(ids, begin, end, n_expert, out);
  const int64_t n = ids.numel();
  if (n == 0) return;
  cpu::check_cpu("moe_local_ids", "ids", ids);
  cpu::check_cpu("moe_local_ids", "out", out);
  const int32_t* src = ids.ptr<int32_t>();
  int32_t* dst = out.ptr<int32_t>();
  // Every id is checked before any is written, so out (which may alias ids) is untouched on a throw.
  for (int64_t i = 0; i < n; ++i)
    if (src[i] >= n_expert)
      fail(ErrorCode::kInvalidArgument, "moe_local_ids: entry {} routes to expert {} of {}", i, src[i], n_expert);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = src[i];
    dst[i] = e >= begin && e < end ? e - begin : -1;  // negative: no expert
  }
}

}  // namespace ft
