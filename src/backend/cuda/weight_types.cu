// cuda_has_weight_kernel (backend/cuda_weight_types.h): the host side of dequant.cuh's type list.
#include <vector>

#include "backend/cuda/dequant.cuh"
#include "backend/cuda_weight_types.h"

namespace ft {

bool cuda_has_weight_kernel(DType t) { return cuda::cuda_weight_type(t); }

std::string cuda_weight_kernel_types() {
  std::string out;
  std::vector<DType> ids;
  for (uint32_t id = 0; id < 64; ++id) ids.push_back(static_cast<DType>(id));  // the GGUF ids, in order
  ids.push_back(DType::F8_E4M3_B32);  // then FreeToken's stored FP8 and NVFP4 forms
  ids.push_back(DType::F8_E4M3_B16);
  ids.push_back(DType::NVFP4_G64);
  ids.push_back(DType::NVFP4_G16);
  for (DType t : ids) {
    bool known = true;
    try {
      dtype_info(t);
    } catch (...) {
      known = false;
    }
    if (known && cuda::cuda_weight_type(t)) out += (out.empty() ? "" : ", ") + std::string(dtype_name(t));
  }
  return out;
}

}  // namespace ft
