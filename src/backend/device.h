#pragma once
// What compute devices this process can use.
#include <cstdint>
#include <string>

namespace ft {

/** Number of CUDA devices visible to this process; 0 when built without CUDA or no driver/device is present. Never throws. */
int cuda_device_count();

/** Free bytes of device memory on CUDA device `device` now (cudaMemGetInfo); 0 when built without
 *  CUDA or the query fails. Never throws. */
int64_t cuda_free_memory(int device);

/** The name and memory of CUDA device `device` ("NVIDIA H200, 139.8 GiB", cudaGetDeviceProperties);
 *  "" when built without CUDA or the query fails. Never throws. */
std::string cuda_device_name(int device);

}  // namespace ft
