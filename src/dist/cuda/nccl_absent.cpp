// The NCCL factories in a CUDA build configured without nccl.h (NCCL's header not found): each refuses
// with kUnsupported, so the rest of the CUDA build links and runs single-GPU. (With the header, NCCL
// itself is loaded at run time: dist/cuda/nccl_library.h.)
#include "dist/cuda/nccl_collective.h"
#include "util/error.h"

namespace ft::dist {
namespace {

[[noreturn]] void no_nccl(const char* what) { fail(ErrorCode::kUnsupported, "{}: {}", what, nccl_unavailable_reason()); }

}  // namespace

bool nccl_available() { return false; }
std::string nccl_unavailable_reason() {
  return "this build has no NCCL (CMake found no nccl.h under the CUDA toolkit; install NCCL's header and "
         "reconfigure, or set NCCL_ROOT)";
}
NcclId nccl_unique_id() { no_nccl("nccl_unique_id"); }
std::vector<std::unique_ptr<Collective>> make_nccl_group(std::vector<int>, std::vector<cudaStream_t>) {
  no_nccl("make_nccl_group");
}
std::unique_ptr<Collective> make_nccl_rank(const NcclId&, int, int, int, cudaStream_t) { no_nccl("make_nccl_rank"); }

}  // namespace ft::dist
