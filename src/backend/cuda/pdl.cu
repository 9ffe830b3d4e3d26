// pdl_enabled() of pdl.cuh and the cuda_factory.h entries cuda_pdl_enabled / set_cuda_pdl.
#include <array>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <string>

#include "backend/cuda/pdl.cuh"
#include "backend/cuda_factory.h"

namespace ft {
namespace cuda {
namespace {

/** Compiled like every kernel of the backend: its attributes tell which code the driver loaded. */
__global__ void pdl_probe_kernel() {}

constexpr int kMaxDevices = 64;
std::array<std::atomic<int>, kMaxDevices> g_device_state{};  // 0 unknown, 1 possible, 2 not possible
std::atomic<int> g_override{-1};                             // -1 none, 0 off, 1 on

bool env_allows() {
  static const bool allows = env_switch_on("FT_CUDA_PDL");
  return allows;
}

/** The GPU is sm_90+ and the loaded code was compiled for sm_90+ (a build for an older arch runs
 *  there as JIT-compiled PTX whose pdl_enter() has no wait: such launches must not be relaxed). */
bool possible(int device) {
  if (device < 0 || device >= kMaxDevices) return false;
  int s = g_device_state[static_cast<size_t>(device)].load(std::memory_order_acquire);
  if (s == 0) {
    int major = 0;
    cudaFuncAttributes attr{};
    const bool ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                    cudaFuncGetAttributes(&attr, pdl_probe_kernel) == cudaSuccess;
    s = ok && major >= 9 && attr.ptxVersion >= 90 && attr.binaryVersion >= 90 ? 1 : 2;
    g_device_state[static_cast<size_t>(device)].store(s, std::memory_order_release);
  }
  return s == 1;
}

}  // namespace

bool env_switch_on(const char* name) {
  const char* e = std::getenv(name);
  if (!e) return true;
  std::string v(e);
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return !(v == "0" || v == "off" || v == "false" || v == "no");
}

bool clusters_possible(int device) { return possible(device); }

bool pdl_enabled() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return cuda_pdl_enabled(device);
}

}  // namespace cuda

bool cuda_pdl_enabled(int device) {
  const int o = cuda::g_override.load(std::memory_order_acquire);
  if (o == 0 || (o < 0 && !cuda::env_allows())) return false;
  return cuda::possible(device);
}

void set_cuda_pdl(bool enabled) { cuda::g_override.store(enabled ? 1 : 0, std::memory_order_release); }

}  // namespace ft
