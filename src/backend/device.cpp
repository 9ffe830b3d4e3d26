#include "backend/device.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ft {

int cuda_device_count() {
#ifdef FT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace ft
