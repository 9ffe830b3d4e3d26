#include "dist/tensor_parallel.h"

#include "util/error.h"

namespace ft::dist {

void check_shard(const TpShard& tp) {
  if (tp.size < 1 || tp.rank < 0 || tp.rank >= tp.size)
    fail(ErrorCode::kInvalidArgument, "tensor-parallel rank {} of size {} is not a rank of the group", tp.rank, tp.size);
}

TpRange tp_split(int64_t n, const TpShard& tp, const char* what) {
  check_shard(tp);
  if (n <= 0 || n % tp.size != 0)
    fail(ErrorCode::kUnsupported, "{} ({}) is not a multiple of the tensor-parallel size ({}): give a "
         "--tensor-parallel-size that divides it", what, n, tp.size);
  const int64_t per = n / tp.size;
  return {tp.rank * per, per};
}

}  // namespace ft::dist
