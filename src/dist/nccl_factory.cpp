// dist/nccl_factory.h in a build without CUDA (the CUDA build's are in dist/cuda/).
#include "dist/nccl_factory.h"

#include "util/error.h"

namespace ft::dist {

#ifndef FT_HAVE_CUDA
bool nccl_available() { return false; }

std::string nccl_unavailable_reason() { return "this build of FreeToken has no CUDA backend, so no NCCL"; }

std::vector<std::unique_ptr<Collective>> make_nccl_group_on(const std::vector<Ops*>&) {
  fail(ErrorCode::kUnsupported, "make_nccl_group_on: {}", nccl_unavailable_reason());
}
#endif

}  // namespace ft::dist
