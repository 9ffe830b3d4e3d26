// pdl_enabled() of pdl.cuh.
#include <cstdlib>
#include <cstring>

#include "backend/cuda/pdl.cuh"

namespace ft::cuda {

bool pdl_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("FT_CUDA_PDL");
    if (env && std::strcmp(env, "0") == 0) return false;
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    return major >= 9;
  }();
  return enabled;
}

}  // namespace ft::cuda
