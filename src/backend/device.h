#pragma once
// What compute devices this process can use.
namespace ft {

/** Number of CUDA devices visible to this process; 0 when built without CUDA or no driver/device is present. Never throws. */
int cuda_device_count();

}  // namespace ft
