#pragma once
// The CUDA-graph check of an offloaded decode step, shared by the expert-cache tests
// (cuda_cache_test.cpp, cuda_offload_oai_test.cpp): one decode step of kLayers layers (each layer's
// prefetch targets prefetched with guessed routes, then its experts computed) is recorded as a graph on
// `graphed`, then replayed with new inputs `replays` times; every replay must equal the same step run
// eagerly on `eager` bit for bit, and, when `fused` is given, the resident experts' result too.
// CUDA builds only (the caller's #ifdef FT_HAVE_CUDA).
#include <gtest/gtest.h>
#include <cuda_runtime.h>

#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "moe/expert_compute.h"
#include "moe/moe_test_util.h"
#include "moe/offloaded_experts.h"

namespace ft::testing {

/** `dev(dtype, shape)` allocates a device tensor, `put(tensor, dtype, host values, shape)` uploads
 *  floats or int32s, `read(tensor)` returns its values as floats. x [1, H] is drawn in
 *  [-x_scale, x_scale], the k weights in [0, 1], routes and guesses over E experts (rng seed 9). */
template <int kLayers, class Dev, class Put, class Read>
void expect_graph_replays_equal_eager(Ops& gpu, OffloadedExperts& graphed, OffloadedExperts& eager,
                                      ResidentExperts* fused, int64_t H, int32_t k, int32_t E, float x_scale, Dev dev,
                                      Put put, Read read, int replays = 30) {
  Tensor x = dev(DType::BF16, {1, H}), w = dev(DType::F32, {1, k});
  Tensor ids[kLayers], guess[kLayers], out_g[kLayers], out_e[kLayers], out_f[kLayers];
  for (int l = 0; l < kLayers; ++l) {
    ids[l] = dev(DType::I32, {1, k}), guess[l] = dev(DType::I32, {1, k});
    out_g[l] = dev(DType::BF16, {1, H}), out_e[l] = dev(DType::BF16, {1, H}), out_f[l] = dev(DType::BF16, {1, H});
  }
  std::mt19937 rng(9);
  auto new_inputs = [&] {
    std::vector<float> xv(static_cast<size_t>(H)), wv(static_cast<size_t>(k));
    std::uniform_real_distribution<float> d(-1, 1);
    for (float& f : xv) f = x_scale * d(rng);
    for (float& f : wv) f = 0.5f + 0.5f * d(rng);
    put(x, DType::F32, xv, {1, H});
    put(w, DType::F32, wv, {1, k});
    for (Tensor* set : {ids, guess})
      for (int l = 0; l < kLayers; ++l) {
        std::vector<int32_t> iv = random_routes(1, k, E, 0.0, rng);
        put(set[l], DType::I32, iv, {1, k});
      }
  };
  auto step = [&](OffloadedExperts& ex, Tensor* out) {
    for (int64_t l = 0; l < kLayers; ++l) {
      const PrefetchTargets t = ex.prefetch_targets(l, 1);
      for (int i = 0; i < t.n; ++i) ex.prefetch(t.layer[i], guess[t.layer[i]]);
      ex.compute(l, x, ids[l], w, out[l]);
    }
  };
  new_inputs();
  step(graphed, out_g);  // warm-up: scratch and expert tables exist before capture
  step(eager, out_e);
  gpu.synchronize();
  cudaStream_t stream = dynamic_cast<CudaOps&>(gpu).stream();
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  step(graphed, out_g);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < replays; ++i) {
    new_inputs();
    ASSERT_EQ(cudaGraphLaunch(exec, stream), cudaSuccess);
    step(eager, out_e);
    for (int l = 0; l < kLayers; ++l) {
      const std::vector<float> a = read(out_g[l]), b = read(out_e[l]);
      ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "replay " << i << " layer " << l;
      if (!fused) continue;
      fused->compute(l, x, ids[l], w, out_f[l]);
      const std::vector<float> f = read(out_f[l]);
      ASSERT_EQ(std::memcmp(a.data(), f.data(), a.size() * 4), 0) << "replay " << i << " layer " << l << " vs fused";
    }
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace ft::testing
