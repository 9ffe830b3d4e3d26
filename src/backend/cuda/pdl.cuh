#pragma once
// Programmatic dependent launch (PDL; CUDA C++ Programming Guide, "Programmatic Dependent Launch and
// Synchronization", sm_90 and later). A kernel launched with launch_pdl may be scheduled while the
// kernel before it in the stream still runs; its blocks then wait in pdl_enter() until that kernel
// has completed and its writes are visible. What the launch saves is the gap between two dependent
// kernels (the drain of one grid and the launch of the next, ~1-2 us each in a decode graph), and a
// kernel may use the wait to do work that reads nothing the previous kernel writes (prefetch its
// weights into L2).
//
// Rules that keep it correct:
// - a thread calls pdl_enter() before it touches memory that earlier kernels write, and at least one
//   thread of every launch calls it (a grid that finished without waiting would let the next kernel,
//   which waits only for it, race the one before);
// - before pdl_enter() a kernel reads only constant data (weights, rotation tables) and the step's
//   batch info (positions, sequence slots, block tables, the valid-row count: copied by the host
//   before the step's first kernel), and writes nothing. L2 prefetches (prefetch_l2) may name any
//   global memory: they read no value, and L2 is coherent. When a kernel's blocks start, the
//   kernel before it has passed its own wait, so everything before that one is complete; only its
//   own writes are still in flight;
// - pdl_enter() waits first and only then lets the next kernel launch, so at most two grids of a
//   stream are resident at once;
// - a kernel that calls pdl_enter() but is launched with <<<>>> (or on a GPU before sm_90) behaves
//   as before: the wait returns at once.
#include <cuda_runtime.h>

#include <atomic>

#include <utility>

#include "backend/cuda/cuda_check.h"

namespace ft::cuda {

/** Waits for the previous kernel of the stream (a no-op without PDL), then allows the next kernel
 *  of the stream to launch. Call at the top of a kernel launched by launch_pdl. */
__device__ __forceinline__ void pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/** Asks L2 to fetch `bytes` (a multiple of 16, > 0) at `p` (16-byte aligned) of global memory
 *  (cp.async.bulk.prefetch.L2, sm_90). No effect on results; one thread issues it. */
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}

/** True when launch_pdl asks for programmatic serialization on the current device
 *  (ft::cuda_pdl_enabled of backend/cuda_factory.h: sm_90 code on an sm_90+ GPU, and neither
 *  FT_CUDA_PDL=0 nor set_cuda_pdl(false)). */
bool pdl_enabled();

/** A diagnostic on/off switch of the backend (PDL, moe_experts' fusions): set() (tests, A/B runs) wins;
 *  otherwise environment variable `env`, read once: off when it says 0, off, false or no (any case),
 *  on when it says anything else or is unset. */
class Switch {
 public:
  explicit constexpr Switch(const char* env) : env_(env) {}
  bool on() const;
  void set(bool on) { override_.store(on ? 1 : 0, std::memory_order_release); }

 private:
  const char* env_;
  std::atomic<int> override_{-1};         // -1: not set
  mutable std::atomic<int> from_env_{-1};  // -1: not read yet
};

/** True when thread block clusters may be launched on CUDA device `device`: an sm_90+ GPU running
 *  code compiled for sm_90+ (kernels built for older archs have no cluster instructions). Cached. */
bool clusters_possible(int device);

/** launch_pdl with thread block clusters of `cluster` blocks (each grid dimension a multiple of the
 *  cluster's; 1 x 1 x 1: no clusters). */
template <typename... P, typename... A>
void launch_pdl_cluster(void (*kernel)(P...), dim3 grid, dim3 cluster, dim3 block, size_t smem, cudaStream_t stream,
                        A&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (pdl_enabled()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster.x * cluster.y * cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster.x, attr[n].val.clusterDim.y = cluster.y, attr[n++].val.clusterDim.z = cluster.z;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
  cfg.attrs = attr, cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // taken, as FT_CUDA_LAUNCH_CHECK does: one failed launch is reported once
    FT_CUDA_CHECK(err);
  }
}

/** kernel<<<grid, block, smem, stream>>>(args...) with the programmatic-serialization attribute
 *  when pdl_enabled(). The kernel must call pdl_enter() (see the rules above). Throws kInternal
 *  when the launch fails. */
template <typename... P, typename... A>
void launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
  launch_pdl_cluster(kernel, grid, dim3(1, 1, 1), block, smem, stream, std::forward<A>(args)...);
}

}  // namespace ft::cuda
