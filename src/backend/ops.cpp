// Ops: the defaults of the optional parts of the interface: graphs (none) and the unfused norm_rope.
#include "backend/ops.h"

#include "util/error.h"

namespace ft {

void Ops::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x, const Tensor& positions) {
  if (p.head_dim < 1 || x.cols() % p.head_dim != 0)
    fail(ErrorCode::kInvalidArgument, "norm_rope: x {} rows are not whole heads of {}", x.str(), p.head_dim);
  Tensor heads = x.reshape({x.rows() * (x.cols() / p.head_dim), p.head_dim});
  rms_norm(np, heads, w, heads);
  rope(p, x, positions);
}

std::unique_ptr<StepGraph> Ops::capture(const std::function<void()>&) {
  fail(ErrorCode::kUnsupported, "{} backend: graph capture is not supported", name());
}

}  // namespace ft
