// The NCCL factories in a CUDA build configured without NCCL (nccl.h / libnccl not found): each
// refuses with kUnsupported, so the rest of the CUDA build links and runs single-GPU.
#include "dist/cuda/nccl_collective.h"
#include "util/error.h"

namespace ft::dist {
namespace {

[[noreturn]] void no_nccl(const char* what) {
  fail(ErrorCode::kUnsupported,
       "{}: this build has no NCCL (CMake found no nccl.h and libnccl under the CUDA toolkit; install NCCL and "
       "reconfigure, or set NCCL_ROOT)", what);
}

}  // namespace

bool nccl_available() { return false; }
NcclId nccl_unique_id() { no_nccl("nccl_unique_id"); }
std::vector<std::unique_ptr<Collective>> make_nccl_group(std::vector<int>, std::vector<cudaStream_t>) {
  no_nccl("make_nccl_group");
}
std::unique_ptr<Collective> make_nccl_rank(const NcclId&, int, int, int, cudaStream_t) { no_nccl("make_nccl_rank"); }

}  // namespace ft::dist
