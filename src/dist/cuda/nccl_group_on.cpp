// make_nccl_group_on (dist/nccl_factory.h): make_nccl_group over the devices and streams of CUDA backends.
#include <cuda_runtime_api.h>

#include "backend/cuda_factory.h"
#include "dist/cuda/nccl_collective.h"
#include "dist/nccl_factory.h"
#include "util/error.h"

namespace ft::dist {

std::vector<std::unique_ptr<Collective>> make_nccl_group_on(const std::vector<Ops*>& ops) {
  if (ops.empty()) fail(ErrorCode::kInvalidArgument, "make_nccl_group_on: an NCCL group needs at least 1 rank");
  std::vector<int> devices;
  std::vector<cudaStream_t> streams;
  for (size_t r = 0; r < ops.size(); ++r) {
    if (!ops[r]) fail(ErrorCode::kInvalidArgument, "make_nccl_group_on: rank {}'s backend is null", r);
    devices.push_back(cuda_ops_device(*ops[r]));
    streams.push_back(static_cast<cudaStream_t>(cuda_ops_stream(*ops[r])));
  }
  return make_nccl_group(std::move(devices), std::move(streams));
}

}  // namespace ft::dist
