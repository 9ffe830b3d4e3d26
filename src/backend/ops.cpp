// Ops: the defaults of the optional parts of the interface (graphs) for backends without them.
#include "backend/ops.h"

#include "util/error.h"

namespace ft {

std::unique_ptr<StepGraph> Ops::capture(const std::function<void()>&) {
  fail(ErrorCode::kUnsupported, "{} backend: graph capture is not supported", name());
}

}  // namespace ft
