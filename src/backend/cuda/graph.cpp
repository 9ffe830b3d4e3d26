// CudaOps::capture: records a step's kernels from the backend's stream into a CUDA graph and
// replays it with one cudaGraphLaunch (CUDA Programming Guide, "CUDA Graphs: stream capture").
// A decode step is ~1,000 small launches; replaying them as one graph removes the per-launch CPU
// cost that bounds batch-1 decode.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "util/error.h"

namespace ft {
namespace {

class CudaStepGraph final : public StepGraph {
 public:
  /** Owns `exec`; `generation` points at the backend's scratch generation, `at` its value when
   *  recorded. The backend must outlive the graph. */
  CudaStepGraph(cudaGraphExec_t exec, cudaStream_t stream, const int64_t* generation, int64_t at)
      : exec_(exec), stream_(stream), generation_(generation), at_(at) {}
  ~CudaStepGraph() override { cudaGraphExecDestroy(exec_); }
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  bool valid() const override { return *generation_ == at_; }
  void launch() override {
    if (!valid()) fail(ErrorCode::kInternal, "cuda graph: launched after a scratch region it reads moved");
    FT_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  const int64_t* generation_;
  int64_t at_;
};

/** Ends a capture on `stream` whatever its state, dropping the partial graph and the error it left. */
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t g = nullptr;
  cudaStreamEndCapture(stream, &g);
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
}

}  // namespace

std::unique_ptr<StepGraph> CudaOps::capture(const std::function<void()>& body) {
  const int64_t at = scratch_generation_;
  FT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (const Error& e) {
    abandon_capture(stream_);
    fail(ErrorCode::kUnsupported, "cuda graph capture failed inside the step: {}", e.what());
  } catch (...) {
    abandon_capture(stream_);
    throw;
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t err = cudaStreamEndCapture(stream_, &graph);
  if (err != cudaSuccess || !graph) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    fail(ErrorCode::kUnsupported, "cuda graph capture was invalidated: {}", cudaGetErrorString(err));
  }
  if (scratch_generation_ != at) {
    cudaGraphDestroy(graph);
    fail(ErrorCode::kUnsupported, "cuda graph capture: a scratch region grew while recording (run the step eagerly first)");
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ierr = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ierr != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kInternal, "cuda graph instantiate failed: {}", cudaGetErrorString(ierr));
  }
  return std::make_unique<CudaStepGraph>(exec, stream_, &scratch_generation_, at);
}

}  // namespace ft
