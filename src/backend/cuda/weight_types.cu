// cuda_has_weight_kernel (backend/cuda_weight_types.h): the host side of dequant.cuh's type list.
#include "backend/cuda/dequant.cuh"
#include "backend/cuda_weight_types.h"

namespace ft {

bool cuda_has_weight_kernel(DType t) { return cuda::cuda_weight_type(t); }

std::string cuda_weight_kernel_types() {
  std::string out;
  for (uint32_t id = 0; id < 64; ++id) {  // the GGUF ids, in order
    DType t = static_cast<DType>(id);
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
