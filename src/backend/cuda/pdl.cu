// pdl_enabled() and Switch of pdl.cuh, and the cuda_factory.h entries cuda_pdl_enabled / set_cuda_pdl.
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
Switch g_pdl("FT_CUDA_PDL");  // set_cuda_pdl

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

bool Switch::on() const {
  const int o = override_.load(std::memory_order_acquire);
  if (o >= 0) return o == 1;
  int e = from_env_.load(std::memory_order_acquire);
  if (e < 0) {
    const char* v = std::getenv(env_);
    std::string s = v ? v : "";
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    e = v && (s == "0" || s == "off" || s == "false" || s == "no") ? 0 : 1;
    from_env_.store(e, std::memory_order_release);
  }
  return e == 1;
}

bool clusters_possible(int device) { return possible(device); }

bool pdl_enabled() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return false;
  return cuda_pdl_enabled(device);
}

}  // namespace cuda

bool cuda_pdl_enabled(int device) { return cuda::g_pdl.on() && cuda::possible(device); }

void set_cuda_pdl(bool enabled) { cuda::g_pdl.set(enabled); }

}  // namespace ft
